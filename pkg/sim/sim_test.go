package sim

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// The end-to-end run of the market and observers is test/e2e; these are the pure parts.

func TestObjectsPlacement(t *testing.T) {
	w := scenario.Workload{Name: "web", Namespace: "shop", Kind: "Deployment", Replicas: 12, CPU: "700m", Memory: "1Gi",
		Tier: "stateless", Protected: true, PDBMaxUnavailable: "20%", CapacityType: "spot"}
	tests := []struct {
		name            string
		protect         bool
		wantSelector    bool
		wantSpotLabel   bool
		workloadChanges func(*scenario.Workload)
	}{
		{name: "baseline pins capacity type", protect: false, wantSelector: true},
		{name: "lifeboat leaves placement to the tier", protect: true, wantSelector: false, wantSpotLabel: true},
		{name: "unprotected workload keeps its pin in lifeboat mode", protect: true, wantSelector: true,
			workloadChanges: func(w *scenario.Workload) { w.Protected = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := w
			if tt.workloadChanges != nil {
				tt.workloadChanges(&w)
			}
			obj, pdb := objects(w, tt.protect)
			d := obj.(*appsv1.Deployment)
			_, has := d.Spec.Template.Spec.NodeSelector[v1alpha1.LabelCapacityType]
			if has != tt.wantSelector {
				t.Errorf("nodeSelector present = %v, want %v", has, tt.wantSelector)
			}
			if got := d.Labels[v1alpha1.LabelSpot] == v1alpha1.SpotProtected; got != tt.wantSpotLabel {
				t.Errorf("protected label = %v, want %v", got, tt.wantSpotLabel)
			}
			if pdb == nil || pdb.Spec.MaxUnavailable.String() != "20%" {
				t.Errorf("PDB = %+v", pdb)
			}
		})
	}
	job := scenario.Workload{Name: "batch", Namespace: "shop", Kind: "Job", Replicas: 4, CPU: "500m", Memory: "512Mi", Tier: "best-effort", RunFor: scenario.Duration{Duration: 30 * time.Minute}}
	obj, pdb := objects(job, true)
	j := obj.(*batchv1.Job)
	if pdb != nil {
		t.Errorf("a Job without pdbMaxUnavailable got a PDB")
	}
	if j.Spec.PodFailurePolicy == nil || j.Spec.PodFailurePolicy.Rules[0].Action != batchv1.PodFailurePolicyActionIgnore {
		t.Errorf("a Spot Job must ignore disruptions in its failure count: %+v", j.Spec.PodFailurePolicy)
	}
	if *j.Spec.Parallelism != 4 || j.Spec.Template.Annotations["sim.lifeboat.dev/run-for"] != "30m0s" {
		t.Errorf("job = %+v", j.Spec)
	}
}

func TestCosts(t *testing.T) {
	s, err := scenario.Load("monday-reclaim-full")
	if err != nil {
		t.Fatal(err)
	}
	// 4 standby m5.xlarge with 40 GiB for 12 minutes, plus one node-hour active.
	c := costs(s, map[string]float64{"m5.xlarge": 3600})
	near := func(what string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %.6f, want %.6f", what, got, want)
		}
	}
	wantEBS := 4 * 40 * 0.08 / 730 * 0.2
	near("lifeboat per run", c.lifeboatRun, wantEBS+0.192)
	balloonsPerHour := 4 * (0.192*0.35 + 40*0.08/730) // Spot compute and the balloon nodes' volumes
	near("overprovisioning per run", c.overprovisioningRun, balloonsPerHour*0.2)
	// A month: the pool's EBS all month (4 × 40 GiB × $0.08 = $12.80) and the run's hour of
	// On-Demand four times (default runsPerMonth); four Spot m5.xlarge balloons all month.
	near("lifeboat per month", c.lifeboatMonth, 12.80+4*0.192)
	near("overprovisioning per month", c.overprovisioningMonth, 4*(0.192*0.35*730+40*0.08))
	if ratio := c.lifeboatMonth / c.overprovisioningMonth; ratio > 0.2 {
		t.Errorf("monthly ratio %.3f: the scenario's own figures should show the ≤ 0.2 goal", ratio)
	}
}

func TestInstanceTypesSkipPoolOnlyAndPriceZones(t *testing.T) {
	s, err := scenario.Load("monday-reclaim")
	if err != nil {
		t.Fatal(err)
	}
	its := instanceTypes(s)
	for _, it := range its {
		if it.Name == "m5.xlarge" {
			t.Fatalf("poolOnly type offered to Karpenter")
		}
	}
	var a, c float64
	for _, o := range its[0].Offerings {
		if o.CapacityType == "spot" && o.Zone == "us-east-1a" {
			a = o.Price
		}
		if o.CapacityType == "spot" && o.Zone == "us-east-1c" {
			c = o.Price
		}
	}
	if !(a > 0 && c > a) {
		t.Errorf("zoneSpotFactor not applied: 1a %.4f, 1c %.4f", a, c)
	}
}

func TestNodePrice(t *testing.T) {
	s, err := scenario.Load("monday-reclaim")
	if err != nil {
		t.Fatal(err)
	}
	price := nodePrice(s)
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	for _, tc := range []struct {
		name         string
		labels       map[string]string
		now, od      float64
		billsCompute bool
	}{
		{"spot in the cheapest zone", map[string]string{v1alpha1.LabelInstanceType: "c5.large", v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelZone: "us-east-1a"}, 0.085 * 0.35, 0.085, true},
		{"spot in a dearer zone", map[string]string{v1alpha1.LabelInstanceType: "c5.large", v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelZone: "us-east-1c"}, 0.085 * 0.35 * 1.15, 0.085, true},
		{"on-demand", map[string]string{v1alpha1.LabelInstanceType: "m5.large", v1alpha1.LabelCapacityType: "on-demand"}, 0.096, 0.096, true},
		{"active lifeboat", map[string]string{v1alpha1.LabelInstanceType: "m5.xlarge", v1alpha1.LabelPool: "sim", v1alpha1.LabelState: "active"}, 0.192, 0.192, true},
		{"hibernated lifeboat", map[string]string{v1alpha1.LabelInstanceType: "m5.xlarge", v1alpha1.LabelPool: "sim", v1alpha1.LabelState: "standby"}, 0, 0, false},
		{"unknown type", map[string]string{v1alpha1.LabelInstanceType: "x9.huge"}, 0, 0, false},
	} {
		now, od, ok := price(node(tc.labels))
		if ok != tc.billsCompute || math.Abs(now-tc.now) > 1e-12 || math.Abs(od-tc.od) > 1e-12 {
			t.Errorf("%s: price = %v, %v, %v; want %v, %v, %v", tc.name, now, od, ok, tc.now, tc.od, tc.billsCompute)
		}
	}
}

// The crunch narrows the NodePool to On-Demand and holds drifted Spot nodes with a zero budget
// (a real ICE only fails new launches); the end restores both.
func TestICENodePoolPatch(t *testing.T) {
	for _, crunch := range []bool{true, false} {
		var p struct {
			Spec struct {
				Disruption struct {
					Budgets []struct {
						Nodes   string   `json:"nodes"`
						Reasons []string `json:"reasons"`
					} `json:"budgets"`
				} `json:"disruption"`
				Template struct {
					Spec struct {
						Requirements []struct {
							Key    string   `json:"key"`
							Values []string `json:"values"`
						} `json:"requirements"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal([]byte(iceNodePoolPatch(crunch)), &p); err != nil {
			t.Fatalf("crunch=%v: %v", crunch, err)
		}
		b := p.Spec.Disruption.Budgets
		heldDrift := len(b) == 2 && b[0].Nodes == "0" && len(b[0].Reasons) == 1 && b[0].Reasons[0] == "Drifted"
		if heldDrift != crunch || b[len(b)-1].Nodes != "10%" {
			t.Errorf("crunch=%v: budgets %+v", crunch, b)
		}
		ct := p.Spec.Template.Spec.Requirements[0]
		if ct.Key != "karpenter.sh/capacity-type" || (crunch && len(ct.Values) != 1) || (!crunch && len(ct.Values) != 2) {
			t.Errorf("crunch=%v: capacity-type requirement %+v", crunch, ct)
		}
	}
}

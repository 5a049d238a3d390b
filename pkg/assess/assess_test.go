package assess

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func testPrices() *PriceTable {
	return &PriceTable{Source: "test", Date: "2026-12-01", Region: "us-east-1", SpotDiscount: 0.6,
		OnDemand: map[string]float64{"m5.large": 0.1, "m5.xlarge": 0.2}, Spot: map[string]float64{"m5.xlarge": 0.05}}
}

// testNode is a node in us-east-1a of the instance and capacity types (no label for ""), with
// cpu, mem and 29 pods.
func testNode(name, typ, capacity, cpu, mem string) corev1.Node {
	return *buildtest.Node(name, buildtest.Zone("us-east-1a"), buildtest.InstanceType(typ), buildtest.CapacityType(capacity),
		buildtest.Capacity(cpu, mem, "29"))
}

// testPod is the Pod ns/name on node with one container requesting cpu and mem (none for "").
func testPod(ns, name, node, cpu, mem string) corev1.Pod {
	return *buildtest.Pod(ns, name, buildtest.OnNode(node), buildtest.Requests(cpu, mem))
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.011 }

// TestCostModel: a Pod pays its dominant share of its node (requests / allocatable) × the
// node's price × 730 h; Spot is the table's Spot price, else On-Demand less the discount.
func TestCostModel(t *testing.T) {
	for _, tc := range []struct {
		name                string
		node                corev1.Node
		cpu, mem            string
		cost, onDemand, spt float64
		onSpot              int
	}{
		// 1 of 2 CPU = 0.5 share; 1 GiB of 8 GiB is smaller. 0.5 × 0.1 × 730 = 36.5.
		{"CPU-dominant on On-Demand", testNode("n", "m5.large", "on-demand", "2", "8Gi"), "1", "1Gi", 36.5, 36.5, 14.6, 0},
		// 4 GiB of 8 = 0.5 share on Spot: 0.5 × 0.1 × 0.4 × 730 = 14.6.
		{"memory-dominant on Spot", testNode("n", "m5.large", "spot", "2", "8Gi"), "100m", "4Gi", 14.6, 36.5, 14.6, 1},
		// the table's own Spot price wins over the discount: 0.25 × 0.05 × 730 = 9.125.
		{"per-type Spot price", testNode("n", "m5.xlarge", "spot", "4", "16Gi"), "1", "1Gi", 9.13, 36.5, 9.13, 1},
		{"share capped at the whole node", testNode("n", "m5.large", "on-demand", "2", "8Gi"), "3", "1Gi", 73, 73, 29.2, 0},
		{"no requests: no cost", testNode("n", "m5.large", "on-demand", "2", "8Gi"), "", "", 0, 0, 0, 0},
		{"EKS managed node group label", func() corev1.Node {
			n := testNode("n", "m5.large", "", "2", "8Gi")
			n.Labels[LabelEKSCapacityType] = "SPOT"
			return n
		}(), "1", "1Gi", 14.6, 36.5, 14.6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPod("shop", "p", "n", tc.cpu, tc.mem)
			r := Assess(&Snapshot{Nodes: []corev1.Node{tc.node}, Pods: []corev1.Pod{p}}, Options{Now: now, Prices: testPrices()})
			if len(r.Workloads) != 1 {
				t.Fatalf("workloads %+v", r.Workloads)
			}
			w := r.Workloads[0]
			if !near(w.MonthlyCost, tc.cost) || !near(w.MonthlyOnDemand, tc.onDemand) || !near(w.MonthlySpot, tc.spt) || w.OnSpotPods != tc.onSpot {
				t.Errorf("cost %.2f od %.2f spot %.2f onSpot %d; want %.2f %.2f %.2f %d", w.MonthlyCost, w.MonthlyOnDemand, w.MonthlySpot, w.OnSpotPods, tc.cost, tc.onDemand, tc.spt, tc.onSpot)
			}
			if !near(w.MonthlySavings, tc.onDemand-tc.spt) {
				t.Errorf("savings %.2f, want %.2f", w.MonthlySavings, tc.onDemand-tc.spt)
			}
		})
	}
}

// TestBadInput: whatever the cluster holds, Assess returns a report and names the problem.
func TestBadInput(t *testing.T) {
	notSpec := unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "r", "namespace": "shop"}, "spec": map[string]any{"replicas": "three"}}}
	weirdPool := unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "np"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"requirements": []any{"not a map", map[string]any{"key": 3}}}}}}}
	owned := testPod("shop", "custom-1", "typed", "1", "1Gi")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Thing", Name: "t", Controller: ptr(true)}}
	missingOwner := testPod("shop", "rs-gone-1", "typed", "1", "1Gi")
	missingOwner.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "gone", Controller: ptr(true)}}
	ssOwner := testPod("shop", "sts-gone-0", "typed", "1", "1Gi")
	ssOwner.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "gone", Controller: ptr(true)}}
	zeroNode := testNode("zero", "m5.large", "spot", "0", "0")
	s := &Snapshot{
		Nodes: []corev1.Node{testNode("untyped", "", "", "2", "8Gi"), testNode("unknown", "z1.huge", "spot", "2", "8Gi"), testNode("typed", "m5.large", "spot", "2", "8Gi"), zeroNode, {}},
		Pods: []corev1.Pod{testPod("shop", "a", "untyped", "1", "1Gi"), testPod("shop", "b", "unknown", "", ""), testPod("shop", "c", "nowhere", "1", "1Gi"),
			testPod("shop", "d", "zero", "1", "1Gi"), owned, missingOwner, ssOwner, {}},
		Rollouts:   []unstructured.Unstructured{notSpec},
		NodePools:  []unstructured.Unstructured{weirdPool},
		ListErrors: map[string]string{"cronjobs.batch": "forbidden"},
	}
	r := Assess(s, Options{Now: now, Prices: testPrices()})
	codes := map[string]bool{}
	for _, f := range r.Findings {
		codes[f.Code] = true
	}
	for _, want := range []string{"list-failed", "nodes-without-instance-type", "unknown-instance-type", "nodes-without-allocatable", "pods-not-on-nodes", "unpriced-pods", "bad-object", "nodepool-no-spot"} {
		if !codes[want] {
			t.Errorf("no %s finding in %+v", want, r.Findings)
		}
	}
	if len(r.Unclassified) != 1 || r.Unclassified[0].OwnerKind != "Thing" {
		t.Errorf("unclassified = %+v", r.Unclassified)
	}
	refs := map[string]bool{}
	for _, w := range r.Workloads {
		refs[w.Ref()] = true
	}
	for _, want := range []string{"shop/replicaset/gone", "shop/statefulset/gone", "shop/pod/b"} {
		if !refs[want] {
			t.Errorf("no workload %s in %v", want, refs)
		}
	}
	for _, render := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return r.WriteTable(b) }, func(b *bytes.Buffer) error { return r.WriteJSON(b) }, func(b *bytes.Buffer) error { return r.WriteHTML(b) },
	} {
		var b bytes.Buffer
		if err := render(&b); err != nil || b.Len() == 0 {
			t.Errorf("render: %v (%d bytes)", err, b.Len())
		}
	}
	// An empty cluster is a report too.
	empty := Assess(&Snapshot{}, Options{Now: now})
	if empty.Summary.Workloads != 0 || empty.Curve.Headline == "" || empty.Cluster.WarmPool.Note == "" {
		t.Errorf("empty cluster: %+v", empty)
	}
	if _, _, err := empty.Scenario(ScenarioOptions{Scale: 1}); err == nil {
		t.Error("a scenario of an empty cluster was written")
	}
}

func TestSavingsCurve(t *testing.T) {
	ws := []Workload{
		{Namespace: "a", Kind: "Deployment", Name: "big-risky", Class: ClassCheckpointNeeded, MonthlySavings: 100}, // 25 per risk
		{Namespace: "a", Kind: "Deployment", Name: "mid-ready", Class: ClassReady, MonthlySavings: 50},             // 50
		{Namespace: "a", Kind: "Deployment", Name: "small-fix", Class: ClassReadyWithChanges, MonthlySavings: 40},  // 20
		{Namespace: "a", Kind: "Deployment", Name: "db", Class: ClassPoorFit, MonthlySavings: 500},                 // not on the curve
		{Namespace: "a", Kind: "Deployment", Name: "free", Class: ClassReady, MonthlySavings: 0},                   // nothing to save
		{Namespace: "a", Kind: "Deployment", Name: "tiny", Class: ClassReady, MonthlySavings: 10},                  // 10
	}
	c := savingsCurve(ws, 200)
	var order []string
	for _, p := range c.Points {
		order = append(order, p.Workload)
	}
	want := "a/deployment/mid-ready a/deployment/big-risky a/deployment/small-fix a/deployment/tiny"
	if strings.Join(order, " ") != want {
		t.Errorf("order %v, want %s", order, want)
	}
	last := c.Points[len(c.Points)-1]
	if last.Cumulative != 200 || last.CumulativePercent != 100 || c.For80Percent != 3 {
		t.Errorf("curve %+v", c)
	}
	if !strings.Contains(c.Headline, "the first 3 of 4 workloads give 95 %") {
		t.Errorf("headline %q", c.Headline)
	}
}

func TestPrices(t *testing.T) {
	p, err := EmbeddedPrices()
	if err != nil {
		t.Fatal(err)
	}
	if od, ok := p.OnDemandHourly("m5.large"); !ok || od != 0.096 || p.Date == "" || !strings.Contains(p.Source, "karpenter-provider-aws") {
		t.Errorf("embedded table: m5.large %v %v, date %q, source %q", od, ok, p.Date, p.Source)
	}
	if len(p.OnDemand) < 500 {
		t.Errorf("embedded table has %d types", len(p.OnDemand))
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "prices.json")
	b, _ := json.Marshal(map[string]any{"source": "our EDP rates", "onDemandHourly": map[string]float64{"m5.large": 0.08, "z9.new": 1}, "spotHourly": map[string]float64{"m5.large": 0.03}})
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	over, err := LoadPrices(p, file)
	if err != nil {
		t.Fatal(err)
	}
	if od, _ := over.OnDemandHourly("m5.large"); od != 0.08 {
		t.Errorf("override m5.large = %v", od)
	}
	if sp, _ := over.SpotHourly("m5.large"); sp != 0.03 {
		t.Errorf("override spot m5.large = %v", sp)
	}
	if _, ok := over.OnDemandHourly("c5.large"); !ok {
		t.Error("types the file does not name are kept from the embedded table")
	}
	if sp, _ := over.SpotHourly("c5.large"); !near(sp, 0.085*0.35) {
		t.Errorf("c5.large spot = %v (discount %v)", sp, over.SpotDiscount)
	}
	flat, err := over.WithSpotDiscount(0.5)
	if err != nil {
		t.Fatal(err)
	}
	if sp, _ := flat.SpotHourly("m5.large"); sp != 0.04 {
		t.Errorf("--spot-discount 0.5 on 0.08 = %v, want 0.04 (per-type Spot prices dropped)", sp)
	}
	for _, bad := range []string{`{"onDemandHourly": {"m5.large": -1}}`, `{"spotDiscount": 1.5}`, `not json`} {
		if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadPrices(p, file); err == nil {
			t.Errorf("LoadPrices(%s) accepted", bad)
		}
	}
	if _, err := p.WithSpotDiscount(1); err == nil {
		t.Error("--spot-discount 1 accepted")
	}
}

func TestNodePools(t *testing.T) {
	np := func(name string, spec map[string]any) unstructured.Unstructured {
		return unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	req := func(key, op string, values ...any) any {
		return map[string]any{"key": key, "operator": op, "values": values}
	}
	reqs := func(r ...any) map[string]any {
		return map[string]any{"template": map[string]any{"spec": map[string]any{"requirements": r}}}
	}
	list := []unstructured.Unstructured{
		np("default-od", reqs()),
		np("diverse", reqs(req("karpenter.sh/capacity-type", "In", "spot", "on-demand"), req("karpenter.sh/instance-category", "In", "c", "m", "r"))),
		np("narrow", func() map[string]any {
			m := reqs(req("karpenter.sh/capacity-type", "In", "spot"), req("node.kubernetes.io/instance-type", "In", "m5.large", "c5.large"),
				req("topology.kubernetes.io/zone", "In", "us-east-1a", "us-east-1b"))
			m["disruption"] = map[string]any{"consolidationPolicy": "WhenEmpty"}
			return m
		}()),
		np("not-od", reqs(req("karpenter.sh/capacity-type", "NotIn", "on-demand"))),
	}
	var findings []Finding
	got := nodePools(list, map[string]*node{"n1": {nodePool: "diverse", instanceType: "m5.large", zone: "a"}, "n2": {nodePool: "diverse", instanceType: "c5.large", zone: "a"}}, &findings)
	byName := map[string]NodePool{}
	for _, p := range got {
		byName[p.Name] = p
	}
	if p := byName["default-od"]; p.SpotAllowed {
		t.Errorf("no capacity-type requirement is On-Demand only (Karpenter's default): %+v", p)
	}
	if p := byName["diverse"]; !p.SpotAllowed || p.Constrained || p.CapacityPools != 2 || p.Nodes != 2 || p.ConsolidationPolicy != "WhenEmptyOrUnderutilized" {
		t.Errorf("diverse: %+v", p)
	}
	if p := byName["narrow"]; !p.SpotAllowed || !p.Constrained || p.CapacityPools != 4 {
		t.Errorf("narrow: %+v", p)
	}
	if p := byName["not-od"]; !p.SpotAllowed {
		t.Errorf("NotIn on-demand allows Spot: %+v", p)
	}
	var codes []string
	for _, f := range findings {
		codes = append(codes, f.Code+":"+strings.Fields(f.Message)[1])
	}
	want := "nodepool-no-spot:default-od nodepool-few-pools:narrow nodepool-when-empty:narrow"
	if strings.Join(codes, " ") != want {
		t.Errorf("findings %v, want %s", codes, want)
	}
}

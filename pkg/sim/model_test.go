package sim

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// The PDB is created with the field the scenario gives, typed as a manifest would type it, and
// the report's floor follows the disruption controller's rounding for either field.
func TestObjectsPDB(t *testing.T) {
	base := scenario.Workload{Name: "web", Namespace: "shop", Kind: "Deployment", Replicas: 12, CPU: "700m", Memory: "1Gi", Tier: "stateless"}
	tests := []struct {
		name             string
		maxU, minA       string
		wantMax, wantMin *intstr.IntOrString
		wantFloor        int32
		wantNoPDB        bool
	}{
		{name: "maxUnavailable percent", maxU: "20%", wantMax: ptrIOS(intstr.FromString("20%")), wantFloor: 9},
		{name: "maxUnavailable count", maxU: "1", wantMax: ptrIOS(intstr.FromInt32(1)), wantFloor: 11},
		{name: "maxUnavailable 0", maxU: "0", wantMax: ptrIOS(intstr.FromInt32(0)), wantFloor: 12},
		{name: "maxUnavailable 0%", maxU: "0%", wantMax: ptrIOS(intstr.FromString("0%")), wantFloor: 12},
		{name: "minAvailable count", minA: "2", wantMin: ptrIOS(intstr.FromInt32(2)), wantFloor: 2},
		{name: "minAvailable percent", minA: "80%", wantMin: ptrIOS(intstr.FromString("80%")), wantFloor: 10},
		{name: "minAvailable 100%", minA: "100%", wantMin: ptrIOS(intstr.FromString("100%")), wantFloor: 12},
		{name: "minAvailable = replicas", minA: "12", wantMin: ptrIOS(intstr.FromInt32(12)), wantFloor: 12},
		{name: "no PDB", wantNoPDB: true, wantFloor: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := base
			w.PDBMaxUnavailable, w.PDBMinAvailable = tt.maxU, tt.minA
			_, pdb := objects(w, false)
			if got := pdbFloor(w); got != tt.wantFloor {
				t.Errorf("pdbFloor = %d, want %d", got, tt.wantFloor)
			}
			if tt.wantNoPDB {
				if pdb != nil {
					t.Errorf("got a PDB without pdbMaxUnavailable or pdbMinAvailable: %+v", pdb.Spec)
				}
				return
			}
			if pdb == nil {
				t.Fatal("no PDB")
			}
			if pdb.Name != "web" || pdb.Namespace != "shop" || pdb.Spec.Selector.MatchLabels[LabelWorkload] != "web" {
				t.Errorf("PDB meta/selector %+v %+v", pdb.ObjectMeta, pdb.Spec.Selector)
			}
			if !sameIOS(pdb.Spec.MaxUnavailable, tt.wantMax) || !sameIOS(pdb.Spec.MinAvailable, tt.wantMin) {
				t.Errorf("PDB maxUnavailable %v minAvailable %v, want %v %v", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, tt.wantMax, tt.wantMin)
			}
		})
	}
}

func ptrIOS(v intstr.IntOrString) *intstr.IntOrString { return &v }

func sameIOS(a, b *intstr.IntOrString) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// layoutOf counts, per scenario workload, the nodes running its Pods and those of them running
// another workload's too; unbound, terminating, finished and non-scenario Pods do not count.
func TestLayoutOf(t *testing.T) {
	pod := func(ns, workload, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{}}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if workload != "" {
			p.Labels[LabelWorkload] = workload
		}
		return p
	}
	gone := pod("shop", "web", "n4")
	gone.DeletionTimestamp = &metav1.Time{}
	done := pod("jobs", "workers", "n1")
	done.Status.Phase = corev1.PodSucceeded
	got := layoutOf([]*corev1.Pod{
		pod("shop", "web", "n1"), pod("shop", "web", "n1"), pod("jobs", "workers", "n1"), // shared
		pod("shop", "web", "n2"),                                   // web alone
		pod("jobs", "workers", "n3"), pod("kube-system", "", "n3"), // a DaemonSet's Pod is not a workload
		pod("jobs", "workers", ""), // Pending
		gone, done,
	})
	want := map[string]nodeShare{"shop/web": {nodes: 2, shared: 1}, "jobs/workers": {nodes: 2, shared: 1}}
	if !maps.Equal(got, want) {
		t.Errorf("layoutOf = %+v, want %+v", got, want)
	}
	if got := layoutOf(nil); len(got) != 0 {
		t.Errorf("layoutOf(nil) = %+v", got)
	}
}

package assess

import (
	"reflect"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

func TestZoneSpotFactor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zones []string
		pool  string
		want  map[string]float64
	}{
		{"exposed zone cheapest", []string{"a", "b", "c"}, "m5.large/b/spot", map[string]float64{"a": 1.08, "b": 1, "c": 1.08}},
		{"one zone", []string{"a"}, "m5.large/a/spot", nil},
		{"zone not modelled", []string{"a", "b"}, "m5.large/z/spot", nil},
		{"no exposed pool", []string{"a", "b"}, "", nil},
		{"malformed pool", []string{"a", "b"}, "a/b", nil},
	} {
		if got := zoneSpotFactor(tc.zones, tc.pool); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: zoneSpotFactor(%v, %q) = %v, want %v", tc.name, tc.zones, tc.pool, got, tc.want)
		}
	}
}

func TestScenarioPDB(t *testing.T) {
	maxU := func(v intstr.IntOrString) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &v}}
	}
	minA := func(v intstr.IntOrString) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &v}}
	}
	for _, tc := range []struct {
		name             string
		pdbs             []*policyv1.PodDisruptionBudget
		scale            float64
		replicas         int32
		wantMax, wantMin string
	}{
		{"none: the suggested PDB", nil, 1, 3, "20%", ""},
		{"percentage kept", []*policyv1.PodDisruptionBudget{maxU(intstr.FromString("25%"))}, 0.1, 1, "25%", ""},
		{"count scaled", []*policyv1.PodDisruptionBudget{maxU(intstr.FromInt32(4))}, 0.5, 5, "2", ""},
		{"count capped at replicas", []*policyv1.PodDisruptionBudget{minA(intstr.FromInt32(10))}, 1, 3, "", "3"},
		{"zero kept", []*policyv1.PodDisruptionBudget{maxU(intstr.FromInt32(0))}, 0.5, 2, "0", ""},
		{"first PDB wins", []*policyv1.PodDisruptionBudget{minA(intstr.FromInt32(1)), maxU(intstr.FromInt32(1))}, 1, 3, "", "1"},
		{"no budget set", []*policyv1.PodDisruptionBudget{{}}, 1, 3, "", ""},
	} {
		gotMax, gotMin := scenarioPDB(tc.pdbs, tc.scale, tc.replicas)
		if gotMax != tc.wantMax || gotMin != tc.wantMin {
			t.Errorf("%s: scenarioPDB = (%q, %q), want (%q, %q)", tc.name, gotMax, gotMin, tc.wantMax, tc.wantMin)
		}
	}
}

func TestCorrelatedExposure(t *testing.T) {
	items := func(counts map[string]int) map[string][]sizing.Item {
		out := map[string][]sizing.Item{}
		for pool, n := range counts {
			out[pool] = make([]sizing.Item, n)
		}
		return out
	}
	pools := map[string]*CapacityPool{"m5/a/spot": {Nodes: 3}, "c5/a/spot": {Nodes: 1}, "m5/a/on-demand": {Nodes: 2}}
	for _, tc := range []struct {
		name      string
		it        podItems
		want      Exposure
		sizedPool string
	}{
		{"eligible on Spot",
			podItems{eligible: items(map[string]int{"m5/a/spot": 3, "c5/a/spot": 1}), all: items(map[string]int{"m5/a/spot": 3, "c5/a/spot": 1}), totalEligible: 6},
			Exposure{Basis: "eligible", Pool: "m5/a/spot", Pods: 3, Of: 6, Share: 0.5, Nodes: 3}, "m5/a/spot"},
		{"protected first",
			podItems{eligible: items(map[string]int{"m5/a/spot": 3}), protected: items(map[string]int{"c5/a/spot": 1}), totalEligible: 3, totalProtected: 3},
			Exposure{Basis: "protected", Pool: "c5/a/spot", Pods: 1, Of: 3, Share: 0.333, Nodes: 1}, "c5/a/spot"},
		{"ties by name",
			podItems{eligible: items(map[string]int{"m5/a/spot": 2, "c5/a/spot": 2}), totalEligible: 4},
			Exposure{Basis: "eligible", Pool: "c5/a/spot", Pods: 2, Of: 4, Share: 0.5, Nodes: 1}, "c5/a/spot"},
		{"none on Spot: the busiest pool as if Spot",
			podItems{eligible: items(nil), all: items(map[string]int{"m5/a/on-demand": 2}), totalEligible: 2},
			Exposure{Basis: "eligible", Pool: "m5/a/on-demand", Pods: 2, Of: 2, Share: 1, Nodes: 2,
				Note: "no eligible Pods run on Spot nodes yet; the warm pool is sized for the busiest pool as if it were Spot"}, "m5/a/on-demand"},
		{"no Pods at all",
			podItems{eligible: items(nil), all: items(nil)},
			Exposure{Basis: "eligible", Note: "no eligible Pods run on Spot nodes yet; the warm pool is sized for the busiest pool as if it were Spot"}, ""},
	} {
		got, sized := correlatedExposure(tc.it, pools)
		if got != tc.want {
			t.Errorf("%s: exposure = %+v, want %+v", tc.name, got, tc.want)
		}
		if p, _ := busiestPool(sized); p != tc.sizedPool {
			t.Errorf("%s: warm pool sized for %q, want %q", tc.name, p, tc.sizedPool)
		}
	}
}

func TestExposureFinding(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Exposure
		want bool
	}{
		{"over 30 % in a Spot pool", Exposure{Pool: "m5/a/spot", Share: 0.5}, true},
		{"30 % exactly", Exposure{Pool: "m5/a/spot", Share: 0.3}, false},
		{"On-Demand pool (nothing on Spot yet)", Exposure{Pool: "m5/a/on-demand", Share: 1}, false},
		{"no pool", Exposure{Share: 1}, false},
	} {
		if _, got := exposureFinding(tc.e); got != tc.want {
			t.Errorf("%s: exposureFinding(%+v) = %v, want %v", tc.name, tc.e, got, tc.want)
		}
	}
}

func TestTypesByNodes(t *testing.T) {
	got := typesByNodes(map[string]int{"r5.large": 1, "m5.large": 3, "c5.large": 1, "m6i.large": 3})
	if want := []string{"m5.large", "m6i.large", "c5.large", "r5.large"}; !reflect.DeepEqual(got, want) {
		t.Errorf("typesByNodes = %v, want %v (most nodes first, ties by name)", got, want)
	}
}

func TestIsQuorumSize(t *testing.T) {
	for n, want := range map[int32]bool{1: false, 2: false, 3: true, 4: false, 5: true, 7: true, 9: false} {
		if got := isQuorumSize(n); got != want {
			t.Errorf("isQuorumSize(%d) = %v, want %v", n, got, want)
		}
	}
}

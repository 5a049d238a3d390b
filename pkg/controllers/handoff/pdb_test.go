package handoff

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
)

func TestBlockedForGood(t *testing.T) {
	p := stsPod("db-1", buildtest.Labels(map[string]string{"app": "db"}))
	pdb := func(selector map[string]string, allowed, healthy, expected int32) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: selector}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: healthy, ExpectedPods: expected},
		}
	}
	db := map[string]string{"app": "db"}
	for name, tc := range map[string]struct {
		pdbs []policyv1.PodDisruptionBudget
		want bool
	}{
		"pacing: another replica is moving":           {pdbs: []policyv1.PodDisruptionBudget{pdb(db, 0, 4, 5)}, want: false},
		"allows no disruption with every Pod healthy": {pdbs: []policyv1.PodDisruptionBudget{pdb(db, 0, 5, 5)}, want: true},
		"allows one":             {pdbs: []policyv1.PodDisruptionBudget{pdb(db, 1, 5, 5)}, want: false},
		"another workload's PDB": {pdbs: []policyv1.PodDisruptionBudget{pdb(map[string]string{"app": "web"}, 0, 5, 5)}, want: false},
		"no PDB":                 {want: false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := BlockedForGood(p, tc.pdbs); got != tc.want {
				t.Errorf("BlockedForGood = %v, want %v", got, tc.want)
			}
		})
	}
}

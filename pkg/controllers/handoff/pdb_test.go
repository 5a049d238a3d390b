package handoff

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
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

// TestBudgetFreedWakesSeatLifeboats: a PodDisruptionBudget that allows a disruption again wakes
// the lifeboats of the seats kept for Pods of its namespace, once each; other updates do not.
func TestBudgetFreedWakesSeatLifeboats(t *testing.T) {
	budget := func(allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	for _, tt := range []struct {
		old, new int32
		want     bool
	}{{0, 1, true}, {1, 1, false}, {1, 0, false}, {0, 0, false}} {
		if got := budgetFreed.Update(event.UpdateEvent{ObjectOld: budget(tt.old), ObjectNew: budget(tt.new)}); got != tt.want {
			t.Errorf("disruptions allowed %d → %d: wakes %v, want %v", tt.old, tt.new, got, tt.want)
		}
	}
	seat := func(name, forPod, lifeboat string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lifeboat-system", Name: name, Labels: map[string]string{v1alpha1.LabelSeat: "true"},
			Annotations: map[string]string{v1alpha1.AnnotationSeatFor: forPod, v1alpha1.AnnotationSeatNode: lifeboat}}}
	}
	c := fakeClient(interceptor.Funcs{}, seat("s1", "app/db-0", "lb-1"), seat("s2", "app/db-1", "lb-1"), seat("s3", "app/db-2", "lb-2"), seat("s4", "other/x-0", "lb-3"))
	ctrl := New(c, clocktesting.NewFakeClock(hpaNow), events.NewFakeRecorder(10))
	ctrl.Namespace = "lifeboat-system"
	var got []string
	for _, r := range ctrl.seatLifeboatsIn(context.Background(), budget(1)) {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if want := []string{"lb-1", "lb-2"}; !slices.Equal(got, want) {
		t.Errorf("woken lifeboats %v, want %v", got, want)
	}
}

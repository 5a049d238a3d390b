package sim

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// TestRecordBoot: the observer times creation → Ready of Karpenter's Nodes created since t0,
// once each; pool nodes, Nodes from before t0 and Nodes not Ready yet are not counted.
func TestRecordBoot(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 18, 54, 58, 200_000_000, time.UTC)
	node := func(name string, labels map[string]string, created time.Time, readyAt time.Time) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(created)}}
		if !readyAt.IsZero() {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)}}
		} else {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}
		return n
	}
	karpenter := map[string]string{karpenterNodePoolLabel: "default"}
	o := &observer{boots: map[string]time.Duration{}}
	// Before t0 nothing counts.
	o.recordBoot(node("early", karpenter, t0.Add(-time.Minute), t0.Add(-time.Second)))
	o.start = t0
	created := t0.Truncate(time.Second) // creationTimestamp has whole seconds
	for _, n := range []*corev1.Node{
		node("booted", karpenter, created, created.Add(78*time.Second)),
		node("booting", karpenter, created, time.Time{}),
		node("old", karpenter, t0.Add(-time.Minute), t0.Add(time.Second)),
		node("lifeboat", map[string]string{karpenterNodePoolLabel: "default", v1alpha1.LabelPool: "sim"}, created, created.Add(40*time.Second)),
		node("other", map[string]string{}, created, created.Add(5*time.Second)),
	} {
		o.recordBoot(n)
	}
	// A later update (a heartbeat moving lastTransitionTime, say) does not count again.
	o.recordBoot(node("booted", karpenter, created, created.Add(90*time.Second)))
	o.recordBoot(node("booting", karpenter, created, created.Add(61*time.Second)))
	got := o.nodeBoots()
	slices.Sort(got)
	if want := []time.Duration{61 * time.Second, 78 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("boots = %v, want %v", got, want)
	}
}

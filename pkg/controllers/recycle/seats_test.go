package recycle

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// withSeatRecords is servedNode with the handoff's and the bridge's seat records.
func withSeatRecords(seats, bridge policy.SeatRecord) *corev1.Node {
	n := servedNode()
	if seats != nil {
		n.Annotations[v1alpha1.AnnotationSeats] = seats.String()
	}
	if bridge != nil {
		n.Annotations[v1alpha1.AnnotationBridgeSeats] = bridge.String()
	}
	return n
}

func podOn(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
}

func TestAwaitingReplacement(t *testing.T) {
	fresh := policy.SeatEntry{Host: "host-1", At: now.Add(-time.Minute)}
	stale := policy.SeatEntry{Host: "host-1", At: now.Add(-policy.SeatRecordTTL - time.Minute)}
	tests := []struct {
		name string
		node *corev1.Node
		pods []*corev1.Pod
		want []string
	}{
		{"no records", servedNode(), nil, nil},
		{"re-created elsewhere", withSeatRecords(policy.SeatRecord{"app/db-0": fresh}, nil), []*corev1.Pod{podOn("app", "db-0", "host-1")}, nil},
		// Created, not yet bound: the webhook has met it already.
		{"re-created, pending", withSeatRecords(policy.SeatRecord{"app/db-0": fresh}, nil), []*corev1.Pod{podOn("app", "db-0", "")}, nil},
		{"not re-created yet", withSeatRecords(policy.SeatRecord{"app/db-0": fresh, "app/db-1": fresh}, nil), []*corev1.Pod{podOn("app", "db-0", "host-1")}, []string{"app/db-1"}},
		{"the predecessor, terminal, still on the node", withSeatRecords(policy.SeatRecord{"app/db-0": fresh}, nil), []*corev1.Pod{podOn("app", "db-0", "lb-1")}, []string{"app/db-0"}},
		{"the bridge's record counts too", withSeatRecords(nil, policy.SeatRecord{"app/db-2": fresh}), nil, []string{"app/db-2"}},
		{"one Pod in both records is named once", withSeatRecords(policy.SeatRecord{"app/db-2": fresh}, policy.SeatRecord{"app/db-2": fresh}), nil, []string{"app/db-2"}},
		{"a past handoff's entry does not count", withSeatRecords(policy.SeatRecord{"app/db-0": stale}, nil), nil, nil},
		{"a malformed record names none", func() *corev1.Node {
			n := servedNode()
			n.Annotations[v1alpha1.AnnotationSeats] = "{oops"
			return n
		}(), nil, nil},
	}
	for _, tt := range tests {
		pods := map[string]*corev1.Pod{}
		for _, p := range tt.pods {
			pods[p.Namespace+"/"+p.Name] = p
		}
		if got := AwaitingReplacement(tt.node, pods, now); !slices.Equal(got, tt.want) {
			t.Errorf("%s: AwaitingReplacement = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTerminateWaitsForReplacements: an empty lifeboat whose seat record names a Pod not yet
// re-created keeps its instance (and its Node, with the record the webhook reads) until the Pod
// is re-created, or for SeatReplacementWait at most.
func TestTerminateWaitsForReplacements(t *testing.T) {
	record := policy.SeatRecord{"app/db-4": {Host: "host-1", At: now.Add(-time.Minute)}}

	t.Run("until the Pod is re-created", func(t *testing.T) {
		ctrl, c, f := setup(t, testPool(v1alpha1.AfterUseTerminate), withSeatRecords(record, nil))
		if res := reconcileNode(t, ctrl); res.RequeueAfter == 0 || len(f.Terminated) != 0 {
			t.Fatalf("requeue %v, terminated %v: want a wait while app/db-4 is not re-created", res.RequeueAfter, f.Terminated)
		}
		if err := c.Create(t.Context(), podOn("app", "db-4", "")); err != nil {
			t.Fatal(err)
		}
		reconcileNode(t, ctrl)
		if len(f.Terminated) != 1 {
			t.Errorf("terminated %v after the Pod was re-created, want i-1", f.Terminated)
		}
	})

	t.Run("at most SeatReplacementWait", func(t *testing.T) {
		ctrl, _, f := setup(t, testPool(v1alpha1.AfterUseTerminate), withSeatRecords(record, nil))
		clk := ctrl.clock.(*clocktesting.FakeClock)
		reconcileNode(t, ctrl)
		clk.Step(SeatReplacementWait - time.Second)
		if reconcileNode(t, ctrl); len(f.Terminated) != 0 {
			t.Fatalf("terminated %v before SeatReplacementWait", f.Terminated)
		}
		clk.Step(time.Second)
		if reconcileNode(t, ctrl); len(f.Terminated) != 1 {
			t.Errorf("terminated %v after SeatReplacementWait, want i-1 (a StatefulSet scaled down never re-creates it)", f.Terminated)
		}
	})
}

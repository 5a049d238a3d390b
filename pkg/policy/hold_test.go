package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

var holdNow = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

// holdPod is a protected Pod of a ReplicaSet, with extra annotations.
func holdPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api-a", Annotations: annotations,
			Labels:          map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(v1alpha1.TierStateless)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "api-1", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "spot-1"},
	}
}

// drainedSpotNode is a Spot node whose deletion was requested at deleted.
func drainedSpotNode(deleted time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1",
		Labels:            map[string]string{v1alpha1.LabelCapacityType: "spot"},
		DeletionTimestamp: &metav1.Time{Time: deleted}, Finalizers: []string{"karpenter.sh/termination"}}}
}

func TestEvictionHold(t *testing.T) {
	const pending = 10 * time.Second
	future := holdNow.Add(40 * time.Second)
	deleted := holdNow.Add(-3 * time.Second)

	withPod := func(f func(p *corev1.Pod)) *corev1.Pod {
		p := holdPod(nil)
		f(p)
		return p
	}
	withNode := func(f func(n *corev1.Node)) *corev1.Node {
		n := drainedSpotNode(deleted)
		f(n)
		return n
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		node    *corev1.Node
		now     time.Time
		pending time.Duration
		hold    bool
		until   time.Time
		reason  string // a substring of the verdict's reason
	}{
		{name: "hold annotation in the future", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: future.Format(time.RFC3339Nano)}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, hold: true, until: future, reason: "holds this Pod until"},
		{name: "hold annotation with nanoseconds and an offset", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: "2026-11-29T22:00:01.5+01:00"}),
			now: holdNow, pending: pending, hold: true, until: holdNow.Add(1500 * time.Millisecond)},
		{name: "hold annotation wins on an on-demand node and for a bare Pod", pod: withPod(func(p *corev1.Pod) {
			p.OwnerReferences = nil
			p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: future.Format(time.RFC3339Nano)}
		}), node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "od-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "on-demand"}}},
			now: holdNow, pending: pending, hold: true, until: future},
		{name: "hold annotation expired", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: holdNow.Add(-time.Second).Format(time.RFC3339Nano)}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "expired"},
		{name: "hold annotation exactly now is expired", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: holdNow.Format(time.RFC3339Nano)}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "expired"},
		{name: "expired hold annotation is not replaced by the pending hold", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: holdNow.Add(-time.Second).Format(time.RFC3339Nano)}),
			node: drainedSpotNode(holdNow.Add(-time.Second)), now: holdNow, pending: pending},
		{name: "released", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "released"},
		{name: "unparsable", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: "tomorrow"}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "unparsable"},
		{name: "empty annotation is unparsable", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: ""}),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "unparsable"},

		{name: "pending: protected ReplicaSet Pod on a Spot node being deleted", pod: holdPod(nil), node: drainedSpotNode(deleted),
			now: holdNow, pending: pending, hold: true, until: deleted.Add(pending), reason: "preparing a lifeboat"},
		{name: "pending: StatefulSet Pod", pod: withPod(func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "StatefulSet" }), node: drainedSpotNode(deleted),
			now: holdNow, pending: pending, hold: true, until: deleted.Add(pending)},
		{name: "pending: decided for a lifeboat", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.Annotations = map[string]string{v1alpha1.AnnotationResumeDecision: "lb-1"} }),
			now:  holdNow, pending: pending, hold: true, until: deleted.Add(pending)},
		{name: "pending: 11 s later the drain proceeds", pod: holdPod(nil), node: drainedSpotNode(deleted),
			now: holdNow.Add(11 * time.Second), pending: pending, reason: "did not decide in time"},
		{name: "pending: exactly at the end the drain proceeds", pod: holdPod(nil), node: drainedSpotNode(deleted),
			now: deleted.Add(pending), pending: pending},
		// A node that got no lifeboat is held pending too: the bridge controller releases its
		// Pods (a seat on another interrupted node's lifeboat may still be free).
		{name: "decision none is held pending until the controller releases", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.Annotations = map[string]string{v1alpha1.AnnotationResumeDecision: "none"} }),
			now:  holdNow, pending: pending, hold: true, until: deleted.Add(pending)},
		{name: "decision none, pending over", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.Annotations = map[string]string{v1alpha1.AnnotationResumeDecision: "none"} }),
			now:  deleted.Add(pending), pending: pending},
		{name: "on-demand node", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.Labels[v1alpha1.LabelCapacityType] = "on-demand" }),
			now:  holdNow, pending: pending, reason: "not on a Spot node"},
		{name: "node without capacity type", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.Labels = nil }), now: holdNow, pending: pending},
		{name: "Spot node not being drained", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) { n.DeletionTimestamp, n.Finalizers = nil, nil }),
			now:  holdNow, pending: pending, reason: "not being drained"},
		{name: "not protected", pod: withPod(func(p *corev1.Pod) { delete(p.Labels, v1alpha1.LabelProtected) }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending, reason: "not a Pod Lifeboat bridges"},
		{name: "protected label not true", pod: withPod(func(p *corev1.Pod) { p.Labels[v1alpha1.LabelProtected] = "false" }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "critical tier", pod: withPod(func(p *corev1.Pod) { p.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCritical) }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "Job-owned", pod: withPod(func(p *corev1.Pod) { p.OwnerReferences[0].Kind, p.OwnerReferences[0].APIVersion = "Job", "batch/v1" }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "bare Pod", pod: withPod(func(p *corev1.Pod) { p.OwnerReferences = nil }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "ReplicaSet owner that is not the controller", pod: withPod(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "terminating Pod", pod: withPod(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: holdNow.Add(-time.Second)} }),
			node: drainedSpotNode(deleted), now: holdNow, pending: pending},
		{name: "node nil", pod: holdPod(nil), node: nil, now: holdNow, pending: pending},
		{name: "pending 0", pod: holdPod(nil), node: drainedSpotNode(deleted), now: holdNow, pending: 0, reason: "disabled"},
		{name: "pending negative", pod: holdPod(nil), node: drainedSpotNode(deleted), now: holdNow, pending: -time.Second},

		{name: "Karpenter's disrupted taint starts the drain", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) {
				n.DeletionTimestamp, n.Finalizers = nil, nil
				n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: holdNow.Add(-2 * time.Second)}}}
			}), now: holdNow, pending: pending, hold: true, until: holdNow.Add(8 * time.Second)},
		{name: "disrupted taint without TimeAdded does not start the drain", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) {
				n.DeletionTimestamp, n.Finalizers = nil, nil
				n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}
			}), now: holdNow, pending: pending},
		{name: "Lifeboat's interrupted-at starts the drain", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) {
				n.DeletionTimestamp, n.Finalizers = nil, nil
				n.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: holdNow.Add(-4 * time.Second).Format(time.RFC3339)}
			}), now: holdNow, pending: pending, hold: true, until: holdNow.Add(6 * time.Second)},
		{name: "earliest of taint, mark and deletion wins", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) {
				n.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: holdNow.Add(-5 * time.Second).Format(time.RFC3339Nano)}
				n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: holdNow.Add(-1 * time.Second)}}}
			}), now: holdNow, pending: pending, hold: true, until: holdNow.Add(5 * time.Second)},
		{name: "an early mark lets the drain proceed sooner", pod: holdPod(nil),
			node: withNode(func(n *corev1.Node) {
				n.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: holdNow.Add(-30 * time.Second).Format(time.RFC3339Nano)}
			}), now: holdNow, pending: pending, reason: "did not decide in time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := EvictionHold(tt.pod, tt.node, tt.now, tt.pending)
			if v.Hold != tt.hold {
				t.Fatalf("Hold = %v (reason %q), want %v", v.Hold, v.Reason, tt.hold)
			}
			if tt.hold && !v.Until.Equal(tt.until) {
				t.Errorf("Until = %s, want %s", v.Until, tt.until)
			}
			if !tt.hold && !v.Until.IsZero() {
				t.Errorf("Until = %s on an allowed eviction, want zero", v.Until)
			}
			if v.Reason == "" {
				t.Errorf("empty reason")
			}
			if tt.reason != "" && !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", v.Reason, tt.reason)
			}
		})
	}
}

func TestEvictionNeedsNode(t *testing.T) {
	unprotected := holdPod(nil)
	unprotected.Labels = map[string]string{"app": "api"}
	unbound := holdPod(nil)
	unbound.Spec.NodeName = ""
	terminating := holdPod(nil)
	terminating.DeletionTimestamp = &metav1.Time{Time: holdNow.Add(-time.Second)}
	critical := holdPod(nil)
	critical.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCritical)
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "undecided protected Pod on a node", pod: holdPod(nil), want: true},
		{name: "held", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: holdNow.Add(time.Minute).Format(time.RFC3339Nano)})},
		{name: "released", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased})},
		{name: "unparsable hold", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: "soon"})},
		{name: "not protected", pod: unprotected},
		{name: "critical tier", pod: critical},
		{name: "not bound", pod: unbound},
		{name: "terminating", pod: terminating},
	}
	node := drainedSpotNode(holdNow.Add(-3 * time.Second))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EvictionNeedsNode(tt.pod); got != tt.want {
				t.Fatalf("EvictionNeedsNode = %v, want %v", got, tt.want)
			}
			// The point of it: when the Node is not needed, not reading it changes nothing (an
			// unbound Pod has no Node to read).
			if !tt.want && tt.pod.Spec.NodeName != "" {
				with, without := EvictionHold(tt.pod, node, holdNow, DefaultPendingHold), EvictionHold(tt.pod, nil, holdNow, DefaultPendingHold)
				if with.Hold != without.Hold || !with.Until.Equal(without.Until) {
					t.Errorf("verdict with the Node %+v, without %+v", with, without)
				}
			}
		})
	}
}

func TestEvictionAllowedByMetadata(t *testing.T) {
	unprotected := holdPod(nil)
	unprotected.Labels = map[string]string{"app": "api"}
	critical := holdPod(nil)
	critical.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCritical)
	terminating := holdPod(nil)
	terminating.DeletionTimestamp = &metav1.Time{Time: holdNow}
	job := holdPod(nil)
	job.OwnerReferences[0].Kind = "Job"
	tests := []struct {
		name    string
		pod     *corev1.Pod
		decided bool
	}{
		{name: "not protected", pod: unprotected, decided: true},
		{name: "critical tier", pod: critical, decided: true},
		{name: "a Job's Pod", pod: job, decided: true},
		{name: "terminating", pod: terminating, decided: true},
		{name: "bridgeable, undecided: needs the live Pod and its Node", pod: holdPod(nil)},
		{name: "held: the annotation may have changed since", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: holdNow.Add(time.Minute).Format(time.RFC3339Nano)})},
		{name: "released: a refused move puts the hold back", pod: holdPod(map[string]string{v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased})},
	}
	node := drainedSpotNode(holdNow.Add(-3 * time.Second))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, decided := EvictionAllowedByMetadata(tt.pod.ObjectMeta)
			if decided != tt.decided {
				t.Fatalf("decided = %v, want %v", decided, tt.decided)
			}
			// What the metadata decides agrees with the full decision.
			if full := EvictionHold(tt.pod, node, holdNow, DefaultPendingHold); decided && (full.Hold || v.Hold) {
				t.Errorf("metadata lets it through, the full decision %+v holds it", full)
			}
		})
	}
}

func TestBridgeable(t *testing.T) {
	owned := func(kind string, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "x", UID: "x", Controller: ptr.To(controller)}}
	}
	tests := []struct {
		name   string
		labels map[string]string
		owners []metav1.OwnerReference
		want   bool
	}{
		{name: "protected ReplicaSet Pod", labels: map[string]string{v1alpha1.LabelProtected: "true"}, owners: owned("ReplicaSet", true), want: true},
		{name: "protected StatefulSet Pod", labels: map[string]string{v1alpha1.LabelProtected: "true"}, owners: owned("StatefulSet", true), want: true},
		{name: "stateless tier", labels: map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(v1alpha1.TierStateless)}, owners: owned("ReplicaSet", true), want: true},
		{name: "checkpointed tier", labels: map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(v1alpha1.TierCheckpointed)}, owners: owned("StatefulSet", true), want: true},
		{name: "best-effort tier", labels: map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(v1alpha1.TierBestEffort)}, owners: owned("ReplicaSet", true), want: true},
		{name: "critical tier", labels: map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(v1alpha1.TierCritical)}, owners: owned("ReplicaSet", true)},
		{name: "not protected", labels: map[string]string{"app": "api"}, owners: owned("ReplicaSet", true)},
		{name: "no labels", owners: owned("ReplicaSet", true)},
		{name: "protected=false", labels: map[string]string{v1alpha1.LabelProtected: "false"}, owners: owned("ReplicaSet", true)},
		{name: "Job Pod", labels: map[string]string{v1alpha1.LabelProtected: "true"}, owners: owned("Job", true)},
		{name: "DaemonSet Pod", labels: map[string]string{v1alpha1.LabelProtected: "true"}, owners: owned("DaemonSet", true)},
		{name: "bare Pod", labels: map[string]string{v1alpha1.LabelProtected: "true"}},
		{name: "owner is not the controller", labels: map[string]string{v1alpha1.LabelProtected: "true"}, owners: owned("ReplicaSet", false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: tt.labels, OwnerReferences: tt.owners}}
			if got := Bridgeable(p); got != tt.want {
				t.Errorf("Bridgeable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDrainStart(t *testing.T) {
	at := func(d time.Duration) time.Time { return holdNow.Add(d) }
	mt := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: at(d)} }
	tests := []struct {
		name   string
		node   corev1.Node
		want   time.Time
		wantOK bool
	}{
		{name: "nothing set"},
		{name: "deletion", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: mt(-3 * time.Second)}}, want: at(-3 * time.Second), wantOK: true},
		{name: "interrupted-at (RFC 3339)", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: at(-7 * time.Second).Format(time.RFC3339)}}}, want: at(-7 * time.Second), wantOK: true},
		{name: "interrupted-at (RFC 3339 nano)", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: at(-1500 * time.Millisecond).Format(time.RFC3339Nano)}}}, want: at(-1500 * time.Millisecond), wantOK: true},
		{name: "unparsable interrupted-at is ignored", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: "soon"}}}},
		{name: "unparsable interrupted-at next to a deletion", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: mt(-time.Second),
			Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: "soon"}}}, want: at(-time.Second), wantOK: true},
		{name: "Karpenter's disrupted taint", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-2 * time.Second)}}}}, want: at(-2 * time.Second), wantOK: true},
		{name: "Lifeboat's interrupted taint", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-4 * time.Second)}}}}, want: at(-4 * time.Second), wantOK: true},
		{name: "disrupted taint without TimeAdded", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}}}},
		{name: "other taints do not count", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintSpot, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-9 * time.Second)},
			{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-9 * time.Second)}}}}},
		{name: "taint earlier than the mark", node: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: at(-2 * time.Second).Format(time.RFC3339Nano)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-6 * time.Second)}}}}, want: at(-6 * time.Second), wantOK: true},
		{name: "mark earlier than the taint and the deletion", node: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: mt(-time.Second),
				Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: at(-8 * time.Second).Format(time.RFC3339Nano)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-6 * time.Second)}}}}, want: at(-8 * time.Second), wantOK: true},
		{name: "deletion earliest of three", node: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: mt(-10 * time.Second),
				Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: at(-8 * time.Second).Format(time.RFC3339Nano)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule, TimeAdded: mt(-6 * time.Second)}}}}, want: at(-10 * time.Second), wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DrainStart(&tt.node)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Errorf("DrainStart = %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestHoldAnnotations(t *testing.T) {
	started := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deadline := started.Add(time.Hour + 500*time.Millisecond).Format(time.RFC3339Nano)
	pod := func(annotations map[string]string, start *time.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
		if start != nil {
			p.Status.StartTime = &metav1.Time{Time: *start}
		}
		return p
	}
	ours := map[string]string{v1alpha1.AnnotationKarpenterDoNotDisrupt: "3601s", v1alpha1.AnnotationDoNotDisruptByLifeboat: "true"}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		value string
		want  map[string]any
	}{
		{"a hold ends Karpenter's do-not-disrupt at the deadline, rounded up", pod(nil, &started), deadline, map[string]any{
			v1alpha1.AnnotationEvictionHold: deadline, v1alpha1.AnnotationKarpenterDoNotDisrupt: "3601s", v1alpha1.AnnotationDoNotDisruptByLifeboat: "true"}},
		{"a user's own do-not-disrupt is left alone", pod(map[string]string{v1alpha1.AnnotationKarpenterDoNotDisrupt: "true"}, &started), deadline, map[string]any{
			v1alpha1.AnnotationEvictionHold: deadline}},
		{"no start time: a duration would never end for Karpenter", pod(nil, nil), deadline, map[string]any{
			v1alpha1.AnnotationEvictionHold: deadline}},
		{"a deadline before the start writes no duration", pod(nil, &started), started.Add(-time.Minute).Format(time.RFC3339Nano), map[string]any{
			v1alpha1.AnnotationEvictionHold: started.Add(-time.Minute).Format(time.RFC3339Nano)}},
		{"release removes what Lifeboat wrote", pod(ours, &started), v1alpha1.EvictionHoldReleased, map[string]any{
			v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased, v1alpha1.AnnotationKarpenterDoNotDisrupt: nil, v1alpha1.AnnotationDoNotDisruptByLifeboat: nil}},
		{"release keeps a user's own", pod(map[string]string{v1alpha1.AnnotationKarpenterDoNotDisrupt: "true"}, &started), v1alpha1.EvictionHoldReleased, map[string]any{
			v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased}},
		{"a renewed hold rewrites Lifeboat's own", pod(ours, &started), started.Add(2 * time.Hour).Format(time.RFC3339Nano), map[string]any{
			v1alpha1.AnnotationEvictionHold: started.Add(2 * time.Hour).Format(time.RFC3339Nano), v1alpha1.AnnotationKarpenterDoNotDisrupt: "7200s", v1alpha1.AnnotationDoNotDisruptByLifeboat: "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, HoldAnnotations(tc.pod, tc.value)); diff != "" {
				t.Errorf("HoldAnnotations (-want +got):\n%s", diff)
			}
		})
	}
}

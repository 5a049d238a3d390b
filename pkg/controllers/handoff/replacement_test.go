package handoff

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// TestReplacementReadyWaitsForBridgeHolds: with handoff WhenReplacementReady a lifeboat is not
// handed off while a protected Pod is held by the bridge (a StatefulSet Pod waiting for its
// turn to move onto the lifeboat) or a seat waits for a node; an expired or released hold does
// not block it.
func TestReplacementReadyWaitsForBridgeHolds(t *testing.T) {
	seatPod := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: SeatName("app", "db-0"),
			Labels: map[string]string{v1alpha1.LabelSeat: "true"}}, Spec: corev1.PodSpec{NodeName: node}}
	}
	protectedPod := func(hold string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-3",
			Labels: map[string]string{v1alpha1.LabelProtected: "true"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if hold != "" {
			p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: hold}
		}
		return p
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"running, never held":   {pod: protectedPod(""), want: true},
		"held by the bridge":    {pod: protectedPod(nodeutil.FormatTime(hpaNow.Add(30 * time.Second))), want: false},
		"hold expired":          {pod: protectedPod(nodeutil.FormatTime(hpaNow.Add(-time.Second))), want: true},
		"hold released (moved)": {pod: protectedPod(v1alpha1.EvictionHoldReleased), want: true},
		"a seat not placed yet": {pod: seatPod(""), want: false},
		"every seat placed":     {pod: seatPod("ip-10-0-0-9"), want: true},
	} {
		t.Run(name, func(t *testing.T) {
			// No Karpenter CRDs in this fake: NodeClaims are "no match", as without Karpenter.
			noClaims := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*karpv1.NodeClaimList); ok {
					return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "karpenter.sh", Kind: "NodeClaim"}}
				}
				return c.List(ctx, list, opts...)
			}}
			c := New(fakeClient(noClaims, tc.pod), clocktesting.NewFakeClock(hpaNow), events.NewFakeRecorder(10))
			got, err := c.replacementReady(context.Background(), hpaNow)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("replacementReady = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHandoffWaitsForBridgeHoldsPastActiveDuration: a lifeboat whose active duration is over
// is not cordoned while the bridge still holds a protected Pod (it would release the hold "no
// lifeboat" and drain the Pods that just moved here); once the hold's deadline passes, the
// handoff starts. The wait is bounded by the hold's deadline.
func TestHandoffWaitsForBridgeHoldsPastActiveDuration(t *testing.T) {
	activated := hpaNow.Add(-10 * time.Minute) // activeDuration (default 5m) is long over
	holdUntil := hpaNow.Add(20 * time.Second)
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.WarmPoolSpec{Handoff: v1alpha1.HandoffAfterActiveDuration}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)},
		Annotations: map[string]string{v1alpha1.AnnotationActivatedAt: nodeutil.FormatTime(activated)}}}
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-3",
		Labels:      map[string]string{v1alpha1.LabelProtected: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationEvictionHold: nodeutil.FormatTime(holdUntil)}},
		Spec: corev1.PodSpec{NodeName: "spot-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	c := fakeClient(interceptor.Funcs{}, pool, node, held)
	clk := clocktesting.NewFakeClock(hpaNow)
	ctrl := New(c, clk, events.NewFakeRecorder(10))
	state := func() v1alpha1.NodeState {
		n := &corev1.Node{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: "lb-1"}, n); err != nil {
			t.Fatal(err)
		}
		return nodeutil.State(n)
	}

	res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "lb-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := state(); got != v1alpha1.NodeStateActive {
		t.Fatalf("handed off (state %s) while a bridge hold was active", got)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > holdUntil.Sub(hpaNow) {
		t.Errorf("requeue after %s, want a look again within the hold (%s)", res.RequeueAfter, holdUntil.Sub(hpaNow))
	}

	clk.SetTime(holdUntil)
	if _, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "lb-1"}}); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != v1alpha1.NodeStateDraining {
		t.Errorf("state %s after the hold's deadline, want %s", got, v1alpha1.NodeStateDraining)
	}
}

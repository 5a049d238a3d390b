package interruption

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// poolStore is fakeStore (the rebalance policy is a pool's).
func poolStore(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	return fakeStore(objs...)
}

func warmPoolWith(name string, policy v1alpha1.RebalancePolicy) *v1alpha1.WarmPool {
	return &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WarmPoolSpec{RebalanceRecommendation: policy}}
}

func rebalanceMessage(id string) interruptionqueue.Message {
	return interruptionqueue.Message{Kind: interruptionqueue.KindRebalanceRecommendation, InstanceIDs: []string{id}, Time: time.Date(2026, 11, 29, 20, 59, 59, 0, time.UTC)}
}

// rebalanceMarked is spot-1 as a rebalance recommendation left it before its decision.
func rebalanceMarked() *corev1.Node {
	n := spotNode("spot-1", "i-spot1")
	n.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T20:59:00Z", v1alpha1.AnnotationInterruptionSource: marks.SourceRebalance}
	n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule}}
	return n
}

func handle(t *testing.T, ctrl *Controller, msgs ...interruptionqueue.Message) {
	t.Helper()
	for i, err := range deliver(t, ctrl, msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	drainConcurrently(t, ctrl)
}

func annotationsOf(t *testing.T, c client.Reader, node string) map[string]string {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Annotations
}

// TestInterruptionAfterPreResumeResumesNothingMore: a rebalance recommendation pre-resumed a
// lifeboat; the Spot interruption of the same Node re-marks it and plans again, counting the
// active lifeboat: nothing more is resumed. Duplicates of the interruption (SQS, Karpenter's
// event) and a late recommendation do not re-open the decision.
func TestInterruptionAfterPreResumeResumesNothingMore(t *testing.T) {
	api := poolStore(t, warmPoolWith("pool", v1alpha1.RebalancePreResume), spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"),
		standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"))
	ctrl, f := newController(api, api)
	clk := ctrl.clock.(*clocktesting.FakeClock)
	ctx := context.Background()

	handle(t, ctrl, rebalanceMessage("i-spot1"))
	lifeboat := decisionOf(t, api, "spot-1")
	if f.TotalResumed() != 1 || (lifeboat != "sb-1" && lifeboat != "sb-2") {
		t.Fatalf("pre-resume: resumed %v decision %q, want one lifeboat", f.Resumed, lifeboat)
	}
	if src := annotationsOf(t, api, "spot-1")[v1alpha1.AnnotationInterruptionSource]; src != marks.SourceRebalance {
		t.Fatalf("source %q after the recommendation", src)
	}

	clk.Step(30 * time.Second)
	interruptedAt := nodeutil.FormatTime(clk.Now())
	handle(t, ctrl, spotMessage("i-spot1"))
	a := annotationsOf(t, api, "spot-1")
	if a[v1alpha1.AnnotationInterruptionSource] != "sqs/"+string(interruptionqueue.KindSpotInterruption) || a[v1alpha1.AnnotationInterruptedAt] != interruptedAt {
		t.Fatalf("after the interruption: annotations %v, want it re-marked at %s", a, interruptedAt)
	}
	if f.TotalResumed() != 1 || a[v1alpha1.AnnotationResumeDecision] != lifeboat {
		t.Fatalf("after the interruption: resumed %v decision %q, want still only %s", f.Resumed, a[v1alpha1.AnnotationResumeDecision], lifeboat)
	}

	// Duplicates, and Karpenter's event, later: the re-mark is not repeated.
	clk.Step(30 * time.Second)
	handle(t, ctrl, spotMessage("i-spot1"), interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "shutting-down", InstanceIDs: []string{"i-spot1"}}, rebalanceMessage("i-spot1"))
	n := &corev1.Node{}
	if err := api.Get(ctx, types.NamespacedName{Name: "spot-1"}, n); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.intake.Mark(ctx, n, marks.SourceKarpenterEvent, clk.Now()); err != nil {
		t.Fatal(err)
	}
	drainConcurrently(t, ctrl)
	a = annotationsOf(t, api, "spot-1")
	if a[v1alpha1.AnnotationInterruptedAt] != interruptedAt || a[v1alpha1.AnnotationInterruptionSource] != "sqs/"+string(interruptionqueue.KindSpotInterruption) || a[v1alpha1.AnnotationResumeDecision] != lifeboat {
		t.Fatalf("after the duplicates: annotations %v, want the interruption's mark and decision unchanged", a)
	}
	if f.TotalResumed() != 1 || len(f.Batches) != 1 {
		t.Fatalf("after the duplicates: resumed %v in %v, want one StartInstances in all", f.Resumed, f.Batches)
	}
}

// TestInterruptionAfterPreResumeWithoutStandby: the PreResume pool had no standby node, so the
// recommendation resumed nothing; the interruption plans over every pool and resumes one.
func TestInterruptionAfterPreResumeWithoutStandby(t *testing.T) {
	api := poolStore(t, warmPoolWith("pre", v1alpha1.RebalancePreResume), warmPoolWith("pool", v1alpha1.RebalanceIgnore),
		spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
	ctrl, f := newController(api, api)

	handle(t, ctrl, rebalanceMessage("i-spot1"))
	if d := decisionOf(t, api, "spot-1"); d != "none" || f.TotalResumed() != 0 {
		t.Fatalf("pre-resume: decision %q resumed %v, want none from the empty PreResume pool", d, f.Resumed)
	}
	handle(t, ctrl, spotMessage("i-spot1"), spotMessage("i-spot1"))
	if d := decisionOf(t, api, "spot-1"); d != "sb-1" || f.Resumed["i-sb1"] != 1 || f.TotalResumed() != 1 {
		t.Fatalf("interruption: decision %q resumed %v, want sb-1 once", d, f.Resumed)
	}
}

// TestInterruptionAfterHandedOffPreResume: the pre-resumed lifeboat was handed off (draining)
// before the interruption came: it holds nothing more, so the interruption resumes another.
func TestInterruptionAfterHandedOffPreResume(t *testing.T) {
	api := poolStore(t, warmPoolWith("pool", v1alpha1.RebalancePreResume), spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"),
		standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"))
	ctrl, f := newController(api, api)
	ctx := context.Background()

	handle(t, ctrl, rebalanceMessage("i-spot1"))
	first := decisionOf(t, api, "spot-1")
	lb := &corev1.Node{}
	if err := api.Get(ctx, types.NamespacedName{Name: first}, lb); err != nil {
		t.Fatal(err)
	}
	// The handoff after activeDuration: cordoned and draining, still naming spot-1.
	lb.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateDraining)
	lb.Spec.Unschedulable = true
	if err := api.Update(ctx, lb); err != nil {
		t.Fatal(err)
	}

	handle(t, ctrl, spotMessage("i-spot1"))
	second := decisionOf(t, api, "spot-1")
	if second == "" || second == first || f.TotalResumed() != 2 {
		t.Fatalf("decision %q (pre-resume %q) resumed %v, want another lifeboat for the interruption", second, first, f.Resumed)
	}
}

// TestInterruptionDuringPreResumeDecision: the interruption re-marks the Node while the
// recommendation's decision is being recorded. The recommendation's decision ("none": its
// PreResume pool is empty) must not be written over the new mark; the Node is planned again
// and the interruption gets its lifeboat.
func TestInterruptionDuringPreResumeDecision(t *testing.T) {
	store := poolStore(t, warmPoolWith("pre", v1alpha1.RebalancePreResume), warmPoolWith("pool", v1alpha1.RebalanceIgnore),
		spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
	var (
		ctrl  *Controller
		raced atomic.Bool
		errc  = make(chan error, 1)
	)
	c := interceptor.NewClient(store, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		a := obj.GetAnnotations()
		if obj.GetName() == "spot-1" && a[v1alpha1.AnnotationResumeDecision] != "" && a[v1alpha1.AnnotationInterruptionSource] == marks.SourceRebalance && !raced.Swap(true) {
			// The interruption arrives while the recommendation's decision is written; its
			// handler waits for its own decision, so it runs on its own.
			go func() { errc <- ctrl.intake.HandleMessage(context.Background(), spotMessage("i-spot1")) }()
			for n := ctrl.notices.Pending("spot-1"); n == nil || ctrl.notices.Source(n) == marks.SourceRebalance; n = ctrl.notices.Pending("spot-1") {
				time.Sleep(time.Millisecond)
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
	ctrl, f := newController(c, store)

	handle(t, ctrl, rebalanceMessage("i-spot1"))
	for waiting := true; waiting; {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(2 * time.Millisecond):
			drainConcurrently(t, ctrl)
		}
	}
	a := annotationsOf(t, store, "spot-1")
	if !raced.Load() || a[v1alpha1.AnnotationResumeDecision] != "sb-1" || f.Resumed["i-sb1"] != 1 || f.TotalResumed() != 1 {
		t.Fatalf("raced %v annotations %v resumed %v, want the interruption's decision sb-1", raced.Load(), a, f.Resumed)
	}
}

// TestCacheLagsRemark: the cache still shows the recommendation's mark (without a decision)
// after this process re-marked the Node for an interruption: the decision follows the
// API server's answer to the re-mark and plans over every pool.
func TestCacheLagsRemark(t *testing.T) {
	objs := []client.Object{warmPoolWith("pre", v1alpha1.RebalancePreResume), warmPoolWith("pool", v1alpha1.RebalanceIgnore),
		rebalanceMarked(), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4")}
	api := poolStore(t, objs...)
	cache := interceptor.NewClient(poolStore(t, objs...), interceptor.Funcs{
		Patch: func(ctx context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return api.Patch(ctx, obj, patch, opts...)
		},
	})
	ctrl, f := newController(cache, api)

	handle(t, ctrl, spotMessage("i-spot1"))
	if d := decisionOf(t, api, "spot-1"); d != "sb-1" || f.Resumed["i-sb1"] != 1 {
		t.Fatalf("decision %q resumed %v, want sb-1 (every pool) for the interruption", d, f.Resumed)
	}
}

// TestPreResumePoolsReadError: when the WarmPools cannot be read, a recommendation is not
// treated as allowed everywhere: the notice fails (SQS delivers it again) and a Node the
// recommendation marked waits for its decision.
func TestPreResumePoolsReadError(t *testing.T) {
	errList := errors.New("warmpools unavailable")
	failing := interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*v1alpha1.WarmPoolList); ok {
			return errList
		}
		return cl.List(ctx, list, opts...)
	}}

	t.Run("notice", func(t *testing.T) {
		store := poolStore(t, warmPoolWith("pre", v1alpha1.RebalancePreResume), spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
		ctrl, f := newController(interceptor.NewClient(store, failing), store)
		if err := deliver(t, ctrl, rebalanceMessage("i-spot1"))[0]; !errors.Is(err, errList) {
			t.Fatalf("HandleMessage = %v, want the list error", err)
		}
		drainConcurrently(t, ctrl)
		if a := annotationsOf(t, store, "spot-1"); a[v1alpha1.AnnotationInterruptedAt] != "" || f.TotalResumed() != 0 {
			t.Fatalf("annotations %v resumed %v, want nothing done", a, f.Resumed)
		}
	})
	t.Run("decision", func(t *testing.T) {
		store := poolStore(t, warmPoolWith("pre", v1alpha1.RebalancePreResume), warmPoolWith("pool", v1alpha1.RebalanceIgnore),
			rebalanceMarked(), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
		ctrl, f := newController(interceptor.NewClient(store, failing), store)
		_, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot-1"}})
		if !errors.Is(err, errList) {
			t.Fatalf("Reconcile = %v, want the list error", err)
		}
		if d := decisionOf(t, store, "spot-1"); d != "" || f.TotalResumed() != 0 {
			t.Fatalf("decision %q resumed %v, want no decision (sb-1 is in a pool without PreResume)", d, f.Resumed)
		}
	})
}

package recycle

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// servedNode is a lifeboat node at the end of its handoff: draining, cordoned, claim traces on.
func servedNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
			Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateDraining), v1alpha1.LabelResumedFor: "spot-1"},
			Annotations: map[string]string{
				v1alpha1.AnnotationActivatedAt: "2026-11-29T20:50:00Z", v1alpha1.AnnotationStartRequestedAt: "2026-11-29T20:50:01Z",
				v1alpha1.AnnotationResumedReadyAt: "2026-11-29T20:50:20Z", v1alpha1.AnnotationDrainingSince: "2026-11-29T20:55:00Z",
				v1alpha1.AnnotationInterruptedAt: "2026-11-29T20:49:59Z", v1alpha1.AnnotationHibernateRequestedAt: "2026-11-29T19:00:00Z",
				v1alpha1.AnnotationWarmingSince: "2026-11-29T18:58:00Z",
			}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1", Unschedulable: true,
			Taints: []corev1.Taint{{Key: v1alpha1.TaintLifeboat, Value: "pool", Effect: corev1.TaintEffectNoSchedule}}},
	}
}

func setup(t *testing.T, pool *v1alpha1.WarmPool, objs ...client.Object) (*Controller, client.Client, *cloudtest.Instances) {
	t.Helper()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} })
	if pool != nil {
		b = b.WithObjects(pool).WithStatusSubresource(pool)
	}
	c := b.Build()
	f := cloudtest.New()
	f.Known["i-1"] = running()
	return New(c, f, clocktesting.NewFakeClock(now), events.NewFakeRecorder(100)), c, f
}

func reconcileNode(t *testing.T, ctrl *Controller) reconcile.Result {
	t.Helper()
	res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "lb-1"}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func TestRehibernateReturnsNodeToWarming(t *testing.T) {
	ctrl, c, f := setup(t, testPool(v1alpha1.AfterUseRehibernate), servedNode())
	reconcileNode(t, ctrl)
	n := &corev1.Node{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "lb-1"}, n); err != nil {
		t.Fatal(err)
	}
	if len(f.Terminated) != 0 {
		t.Fatalf("terminated %v, want nothing (the instance returns to its slot)", f.Terminated)
	}
	if got := nodeutil.State(n); got != v1alpha1.NodeStateWarming {
		t.Errorf("state %q, want warming (the warmpool controller hibernates it)", got)
	}
	if n.Spec.Unschedulable || !nodeutil.HasTaint(n, v1alpha1.TaintStandby) || !nodeutil.HasTaint(n, v1alpha1.TaintLifeboat) {
		t.Errorf("unschedulable %v taints %v: want uncordoned with the lifeboat and standby taints", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, ok := n.Labels[v1alpha1.LabelResumedFor]; ok {
		t.Errorf("resumed-for still set: the node could never be claimed again")
	}
	for _, k := range claimAnnotations {
		if v, ok := n.Annotations[k]; ok {
			t.Errorf("annotation %s=%s left on a node back in the pool", k, v)
		}
	}
	if got := n.Annotations[v1alpha1.AnnotationWarmingSince]; got != nodeutil.FormatTime(now) {
		t.Errorf("warming-since %q, want now (the pre-pull timeout restarts)", got)
	}
	// A second pass (the node is no longer draining) does nothing.
	reconcileNode(t, ctrl)
	if len(f.Terminated)+len(f.Hibernated) != 0 {
		t.Fatalf("second pass acted: terminated %v hibernated %v", f.Terminated, f.Hibernated)
	}
}

func TestRehibernateFallsBackToTerminate(t *testing.T) {
	for name, mutate := range map[string]func(*cloudtest.Instances, *v1alpha1.WarmPool){
		"older than maxStandbyAge": func(f *cloudtest.Instances, _ *v1alpha1.WarmPool) {
			f.Known["i-1"].LaunchTime = now.Add(-1000 * time.Hour)
		},
		"slot refilled": func(_ *cloudtest.Instances, p *v1alpha1.WarmPool) { p.Status.Slots[0].Generation++ },
		"instance gone": func(f *cloudtest.Instances, _ *v1alpha1.WarmPool) { delete(f.Known, "i-1") },
	} {
		t.Run(name, func(t *testing.T) {
			pool := testPool(v1alpha1.AfterUseRehibernate)
			ctrl, c, f := setup(t, nil, servedNode())
			mutate(f, pool)
			if err := c.Create(context.Background(), pool); err != nil {
				t.Fatal(err)
			}
			reconcileNode(t, ctrl)
			if len(f.Terminated) != 1 || f.Terminated[0] != "i-1" {
				t.Fatalf("terminated %v, want [i-1]", f.Terminated)
			}
			n := &corev1.Node{}
			if err := c.Get(context.Background(), types.NamespacedName{Name: "lb-1"}, n); err != nil {
				t.Fatal(err)
			}
			if nodeutil.State(n) != v1alpha1.NodeStateDraining || n.Annotations[v1alpha1.AnnotationRecycledAt] == "" {
				t.Fatalf("state %q recycled-at %q: want the terminate decision recorded on the draining node", nodeutil.State(n), n.Annotations[v1alpha1.AnnotationRecycledAt])
			}
			// A restart after the decision repeats the termination, never re-hibernates.
			f.Known["i-1"] = running()
			reconcileNode(t, ctrl)
			if len(f.Terminated) != 2 {
				t.Fatalf("terminated %v after a repeated pass, want i-1 twice (idempotent)", f.Terminated)
			}
		})
	}
}

func TestNotEmptyWaits(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: "lb-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ctrl, _, f := setup(t, testPool(v1alpha1.AfterUseRehibernate), servedNode(), pod)
	if res := reconcileNode(t, ctrl); res.RequeueAfter == 0 {
		t.Errorf("no requeue while a Pod is left")
	}
	if len(f.Terminated) != 0 {
		t.Fatalf("terminated %v with a Pod left", f.Terminated)
	}
}

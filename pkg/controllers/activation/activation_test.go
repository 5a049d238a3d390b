package activation

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// stoppedInstances are instances that stay stopped until resumed; only the calls the activator
// makes are implemented.
type stoppedInstances struct {
	cloud.Instances
	mu      sync.Mutex
	resumed map[string]int
}

func (f *stoppedInstances) Resume(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed[id]++
	return nil
}

func (f *stoppedInstances) Get(_ context.Context, id string) (*cloud.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resumed[id] > 0 {
		return &cloud.Instance{ID: id, State: cloud.StateRunning}, nil
	}
	return &cloud.Instance{ID: id, State: cloud.StateStopped}, nil
}

// claimedNode is a pool node claimed for spot-1 (state active), still tainted standby.
func claimedNode(name, id string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive), v1alpha1.LabelResumedFor: "spot-1"}, Annotations: map[string]string{}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id, Taints: []corev1.Taint{
			{Key: v1alpha1.TaintLifeboat, Value: "pool", Effect: corev1.TaintEffectNoSchedule}, {Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule},
		}},
	}
}

func TestActivatorRemovesStandbyTaintWhenReady(t *testing.T) {
	n := claimedNode("sb-1", "i-sb1")
	n.Annotations[v1alpha1.AnnotationActivatedAt] = "2026-11-29T21:00:00Z"
	c := fake.NewClientBuilder().WithObjects(n.DeepCopy()).Build()
	f := &stoppedInstances{resumed: map[string]int{}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	a := NewActivator(c, f, clk, events.NewFakeRecorder(10))
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "sb-1"}}
	// Not Ready, claimed just now: wait.
	res, err := a.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter == 0 || len(f.resumed) != 0 {
		t.Fatalf("res %+v err %v resumed %v", res, err, f.resumed)
	}
	// Still not Ready 40s later and the instance is stopped (a crash before StartInstances).
	clk.Step(40 * time.Second)
	if _, err := a.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if f.resumed["i-sb1"] != 1 {
		t.Fatalf("resumed %v, want i-sb1 started again", f.resumed)
	}
	// Ready: the standby taint goes.
	_ = c.Get(ctx, req.NamespacedName, n)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, req.NamespacedName, n)
	if nodeutil.HasTaint(n, v1alpha1.TaintStandby) || !nodeutil.HasTaint(n, v1alpha1.TaintLifeboat) {
		t.Fatalf("taints = %v, want lifeboat only", n.Spec.Taints)
	}
}

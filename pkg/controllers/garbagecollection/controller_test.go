package garbagecollection

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
)

var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func TestKarpenterOwned(t *testing.T) {
	for tags, want := range map[string]bool{
		"karpenter.sh/nodepool":          true,
		"karpenter.k8s.aws/ec2nodeclass": true,
		"eks:nodegroup-name":             true,
		"lifeboat.dev/pool":              false,
	} {
		if got := KarpenterOwned(map[string]string{tags: "x"}); got != want {
			t.Errorf("KarpenterOwned(%s) = %v, want %v", tags, got, want)
		}
	}
}

// TestPass: one pass terminates the live instances of a WarmPool that no longer exists — never
// one Karpenter's tags mark, never one of an existing pool — and deletes the pool Nodes whose
// instance is gone once they are older than Grace — never a Karpenter Node, never a young one
// (EC2 eventual consistency).
func TestPass(t *testing.T) {
	instances := cloudtest.New()
	for _, in := range []cloud.Instance{
		{ID: "i-kept", Pool: "live", State: cloud.StateStopped},
		{ID: "i-orphan", Pool: "deleted", State: cloud.StateStopped},
		{ID: "i-karpenter", Pool: "deleted", State: cloud.StateRunning, Tags: map[string]string{"karpenter.sh/nodepool": "default"}},
		{ID: "i-terminating", Pool: "deleted", State: cloud.StateShuttingDown},
	} {
		instances.Known[in.ID] = &in
	}
	node := func(name, id string, age time.Duration, labels map[string]string) *corev1.Node {
		l := map[string]string{v1alpha1.LabelPool: "live"}
		for k, v := range labels {
			l[k] = v
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id}}
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "live"}},
		node("with-instance", "i-kept", time.Hour, nil),
		node("instance-gone", "i-vanished", time.Hour, nil),
		node("too-young", "i-vanished2", time.Minute, nil),
		node("karpenters", "i-vanished3", time.Hour, map[string]string{"karpenter.sh/nodepool": "default"}),
	).Build()
	gc := New(c, instances, clocktesting.NewFakeClock(now), events.NewFakeRecorder(10))
	res, err := gc.Reconcile(context.Background(), reconcile.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != gc.Period {
		t.Errorf("requeue %v, want the period %v", res.RequeueAfter, gc.Period)
	}
	if !reflect.DeepEqual(instances.Terminated, []string{"i-orphan"}) {
		t.Errorf("terminated %v, want [i-orphan]", instances.Terminated)
	}
	list := &corev1.NodeList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, n := range list.Items {
		left = append(left, n.Name)
	}
	slices.Sort(left)
	if want := []string{"karpenters", "too-young", "with-instance"}; !reflect.DeepEqual(left, want) {
		t.Errorf("nodes left %v, want %v", left, want)
	}
}

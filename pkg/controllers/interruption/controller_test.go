package interruption

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// spotNode is a Spot node of the pool m5.large × us-east-1a, instance id.
func spotNode(name, id string) *corev1.Node {
	return buildtest.Node(name, buildtest.InstanceType("m5.large"), buildtest.Zone("us-east-1a"),
		buildtest.CapacityType(buildtest.Spot), buildtest.ProviderID("aws:///us-east-1a/"+id))
}

// standbyNode is a standby node of pool "pool", instance id, with cpu, 16 Gi and 110 pods.
func standbyNode(name, id string, cpu string) *corev1.Node {
	return buildtest.Node(name, buildtest.Pool("pool", v1alpha1.NodeStateStandby), buildtest.Annotations(nil),
		buildtest.ProviderID("aws:///us-east-1a/"+id), buildtest.Capacity(cpu, "16Gi", "110"), buildtest.Taints(
			corev1.Taint{Key: v1alpha1.TaintLifeboat, Value: "pool", Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule}))
}

// protectedPod is a running protected Pod app/name on node, requesting cpu and 1 Gi.
func protectedPod(name, node, cpu string) *corev1.Pod {
	return buildtest.Pod("app", name, buildtest.Protected(""), buildtest.OnNode(node), buildtest.Requests(cpu, "1Gi"), buildtest.Running())
}

func setup(t *testing.T, objs ...client.Object) (*Controller, client.Client, *cloudtest.Instances, *clocktesting.FakeClock) {
	t.Helper()
	c := fakeStore(objs...)
	f := cloudtest.New()
	f.UnknownState = cloud.StateStopped
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	return realWindows(New(c, c, f, clk, events.NewFakeRecorder(100), nil, "")), c, f, clk
}

func spotMessage(id string) interruptionqueue.Message {
	return interruptionqueue.Message{Kind: interruptionqueue.KindSpotInterruption, InstanceIDs: []string{id}, Time: time.Date(2026, 11, 29, 20, 59, 59, 0, time.UTC)}
}

// drain runs the reconciler for the triggered Nodes until nothing is left to do.
func drain(t *testing.T, ctrl *Controller) {
	t.Helper()
	for i := 0; i < 50; i++ {
		select {
		case ev := <-ctrl.trigger:
			res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: ev.Object.GetName()}})
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if res.Requeue {
				ctrl.trigger <- ev
			}
		default:
			return
		}
	}
	t.Fatal("reconcile did not settle")
}

func TestDuplicatesResumeOnce(t *testing.T) {
	ctrl, c, f, _ := setup(t,
		spotNode("spot-1", "i-spot1"),
		standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"), standbyNode("sb-3", "i-sb3", "4"),
		protectedPod("a", "spot-1", "3"), protectedPod("b", "spot-1", "3"), protectedPod("c", "spot-1", "500m"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "unprotected"}, Spec: corev1.PodSpec{NodeName: "spot-1", Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}},
	)
	ctx := context.Background()
	// The same notice five times, interleaved with a state-change for the same instance.
	for i := 0; i < 5; i++ {
		if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
			t.Fatal(err)
		}
		drain(t, ctrl)
	}
	if err := deliver(t, ctrl, interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "shutting-down", InstanceIDs: []string{"i-spot1"}})[0]; err != nil {
		t.Fatal(err)
	}
	drain(t, ctrl)

	total := 0
	for _, n := range f.Resumed {
		total += n
	}
	// 3 + 3 + 0.5 CPU on 4-CPU nodes: two nodes, each started once.
	if len(f.Resumed) != 2 || total != 2 {
		t.Fatalf("resumed %v, want two instances once each", f.Resumed)
	}
	n := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: "spot-1"}, n); err != nil {
		t.Fatal(err)
	}
	if !nodeutil.HasTaint(n, v1alpha1.TaintInterrupted) || n.Annotations[v1alpha1.AnnotationResumeDecision] == "" {
		t.Fatalf("interrupted node not marked/decided: %v %v", n.Spec.Taints, n.Annotations)
	}
	claimed := &corev1.NodeList{}
	if err := c.List(ctx, claimed, client.MatchingLabels{v1alpha1.LabelResumedFor: "spot-1", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)}); err != nil {
		t.Fatal(err)
	}
	if len(claimed.Items) != 2 {
		t.Fatalf("claimed nodes = %d, want 2", len(claimed.Items))
	}
}

func TestRestartAfterClaimDoesNotResumeMore(t *testing.T) {
	// A previous run claimed sb-2 and crashed before StartInstances and before the decision.
	sb2 := standbyNode("sb-2", "i-sb2", "4")
	sb2.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateActive)
	sb2.Labels[v1alpha1.LabelResumedFor] = "spot-1"
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	ctrl, _, f, _ := setup(t, spot, standbyNode("sb-1", "i-sb1", "4"), sb2, protectedPod("a", "spot-1", "2"))
	if _, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot-1"}}); err != nil {
		t.Fatal(err)
	}
	if len(f.Resumed) != 1 || f.Resumed["i-sb2"] != 1 {
		t.Fatalf("resumed %v, want only the already-claimed i-sb2", f.Resumed)
	}
}

func TestICEOnResumeTerminatesAndResumesAnother(t *testing.T) {
	ctrl, c, f, _ := setup(t, spotNode("spot-1", "i-spot1"), standbyNode("sb-1", "i-sb1", "8"), standbyNode("sb-2", "i-sb2", "4"), protectedPod("a", "spot-1", "2"))
	f.ICE["i-sb1"] = true // the largest candidate is chosen first and has no capacity
	if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
		t.Fatal(err)
	}
	drain(t, ctrl)
	if !f.Gone["i-sb1"] || f.Resumed["i-sb2"] != 1 || len(f.Resumed) != 1 {
		t.Fatalf("gone %v resumed %v: want i-sb1 terminated, i-sb2 resumed", f.Gone, f.Resumed)
	}
	n := &corev1.Node{}
	_ = c.Get(context.Background(), types.NamespacedName{Name: "spot-1"}, n)
	if n.Annotations[v1alpha1.AnnotationResumeDecision] != "sb-2" {
		t.Fatalf("decision = %q", n.Annotations[v1alpha1.AnnotationResumeDecision])
	}
}

func TestPoolInstancesAndUnknownInstancesAreIgnored(t *testing.T) {
	ctrl, c, f, _ := setup(t, standbyNode("sb-1", "i-sb1", "4"))
	ctx := context.Background()
	// Lifeboat's own hibernation shows up as a state change of a pool instance.
	for _, m := range []interruptionqueue.Message{
		{Kind: interruptionqueue.KindStateChange, State: "stopping", InstanceIDs: []string{"i-sb1"}},
		spotMessage("i-unknown"),
		{Kind: interruptionqueue.KindRebalanceRecommendation, InstanceIDs: []string{"i-sb1"}},
	} {
		if err := deliver(t, ctrl, m)[0]; err != nil {
			t.Fatal(err)
		}
	}
	drain(t, ctrl)
	n := &corev1.Node{}
	_ = c.Get(ctx, types.NamespacedName{Name: "sb-1"}, n)
	if len(f.Resumed) != 0 || n.Annotations[v1alpha1.AnnotationInterruptedAt] != "" {
		t.Fatalf("pool node touched: resumed %v annotations %v", f.Resumed, n.Annotations)
	}
}

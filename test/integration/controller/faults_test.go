package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/intake"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// TestICEOnResume: the standby node the plan prefers cannot be started (EC2 has no capacity for
// its instance type, and a hibernated instance cannot change type): its instance is terminated,
// another standby node is resumed instead, and the pool launches a replacement.
func TestICEOnResume(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	// One m5.2xlarge standby first; then, with m5.2xlarge out of capacity, the second slot
	// falls back to m5.xlarge. The plan opens the largest candidate first: the m5.2xlarge.
	wp := e.warmPool(1, "1h")
	wp.Spec.InstanceTypes = []string{"m5.2xlarge", "m5.xlarge"}
	wp.Spec.RootVolumeGiB = 64
	if err := e.client.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.waitFor("1 standby", 90*time.Second, e.standbyConverged(1))
	e.emu.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "m5.2xlarge", OnRun: true, OnStart: true}}})
	if err := e.client.Patch(ctx, &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}}, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":2}}`))); err != nil {
		t.Fatal(err)
	}
	e.waitFor("2 standby", 90*time.Second, e.standbyConverged(2))
	types2x := map[string]string{}
	var big string
	for _, in := range e.liveInstances(poolName) {
		types2x[in.ID] = in.InstanceType
		if in.InstanceType == "m5.2xlarge" {
			big = in.ID
		}
	}
	if big == "" || len(types2x) != 2 {
		t.Fatalf("pool instances %v: want one m5.2xlarge and one m5.xlarge", types2x)
	}

	e.spotWithProtectedPod(ctx, "spot-ice", "i-00000000000000e01", "3")
	time.Sleep(500 * time.Millisecond) // the cache sees the Node and Pod before the notice
	starts, ices := e.emu.Calls("StartInstances", ""), e.emu.Calls("StartInstances", "InsufficientInstanceCapacity")
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000e01", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the m5.xlarge resumed and Ready for spot-ice", 60*time.Second, e.activeReadyFor("spot-ice", 1))
	boat := e.lifeboatsFor(ctx, "spot-ice")[0]
	if it := boat.Labels[v1alpha1.LabelInstanceType]; it != "m5.xlarge" {
		t.Fatalf("resumed %s (%s), want the m5.xlarge", boat.Name, it)
	}
	if got := e.emu.Calls("StartInstances", "InsufficientInstanceCapacity") - ices; got != 1 {
		t.Fatalf("%d StartInstances failed with ICE, want 1 (the m5.2xlarge)", got)
	}
	if got := e.emu.Calls("StartInstances", "") - starts; got != 1 {
		t.Fatalf("%d StartInstances succeeded, want 1", got)
	}
	e.waitFor("the ICE'd instance terminated", 30*time.Second, func(context.Context) (bool, string) {
		for _, in := range e.emu.Instances() {
			if in.ID == big {
				return in.State == cloud.StateTerminated || in.State == cloud.StateShuttingDown, in.State
			}
		}
		return false, "not found"
	})
	spot := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-ice"}, spot); err != nil {
		t.Fatal(err)
	}
	if spot.Annotations[v1alpha1.AnnotationResumeDecision] != boat.Name {
		t.Fatalf("decision %q, want %s", spot.Annotations[v1alpha1.AnnotationResumeDecision], boat.Name)
	}
	// The pool refills (m5.2xlarge still out of capacity: an m5.xlarge), nothing orphaned.
	e.waitFor("2 standby again, nothing orphaned", 120*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.standbyConverged(2)(ctx)
		clean, orphans := e.noOrphans(ctx)
		return ok && clean && len(e.liveInstances(poolName)) == 3, desc + "; " + orphans
	})
}

// poolWatch records every change Karpenter could make to pool Nodes: deletion, its disruption
// taint, a cordon.
type poolWatch struct {
	mu         sync.Mutex
	violations []string
}

func (w *poolWatch) add(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func (e *env) watchPoolNodes(ctx context.Context) *poolWatch {
	pw := &poolWatch{}
	w, err := e.cluster.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPool})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			switch {
			case ev.Type == watch.Deleted:
				pw.add("pool node %s deleted", n.Name)
			case nodeutil.HasTaint(n, v1alpha1.TaintKarpenterDisrupted):
				pw.add("pool node %s tainted %s", n.Name, v1alpha1.TaintKarpenterDisrupted)
			case n.Spec.Unschedulable:
				pw.add("pool node %s cordoned (state %s)", n.Name, n.Labels[v1alpha1.LabelState])
			}
		}
	}()
	return pw
}

// TestKarpenterCoexistence runs Karpenter (KWOK provider) next to a warm pool: Karpenter
// provisions for a Deployment and later consolidates its empty nodes, and never deletes,
// disrupts or cordons a pool Node nor terminates a pool instance. Karpenter's own interruption
// signal — the SpotInterrupted Warning events on a NodeClaim and its Node — resumes exactly one
// lifeboat for the protected Pod on that node.
func TestKarpenterCoexistence(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{Karpenter: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	if err := e.client.Create(ctx, e.warmPool(2, "1h")); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.waitFor("2 standby", 90*time.Second, e.standbyConverged(2))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	pw := e.watchPoolNodes(watchCtx)
	terminations := e.emu.Calls("TerminateInstances", "")

	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "karp"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "karp"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "karp"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
			},
		},
	}
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	var karpNode string
	e.waitFor("Karpenter to provision for the Deployment", 120*time.Second, func(ctx context.Context) (bool, string) {
		pods := &corev1.PodList{}
		_ = e.client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "karp"})
		ready := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if !nodeutil.PodReady(p) {
				continue
			}
			n := &corev1.Node{}
			if e.client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, n) == nil && n.Labels[karpv1.NodePoolLabelKey] != "" {
				ready++
				karpNode = n.Name
			}
		}
		return ready == 3, fmt.Sprintf("%d of 3 Ready on Karpenter nodes", ready)
	})

	// Karpenter's AWS provider handles a Spot notice for karpNode: Warning events on the
	// NodeClaim and on the Node. A protected Pod there needs one lifeboat.
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "protected-karp", Labels: map[string]string{v1alpha1.LabelProtected: "true"}},
		Spec: corev1.PodSpec{NodeName: karpNode, Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
	}
	if err := e.client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	claims := &karpv1.NodeClaimList{}
	if err := e.client.List(ctx, claims); err != nil {
		t.Fatal(err)
	}
	var claim *karpv1.NodeClaim
	for i := range claims.Items {
		if claims.Items[i].Status.NodeName == karpNode {
			claim = &claims.Items[i]
		}
	}
	if claim == nil {
		t.Fatalf("no NodeClaim for %s", karpNode)
	}
	node := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: karpNode}, node); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the cache sees the protected Pod before the events
	starts := e.emu.Calls("StartInstances", "")
	for _, ref := range []corev1.ObjectReference{
		{Kind: "NodeClaim", APIVersion: "karpenter.sh/v1", Name: claim.Name, UID: claim.UID},
		{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
	} {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "default", GenerateName: "spot-interrupted-"},
			InvolvedObject: ref, Reason: intake.KarpenterReasonSpotInterrupted, Type: corev1.EventTypeWarning,
			Message: "Spot interruption warning was triggered", Source: corev1.EventSource{Component: "karpenter"},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}
		if err := e.client.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("one lifeboat active and Ready for the Karpenter node", 60*time.Second, e.activeReadyFor(karpNode, 1))
	if err := e.client.Get(ctx, types.NamespacedName{Name: karpNode}, node); err != nil {
		t.Fatal(err)
	}
	if src := node.Annotations[v1alpha1.AnnotationInterruptionSource]; src != marks.SourceKarpenterEvent {
		t.Fatalf("interruption source %q, want %q", src, marks.SourceKarpenterEvent)
	}
	if !nodeutil.HasTaint(node, v1alpha1.TaintInterrupted) {
		t.Fatalf("%s not tainted %s", karpNode, v1alpha1.TaintInterrupted)
	}

	// Karpenter consolidates its now empty nodes (WhenEmpty after 30 s); the pool stays.
	if err := e.client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "karp"}}, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
		t.Fatal(err)
	}
	e.waitFor("Karpenter to remove its empty nodes", 180*time.Second, func(ctx context.Context) (bool, string) {
		nodes := &corev1.NodeList{}
		if err := e.client.List(ctx, nodes, client.HasLabels{karpv1.NodePoolLabelKey}); err != nil {
			return false, err.Error()
		}
		return len(nodes.Items) == 0, fmt.Sprintf("%d Karpenter nodes", len(nodes.Items))
	})
	if got := e.emu.Calls("StartInstances", "") - starts; got != 1 {
		t.Fatalf("StartInstances %d times for two events of one interruption, want 1", got)
	}
	if got := e.emu.Calls("TerminateInstances", "") - terminations; got != 0 {
		t.Fatalf("%d pool instances terminated while Karpenter ran", got)
	}
	nodes := e.poolNodes(ctx, poolName)
	if len(nodes[v1alpha1.NodeStateStandby]) != 2 || len(nodes[v1alpha1.NodeStateActive]) != 1 {
		t.Fatalf("pool nodes standby %d active %d, want 2 and 1", len(nodes[v1alpha1.NodeStateStandby]), len(nodes[v1alpha1.NodeStateActive]))
	}
	if n := len(e.liveInstances(poolName)); n != 3 {
		t.Fatalf("%d live pool instances, want 3", n)
	}
	stopWatch()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(pw.violations) > 0 {
		t.Fatalf("Karpenter touched pool nodes: %v", pw.violations)
	}
}

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// spotWithProtectedPod creates a Spot node (instance id) and one protected Pod of cpu on it.
func (e *env) spotWithProtectedPod(ctx context.Context, name, id, cpu string) {
	e.t.Helper()
	n := kwokNode(name, map[string]string{v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelInstanceType: "m5.xlarge", v1alpha1.LabelZone: "us-east-1a"}, "4", "aws:///us-east-1a/"+id)
	if _, err := e.cluster.CreateKWOKNode(ctx, n); err != nil {
		e.t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-app", Labels: map[string]string{v1alpha1.LabelProtected: "true"}},
		Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
	}
	if err := e.client.Create(ctx, p); err != nil {
		e.t.Fatal(err)
	}
}

// oneActiveLifeboat creates spot-1 (instance i-00000000000000a01) with a protected 3-CPU Pod and
// a pool of one standby node (activeDuration 30s, then adjust), starts the manager, interrupts
// spot-1 through the queue and waits for its lifeboat to be active and Ready; it returns the
// lifeboat's name.
func (e *env) oneActiveLifeboat(ctx context.Context, adjust func(*v1alpha1.WarmPool)) string {
	e.t.Helper()
	e.spotWithProtectedPod(ctx, "spot-1", "i-00000000000000a01", "3")
	wp := e.warmPool(1, "30s")
	adjust(wp)
	if err := e.client.Create(ctx, wp); err != nil {
		e.t.Fatal(err)
	}
	e.startManager()
	e.waitFor("1 hibernated standby node", 90*time.Second, e.standbyConverged(1))
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a01", 1)); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("the lifeboat active and Ready for spot-1", 60*time.Second, e.activeReadyFor("spot-1", 1))
	return e.lifeboatsFor(ctx, "spot-1")[0].Name
}

// lifeboatsFor are the pool nodes claimed for the interrupted node.
func (e *env) lifeboatsFor(ctx context.Context, interrupted string) []corev1.Node {
	list := &corev1.NodeList{}
	if err := e.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelResumedFor: interrupted}); err != nil {
		return nil
	}
	return list.Items
}

// activeReadyFor: n pool nodes are active for interrupted, Ready, with the standby taint off.
func (e *env) activeReadyFor(interrupted string, n int) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		ready := 0
		boats := e.lifeboatsFor(ctx, interrupted)
		for i := range boats {
			b := &boats[i]
			if b.Labels[v1alpha1.LabelState] == string(v1alpha1.NodeStateActive) && nodeutil.Ready(b) && !nodeutil.HasTaint(b, v1alpha1.TaintStandby) {
				ready++
			}
		}
		return len(boats) == n && ready == n, fmt.Sprintf("claimed %d, active and Ready %d", len(boats), ready)
	}
}

// noOrphans: every live pool instance has a pool Node and every pool Node a live instance.
func (e *env) noOrphans(ctx context.Context) (bool, string) {
	live := map[string]bool{}
	for _, in := range e.liveInstances(poolName) {
		live[in.ID] = true
	}
	list := &corev1.NodeList{}
	if err := e.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelPool: poolName}); err != nil {
		return false, err.Error()
	}
	nodes := map[string]bool{}
	var problems []string
	for i := range list.Items {
		id := nodeutil.InstanceID(&list.Items[i])
		nodes[id] = true
		if !live[id] {
			problems = append(problems, "node "+list.Items[i].Name+" without a live instance")
		}
	}
	for id := range live {
		if !nodes[id] {
			problems = append(problems, "instance "+id+" without a node")
		}
	}
	return len(problems) == 0, strings.Join(problems, "; ")
}

// TestCrashSafety kills the manager at the steps the lifecycle test does not (before and after
// hibernation, after StartInstances, in the middle of a drain) and restarts it: every time it
// converges, with no orphaned instance, no instance launched or resumed twice.
func TestCrashSafety(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())

	// --- Before hibernation: both instances are launched, then every EC2 call fails, so no
	// hibernation can happen, and the manager dies.
	if err := e.client.Create(ctx, e.warmPool(2, "30s")); err != nil {
		t.Fatal(err)
	}
	m := e.startManager()
	e.waitFor("2 launches", 60*time.Second, func(context.Context) (bool, string) {
		n := e.emu.Calls("RunInstances", "")
		return n == 2, fmt.Sprintf("RunInstances %d", n)
	})
	e.emu.SetFaults(awsemu.Faults{EC2ServerError: 1})
	e.waitFor("2 pool nodes registered", 60*time.Second, func(ctx context.Context) (bool, string) {
		list := &corev1.NodeList{}
		if err := e.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelPool: poolName}); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 2, fmt.Sprintf("%d pool nodes", len(list.Items))
	})
	m.stop()
	if n := e.emu.Calls("StopInstances", ""); n != 0 {
		t.Fatalf("%d StopInstances succeeded while EC2 failed every call", n)
	}
	e.emu.SetFaults(awsemuNoFaults())
	runs := e.emu.Calls("RunInstances", "")
	m = e.startManager()
	e.waitFor("2 hibernated standby after the crash before hibernation", 90*time.Second, e.standbyConverged(2))
	if got := e.emu.Calls("RunInstances", ""); got != runs {
		t.Fatalf("RunInstances %d → %d across the restart: an instance was launched twice", runs, got)
	}
	if got := e.emu.Calls("StopInstances", ""); got != 2 {
		t.Fatalf("%d StopInstances for 2 instances", got)
	}

	// --- After hibernation: a replacement's StopInstances was issued, the Node not yet
	// standby, when the manager dies.
	victim := e.liveInstances(poolName)[0].ID
	stops := e.emu.Calls("StopInstances", "")
	if err := e.inst.Terminate(ctx, victim); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the replacement's hibernation", 60*time.Second, func(context.Context) (bool, string) {
		n := e.emu.Calls("StopInstances", "")
		return n > stops, fmt.Sprintf("StopInstances %d", n)
	})
	m.stop()
	m = e.startManager()
	e.waitFor("2 hibernated standby after the crash after hibernation", 90*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.standbyConverged(2)(ctx)
		clean, orphans := e.noOrphans(ctx)
		return ok && clean, desc + "; " + orphans
	})
	if got := e.emu.Calls("StopInstances", "") - stops; got != 1 {
		t.Errorf("the replacement was hibernated %d times, want 1", got)
	}

	// --- After StartInstances: the lifeboat's instance was started, its Node not yet
	// activated, when the manager dies.
	e.spotWithProtectedPod(ctx, "spot-c1", "i-00000000000000c01", "3")
	time.Sleep(500 * time.Millisecond) // the cache sees the Node and Pod before the notice
	starts := e.emu.Calls("StartInstances", "")
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000c01", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("StartInstances", 30*time.Second, func(context.Context) (bool, string) {
		n := e.emu.Calls("StartInstances", "")
		return n > starts, fmt.Sprintf("StartInstances %d", n)
	})
	m.stop()
	// The notice is delivered again after its visibility timeout if the crash beat the delete.
	m = e.startManager()
	e.waitFor("one lifeboat active and Ready for spot-c1", 60*time.Second, e.activeReadyFor("spot-c1", 1))
	e.waitFor("the pool to refill", 90*time.Second, e.standbyConverged(2))
	if got := e.emu.Calls("StartInstances", "") - starts; got != 1 {
		t.Fatalf("StartInstances succeeded %d times for one interrupted node needing one lifeboat", got)
	}
	spot := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-c1"}, spot); err != nil {
		t.Fatal(err)
	}
	boat := e.lifeboatsFor(ctx, "spot-c1")[0]
	if spot.Annotations[v1alpha1.AnnotationResumeDecision] != boat.Name {
		t.Fatalf("decision %q, want the one lifeboat %s", spot.Annotations[v1alpha1.AnnotationResumeDecision], boat.Name)
	}
	if n := len(e.liveInstances(poolName)); n != 3 {
		t.Fatalf("%d live pool instances, want 3 (2 standby + 1 active)", n)
	}

	// --- Mid-drain: a protected Deployment runs on the lifeboat; at activeDuration the node is
	// cordoned and drained; the manager dies during the drain.
	od := kwokNode("od-c1", map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelInstanceType: "m5.2xlarge", v1alpha1.LabelZone: "us-east-1b"}, "8", "aws:///us-east-1b/i-00000000000000d01")
	od.Spec.Unschedulable = true
	if _, err := e.cluster.CreateKWOKNode(ctx, od); err != nil {
		t.Fatal(err)
	}
	dep := lifeboatDeployment("drained", 1)
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the Deployment's Pod Ready on the lifeboat", 30*time.Second, func(ctx context.Context) (bool, string) {
		pods := &corev1.PodList{}
		_ = e.client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "drained"})
		for _, p := range pods.Items {
			if p.Spec.NodeName == boat.Name && nodeutil.PodReady(&p) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Pods", len(pods.Items))
	})
	if _, err := e.cluster.Client().CoreV1().Nodes().Patch(ctx, "od-c1", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the drain to begin (lifeboat cordoned, Deployment surged)", 60*time.Second, func(ctx context.Context) (bool, string) {
		n := &corev1.Node{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: boat.Name}, n); err != nil {
			return false, err.Error()
		}
		d := &appsv1.Deployment{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		return n.Spec.Unschedulable && d.Annotations[v1alpha1.AnnotationHandoffSurge] != "", fmt.Sprintf("cordoned %v, state %s, replicas %d", n.Spec.Unschedulable, n.Labels[v1alpha1.LabelState], *d.Spec.Replicas)
	})
	m.stop()
	terminations := e.emu.Calls("TerminateInstances", "")
	m = e.startManager()
	e.waitFor("the drain to finish after the restart: lifeboat gone, Deployment back to 1 Ready replica off the pool", 120*time.Second, func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		pods := &corev1.PodList{}
		_ = e.client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "drained"})
		ready, onPool := 0, 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp.IsZero() && nodeutil.PodReady(&p) {
				ready++
				if p.Spec.NodeName == boat.Name {
					onPool++
				}
			}
		}
		var state string
		for _, in := range e.emu.Instances() {
			if in.ID == nodeutil.InstanceID(&boat) {
				state = in.State
			}
		}
		gone := state == cloud.StateTerminated || state == cloud.StateShuttingDown
		return gone && ready == 1 && onPool == 0 && *d.Spec.Replicas == 1 && d.Annotations[v1alpha1.AnnotationHandoffSurge] == "",
			fmt.Sprintf("lifeboat instance %s, ready %d (on lifeboat %d), replicas %d, surge %q", state, ready, onPool, *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	})
	e.waitFor("2 standby, nothing orphaned", 90*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.standbyConverged(2)(ctx)
		clean, orphans := e.noOrphans(ctx)
		return ok && clean && len(e.liveInstances(poolName)) == 2, desc + "; " + orphans
	})
	if got := e.emu.Calls("TerminateInstances", "") - terminations; got < 1 {
		t.Fatalf("the drained lifeboat was never terminated after the restart")
	}
}

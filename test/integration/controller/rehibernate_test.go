package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// lifeboatDeployment is a protected Deployment whose Pods tolerate the lifeboat taint (standing in
// for the lifeboat scheduler, which these tests do not run), so they land on an active lifeboat
// node while the other capacity is cordoned.
func lifeboatDeployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, v1alpha1.LabelProtected: "true"}},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Key: v1alpha1.TaintLifeboat, Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: name, Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
				},
			},
		},
	}
}

// readyPods counts the Deployment's Ready Pods (not being deleted), and those of them on pool
// nodes (named ip-…, by the emulator's KWOK binding); -1 when the list fails (the poll's context
// ended). It reads through its own client: the shared one's rate limit would make a fast sampler
// starve the other polls.
func (e *env) readyPods(ctx context.Context, app string) (ready, onPool int) {
	pods := &corev1.PodList{}
	if err := e.sampler().List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
		return -1, -1
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp.IsZero() && nodeutil.PodReady(p) {
			ready++
			if strings.HasPrefix(p.Spec.NodeName, "ip-") {
				onPool++
			}
		}
	}
	return ready, onPool
}

var (
	samplerMu      sync.Mutex
	samplerClients = map[*env]client.Client{}
)

// sampler is a client with a rate limit high enough to sample every 20 ms.
func (e *env) sampler() client.Client {
	samplerMu.Lock()
	defer samplerMu.Unlock()
	if c, ok := samplerClients[e]; ok {
		return c
	}
	cfg := e.cluster.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		e.t.Fatal(err)
	}
	samplerClients[e] = c
	e.t.Cleanup(func() {
		samplerMu.Lock()
		defer samplerMu.Unlock()
		delete(samplerClients, e)
	})
	return c
}

// backInStandby: the node of instance id is a standby pool node again, exactly like a freshly
// warmed one — hibernated instance, state standby, standby and lifeboat taints, uncordoned, no
// trace of its claim — and it is the pool's only instance.
func (e *env) backInStandby(id string) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		live := e.liveInstances(poolName)
		if len(live) != 1 || live[0].ID != id {
			ids := []string{}
			for _, in := range live {
				ids = append(ids, in.ID+"/"+in.State)
			}
			return false, fmt.Sprintf("live instances %v, want only %s", ids, id)
		}
		if live[0].State != cloud.StateStopped || live[0].StateReason != cloud.ReasonUserInitiatedHibernate {
			return false, fmt.Sprintf("%s is %s (%s), want stopped by hibernation", id, live[0].State, live[0].StateReason)
		}
		list := &corev1.NodeList{}
		if err := e.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelPool: poolName}); err != nil || len(list.Items) != 1 {
			return false, fmt.Sprintf("pool nodes %d (%v)", len(list.Items), err)
		}
		n := &list.Items[0]
		var leftovers []string
		for _, k := range []string{v1alpha1.AnnotationActivatedAt, v1alpha1.AnnotationStartRequestedAt, v1alpha1.AnnotationResumedReadyAt, v1alpha1.AnnotationDrainingSince, v1alpha1.AnnotationInterruptedAt, v1alpha1.AnnotationRecycledAt} {
			if _, ok := n.Annotations[k]; ok {
				leftovers = append(leftovers, k)
			}
		}
		if v, ok := n.Labels[v1alpha1.LabelResumedFor]; ok {
			leftovers = append(leftovers, v1alpha1.LabelResumedFor+"="+v)
		}
		desc := fmt.Sprintf("node %s (instance %s) state %q, standby taint %v, lifeboat taint %v, unschedulable %v, claim leftovers %v",
			n.Name, nodeutil.InstanceID(n), nodeutil.State(n), nodeutil.HasTaint(n, v1alpha1.TaintStandby), nodeutil.HasTaint(n, v1alpha1.TaintLifeboat), n.Spec.Unschedulable, leftovers)
		ok := nodeutil.InstanceID(n) == id && nodeutil.State(n) == v1alpha1.NodeStateStandby && nodeutil.HasTaint(n, v1alpha1.TaintStandby) &&
			nodeutil.HasTaint(n, v1alpha1.TaintLifeboat) && !n.Spec.Unschedulable && len(leftovers) == 0
		wp := &v1alpha1.WarmPool{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: poolName}, wp); err != nil {
			return false, err.Error()
		}
		desc += fmt.Sprintf("; status standby %d active %d draining %d warming %d", wp.Status.Standby, wp.Status.Active, wp.Status.Draining, wp.Status.Warming)
		return ok && wp.Status.Standby == 1 && wp.Status.Active+wp.Status.Draining+wp.Status.Warming == 0, desc
	}
}

// TestRehibernate: a pool of 1 with afterUse Rehibernate. An interruption resumes its node, which
// serves a Deployment; at activeDuration it is handed off (surge onto the On-Demand node), and
// once empty the same instance goes back to hibernated standby — no RunInstances, no
// TerminateInstances, the pool never above its size — even though the manager is killed
// right after the node went back. Then, with the instance's hibernation degrading to a plain
// stop, the next return falls back to terminate and the pool launches a replacement.
func TestRehibernate(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())

	// Karpenter's replacement capacity, cordoned until the handoff; two Spot nodes with a
	// protected Pod each, for two interruptions. Created before the manager starts, so its
	// cache holds them when the notices arrive.
	od := kwokNode("od-1", map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelInstanceType: "m5.2xlarge", v1alpha1.LabelZone: "us-east-1b"}, "8", "aws:///us-east-1b/i-00000000000000b01")
	od.Spec.Unschedulable = true
	if _, err := e.cluster.CreateKWOKNode(ctx, od); err != nil {
		t.Fatal(err)
	}
	e.spotWithProtectedPod(ctx, "spot-1", "i-00000000000000a01", "3")
	e.spotWithProtectedPod(ctx, "spot-2", "i-00000000000000a02", "3")
	// spot-2 is interrupted only later: cordoned, so that web lands on the lifeboat.
	if _, err := e.cluster.Client().CoreV1().Nodes().Patch(ctx, "spot-2", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	wp := e.warmPool(1, "30s")
	wp.Spec.AfterUse = v1alpha1.AfterUseRehibernate
	if err := e.client.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	m := e.startManager()
	e.waitFor("1 hibernated standby node", 90*time.Second, e.standbyConverged(1))
	id := e.liveInstances(poolName)[0].ID
	runs, terms := e.emu.Calls("RunInstances", ""), e.emu.Calls("TerminateInstances", "")

	// --- Interruption: the standby node is resumed and stays in its slot (no refill).
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a01", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the lifeboat active and Ready for spot-1", 60*time.Second, e.activeReadyFor("spot-1", 1))
	boat := e.lifeboatsFor(ctx, "spot-1")[0]
	if got := nodeutil.InstanceID(&boat); got != id {
		t.Fatalf("resumed instance %s, want the standby %s", got, id)
	}
	dep := lifeboatDeployment("web", 1)
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web Ready on the lifeboat", 30*time.Second, func(ctx context.Context) (bool, string) {
		r, p := e.readyPods(ctx, "web")
		return r == 1 && p == 1, fmt.Sprintf("ready %d, on the pool %d", r, p)
	})
	if _, err := e.cluster.Client().CoreV1().Nodes().Patch(ctx, "od-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// --- Handoff, then the return: kill the manager as soon as the node has left draining
	// (warming, or already hibernated standby), and restart it.
	e.waitFor("the lifeboat handed off and back in the pool", 120*time.Second, func(ctx context.Context) (bool, string) {
		n := &corev1.Node{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: boat.Name}, n); err != nil {
			return false, err.Error()
		}
		s := nodeutil.State(n)
		r, p := e.readyPods(ctx, "web")
		return s == v1alpha1.NodeStateWarming || s == v1alpha1.NodeStateStandby, fmt.Sprintf("state %q, web ready %d (on the pool %d)", s, r, p)
	})
	m.stop()
	if n := len(e.liveInstances(poolName)); n != 1 {
		t.Fatalf("%d live pool instances at the crash, want 1", n)
	}
	m = e.startManager()
	e.waitFor("the same instance hibernated in standby again", 60*time.Second, e.backInStandby(id))
	if r, p := e.readyPods(ctx, "web"); r != 1 || p != 0 {
		t.Fatalf("web ready %d (on the pool %d), want 1 on od-1", r, p)
	}
	got := &appsv1.Deployment{}
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 1 || got.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Fatalf("web replicas %d annotations %v: surge not undone", *got.Spec.Replicas, got.Annotations)
	}
	if n := e.emu.Calls("RunInstances", "") - runs; n != 0 {
		t.Fatalf("%d RunInstances during the rehibernating cycle, want 0 (the pool keeps its instance)", n)
	}
	if n := e.emu.Calls("TerminateInstances", "") - terms; n != 0 {
		t.Fatalf("%d TerminateInstances during the rehibernating cycle, want 0", n)
	}
	if ok, orphans := e.noOrphans(ctx); !ok {
		t.Fatalf("orphans: %s", orphans)
	}

	// --- Fallback: the next hibernation of this instance degrades to a stop; the instance is
	// terminated and the slot refills with a new one.
	e.emu.UpdateFaults(func(f *awsemu.Faults) { f.DegradeHibernationOf = map[string]bool{id: true} })
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a02", 2)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the same lifeboat active again for spot-2", 60*time.Second, e.activeReadyFor("spot-2", 1))
	if b := e.lifeboatsFor(ctx, "spot-2")[0]; nodeutil.InstanceID(&b) != id {
		t.Fatalf("resumed %s for spot-2, want the rehibernated %s", nodeutil.InstanceID(&b), id)
	}
	e.waitFor("the degraded instance replaced by a new hibernated standby", 150*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.standbyConverged(1)(ctx)
		live := e.liveInstances(poolName)
		replaced := len(live) == 1 && live[0].ID != id
		clean, orphans := e.noOrphans(ctx)
		return ok && replaced && clean, fmt.Sprintf("%s; replaced %v; %s", desc, replaced, orphans)
	})
	if in, ok := e.emu.Instance(id); !ok || (in.State != cloud.StateTerminated && in.State != cloud.StateShuttingDown) {
		t.Fatalf("degraded instance %s is %q, want terminated", id, in.State)
	}
	if n := e.emu.Calls("RunInstances", "") - runs; n != 1 {
		t.Fatalf("%d RunInstances after the degraded hibernation, want 1 (the replacement)", n)
	}
}

package reclaimback

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
)

const (
	ns       = "shop"
	replicas = 3
)

// TestReclaimBack runs reclaim-back on the real control plane, one scene after the other on
// one cluster (each needs the state the previous one left):
//
//  1. Karpenter launched On-Demand for a protected Deployment (its NodePool allowed only
//     On-Demand, then allows Spot too) and for a critical Deployment.
//  2. A policy whose window is closed: nothing moves; the status says why and when. Then the
//     window opens, but a fresh Karpenter InsufficientCapacityError event for a NodeClaim of
//     the NodePool holds the moves (SpotUnstable) until it is gone.
//  3. The window opens (always), but a heavier On-Demand-only NodePool makes Karpenter launch
//     On-Demand again for the surge: the move is aborted, undone and cooled down.
//  4. That NodePool is gone; after the cool-down the next try surges onto Spot. The controller
//     is killed mid-move and restarted; the new one finishes: the old node's NodeClaim is
//     deleted and every replica runs on Spot.
//
// Throughout, the protected Deployment's Ready replicas (sampled every 100 ms) never drop
// below its replica count, and the critical Pod never moves.
func TestReclaimBack(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kube := e.cluster.Client()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// 1. On-Demand fallback capacity.
	pay := deployment("pay", 1, "200m", func(s *corev1.PodSpec, l map[string]string) {
		l[v1alpha1.LabelTier] = string(v1alpha1.TierCritical)
		s.NodeSelector = map[string]string{v1alpha1.LabelCapacityType: "on-demand"}
	})
	web := deployment("web", replicas, "300m", func(s *corev1.PodSpec, _ map[string]string) {
		// Apart from the critical Pod: its node is never fallback capacity to move.
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pay"}}, TopologyKey: corev1.LabelHostname,
		}}}}
	})
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	for _, o := range []client.Object{pay, pdb} {
		if err := e.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("the critical Deployment Ready", 90*time.Second, e.ready("pay"))
	if err := e.client.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the protected Deployment Ready", 90*time.Second, e.ready("web"))
	payPod := e.pods(ctx, "pay")[0]
	oldNodes := e.nodesOf(ctx, "web")
	for n := range oldNodes {
		if ct := e.node(ctx, n).Labels[v1alpha1.LabelCapacityType]; ct != "on-demand" {
			t.Fatalf("web runs on %s (%s) before the test relaxed its NodePool", n, ct)
		}
	}
	t.Logf("web on On-Demand %v, pay on %s", keys(oldNodes), payPod.Spec.NodeName)
	// Spot is back: the NodePool allows it again (as after a crunch). Karpenter does not move
	// the On-Demand nodes by itself (its budget here, WhenEmpty in general).
	np := &karpv1.NodePool{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "default"}, np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Template.Spec.Requirements[0].Values = []string{"spot", "on-demand"}
	if err := e.client.Update(ctx, np); err != nil {
		t.Fatal(err)
	}

	minReady := e.sampleReady(t, "web")
	mgr := e.startManager()

	// 2. Outside the window: nothing moves.
	closed := time.Now().UTC().Add(6 * time.Hour)
	policy := &v1alpha1.ReclaimBackPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: v1alpha1.ReclaimBackPolicySpec{
		NodePools: v1alpha1.NodePoolSelector{Names: []string{"default"}},
		Windows:   []v1alpha1.MaintenanceWindow{{Days: []string{"Daily"}, Start: closed.Format("15:04"), Duration: metav1.Duration{Duration: time.Hour}}},
		CoolDown:  v1alpha1.CoolDownSpec{Initial: metav1.Duration{Duration: time.Minute}, Max: metav1.Duration{Duration: 2 * time.Minute}},
	}}
	if err := e.client.Create(ctx, policy); err != nil {
		t.Fatalf("create the policy (CRD validation): %v", err)
	}
	e.waitFor("Blocked WindowClosed", 30*time.Second, e.policyCond(func(p *v1alpha1.ReclaimBackPolicy) (bool, string) {
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBlocked)
		return c != nil && c.Reason == v1alpha1.ReasonWindowClosed && p.Status.NextWindow != nil && p.Status.FallbackNodes == int32(len(oldNodes)),
			fmt.Sprintf("conditions %+v next %v fallback %d", p.Status.Conditions, p.Status.NextWindow, p.Status.FallbackNodes)
	}))
	time.Sleep(3 * time.Second)
	for n := range oldNodes {
		if node := e.node(ctx, n); node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationReclaimBack] != "" {
			t.Fatalf("outside the window %s was touched: unschedulable %v, %q", n, node.Spec.Unschedulable, node.Annotations[v1alpha1.AnnotationReclaimBack])
		}
	}

	// 3. Karpenter launches On-Demand again: a heavier On-Demand-only NodePool takes the surge.
	if err := e.cluster.ApplyYAML(ctx, nodePoolYAML("od-first", 100, "on-demand", "100%")); err != nil {
		t.Fatal(err)
	}
	// 2b. The window is open, but Karpenter just failed to launch a NodeClaim of the NodePool
	// for insufficient capacity (the Warning event it publishes): Spot is not back yet.
	ice := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default-ice01.ice"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "default-ice01"},
		Reason:         reclaimplan.ReasonKarpenterICE, Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "karpenter"},
		Message:        "NodeClaim default-ice01 event: insufficient capacity, all requested instance types were unavailable during launch",
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
	if _, err := kube.CoreV1().Events("default").Create(ctx, ice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.patchPolicy(ctx, func(s *v1alpha1.ReclaimBackPolicySpec) { s.Windows, s.Always = nil, true })
	e.waitFor("Blocked SpotUnstable by Karpenter's ICE", 30*time.Second, e.policyCond(func(p *v1alpha1.ReclaimBackPolicy) (bool, string) {
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBlocked)
		return c != nil && c.Reason == v1alpha1.ReasonSpotUnstable && strings.Contains(c.Message, reclaimplan.ReasonKarpenterICE) && len(p.Status.InFlight) == 0,
			fmt.Sprintf("conditions %+v inFlight %+v", p.Status.Conditions, p.Status.InFlight)
	}))
	if err := kube.CoreV1().Events("default").Delete(ctx, ice.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nudge a pass now that the event is gone (a Node change would too, or the idle requeue).
	e.patchPolicy(ctx, func(s *v1alpha1.ReclaimBackPolicySpec) { s.MoveTimeout = &metav1.Duration{Duration: 15 * time.Minute} })
	e.waitFor("the first try aborted", 2*time.Minute, e.policyCond(func(p *v1alpha1.ReclaimBackPolicy) (bool, string) {
		lm := p.Status.LastMove
		return p.Status.Aborted >= 1 && lm != nil && lm.Reason == reclaimplan.AbortOnDemandAgain && p.Status.CoolDownUntil != nil,
			fmt.Sprintf("aborted %d lastMove %+v inFlight %+v", p.Status.Aborted, lm, p.Status.InFlight)
	}))
	// Gone, with its node, before the cool-down (1 min: room for a loaded machine) ends: a
	// retry would otherwise land on that empty On-Demand node and abort again (as it should).
	if err := e.client.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "od-first"}}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("od-first's nodes gone", 50*time.Second, func(ctx context.Context) (bool, string) {
		list := &corev1.NodeList{}
		if err := e.client.List(ctx, list, client.MatchingLabels{reclaimplan.LabelNodePool: "od-first"}); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d node(s)", len(list.Items))
	})
	p := e.policy(ctx)
	t.Logf("aborted: %+v; cool-down until %s", p.Status.LastMove, p.Status.CoolDownUntil)
	if p.Status.ConsecutiveFailures != 1 {
		t.Errorf("consecutive failures %d after one abort", p.Status.ConsecutiveFailures)
	}
	for n := range oldNodes {
		node := e.node(ctx, n)
		if node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationReclaimBack] != "" {
			t.Errorf("after the abort %s is still cordoned (%v) or marked (%q)", n, node.Spec.Unschedulable, node.Annotations[v1alpha1.AnnotationReclaimBack])
		}
	}
	if d := e.deployment(ctx, "web"); *d.Spec.Replicas != replicas || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Errorf("after the abort web has %d replicas and surge record %q", *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	}
	e.expectEvent(ctx, v1alpha1.EventReclaimBackAborted)

	// 4. Spot for real; the controller dies mid-move.
	e.waitFor("the second try surging", 2*time.Minute, func(ctx context.Context) (bool, string) {
		d := e.deployment(ctx, "web")
		return strings.Contains(d.Annotations[v1alpha1.AnnotationHandoffSurge], `"by":"reclaim-back"`),
			fmt.Sprintf("replicas %d", *d.Spec.Replicas)
	})
	mgr.stop()
	t.Log("controller stopped mid-move")
	time.Sleep(2 * time.Second)
	e.startManager()
	e.waitFor("the move done", 3*time.Minute, e.policyCond(func(p *v1alpha1.ReclaimBackPolicy) (bool, string) {
		return p.Status.Succeeded >= int32(len(oldNodes)) && len(p.Status.InFlight) == 0,
			fmt.Sprintf("succeeded %d aborted %d inFlight %+v blocked %v", p.Status.Succeeded, p.Status.Aborted, p.Status.InFlight, meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBlocked))
	}))
	e.waitFor("the old On-Demand nodes gone and web Ready on Spot", 2*time.Minute, func(ctx context.Context) (bool, string) {
		for n := range oldNodes {
			if err := e.client.Get(ctx, types.NamespacedName{Name: n}, &corev1.Node{}); !apierrors.IsNotFound(err) {
				return false, "node " + n + " still there"
			}
		}
		for n := range e.nodesOf(ctx, "web") {
			if ct := e.node(ctx, n).Labels[v1alpha1.LabelCapacityType]; ct != "spot" {
				return false, "web on " + n + " (" + ct + ")"
			}
		}
		d := e.deployment(ctx, "web")
		return deploymentReady(d) && *d.Spec.Replicas == replicas, fmt.Sprintf("web %d/%d Ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
	})
	e.expectEvent(ctx, v1alpha1.EventReclaimBackSucceeded)

	if got := minReady(); got < replicas {
		t.Errorf("web's Ready replicas dropped to %d during the moves, below its %d replicas", got, replicas)
	}
	if now := e.pods(ctx, "pay"); len(now) != 1 || now[0].UID != payPod.UID || now[0].Spec.NodeName != payPod.Spec.NodeName {
		t.Errorf("the critical Pod moved: was %s on %s", payPod.Name, payPod.Spec.NodeName)
	}
	if n := e.node(ctx, payPod.Spec.NodeName); n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationReclaimBack] != "" {
		t.Errorf("the critical Pod's node %s was cordoned or marked", n.Name)
	}
	p = e.policy(ctx)
	if p.Status.ReturnedNodes != int32(len(oldNodes)) || p.Status.ConsecutiveFailures != 0 {
		t.Errorf("status after the success: returned %d, consecutive failures %d", p.Status.ReturnedNodes, p.Status.ConsecutiveFailures)
	}
	tried, succeeded, aborted := testutil.ToFloat64(metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultTried)),
		testutil.ToFloat64(metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultSucceeded)), testutil.ToFloat64(metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultAborted))
	if tried != 2 || succeeded != 1 || aborted != 1 {
		t.Errorf("lifeboat_reclaimback_moves_total tried %g succeeded %g aborted %g", tried, succeeded, aborted)
	}
	t.Logf("moves tried %g, succeeded %g, aborted %g; web Ready never below %d", tried, succeeded, aborted, minReady())

	// The finalizer lets a policy with nothing in flight go at once.
	if err := e.client.Delete(ctx, e.policy(ctx)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the policy deleted", 20*time.Second, func(ctx context.Context) (bool, string) {
		err := e.client.Get(ctx, types.NamespacedName{Name: "nightly"}, &v1alpha1.ReclaimBackPolicy{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func deployment(name string, n int32, cpu string, mutate func(*corev1.PodSpec, map[string]string)) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
		TerminationGracePeriodSeconds: ptr.To[int64](0)}
	podLabels := map[string]string{"app": name}
	mutate(&spec, podLabels)
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(n), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: spec},
	}}
}

func (e *env) deployment(ctx context.Context, name string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, d); err != nil && ctx.Err() == nil {
		e.t.Fatal(err)
	}
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptr.To[int32](0)
	}
	return d
}

func (e *env) ready(name string) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		d := e.deployment(ctx, name)
		return deploymentReady(d), fmt.Sprintf("%d/%d Ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
	}
}

func (e *env) pods(ctx context.Context, app string) []corev1.Pod {
	list := &corev1.PodList{}
	if err := e.client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) nodesOf(ctx context.Context, app string) map[string]bool {
	out := map[string]bool{}
	for _, p := range e.pods(ctx, app) {
		if p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = true
		}
	}
	return out
}

func (e *env) node(ctx context.Context, name string) *corev1.Node {
	n := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil && ctx.Err() == nil {
		e.t.Fatalf("node %s: %v", name, err)
	}
	return n
}

func (e *env) policy(ctx context.Context) *v1alpha1.ReclaimBackPolicy {
	p := &v1alpha1.ReclaimBackPolicy{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "nightly"}, p); err != nil && ctx.Err() == nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) policyCond(cond func(*v1alpha1.ReclaimBackPolicy) (bool, string)) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) { return cond(e.policy(ctx)) }
}

func (e *env) patchPolicy(ctx context.Context, mutate func(*v1alpha1.ReclaimBackPolicySpec)) {
	e.t.Helper()
	p := e.policy(ctx)
	before := p.DeepCopy()
	mutate(&p.Spec)
	if err := e.client.Patch(ctx, p, client.MergeFrom(before)); err != nil {
		e.t.Fatalf("update the policy: %v", err)
	}
}

func (e *env) expectEvent(ctx context.Context, reason string) {
	e.t.Helper()
	e.waitFor("a "+reason+" event", 20*time.Second, func(ctx context.Context) (bool, string) {
		list, err := e.cluster.Client().EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		onNode, onPool := false, false
		for _, ev := range list.Items {
			if ev.Reason != reason {
				continue
			}
			onNode = onNode || ev.Regarding.Kind == "Node"
			onPool = onPool || ev.Regarding.Kind == "NodePool"
		}
		return onNode && onPool, fmt.Sprintf("on a Node %v, on a NodePool %v", onNode, onPool)
	})
}

// sampleReady counts the app's Ready, not terminating Pods every 100 ms until the test ends;
// the returned func is the lowest count seen.
func (e *env) sampleReady(t *testing.T, app string) func() int {
	var lowest atomic.Int64
	lowest.Store(1 << 30)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			list, err := e.cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				continue
			}
			ready := 0
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil {
					continue
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if int64(ready) < lowest.Load() {
				lowest.Store(int64(ready))
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() int { return int(lowest.Load()) }
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

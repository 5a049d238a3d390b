package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// newNamespace creates a namespace whose workloads Lifeboat protects; it is deleted when the
// test ends.
func (e *env) newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := e.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix + "-", Labels: map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// workload describes a protected Deployment or StatefulSet of the tests: replicas of 500m,
// graceSeconds of graceful shutdown, a PDB with maxUnavailable (or minAvailable when set).
type workload struct {
	name           string
	statefulSet    bool
	replicas       int32
	graceSeconds   int64
	maxUnavailable int32
	minAvailable   int32
}

func (w workload) selector() string { return "app=" + w.name }

// create makes the PDB (first: the webhook rejects a protected workload without one) and the
// workload.
func (e *env) create(t *testing.T, ns string, w workload) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": w.name}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel, MaxUnavailable: ptr.To(intstr.FromInt32(w.maxUnavailable))}}
	if w.minAvailable > 0 {
		pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable = nil, ptr.To(intstr.FromInt32(w.minAvailable))
	}
	if _, err := e.kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(w.graceSeconds),
			Containers: []corev1.Container{{Name: "app", Image: image, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
		},
	}
	var err error
	if w.statefulSet {
		_, err = e.kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(w.replicas), Selector: sel, Template: tmpl, ServiceName: w.name,
				PodManagementPolicy: appsv1.ParallelPodManagement},
		}, metav1.CreateOptions{})
	} else {
		_, err = e.kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(w.replicas), Selector: sel, Template: tmpl},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// listPods lists the Pods of a selector (from the API server).
func (e *env) listPods(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// readyCount counts the Pods that serve: Ready and not terminating.
func readyCount(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && nodeutil.PodReady(&pods[i]) {
			n++
		}
	}
	return n
}

// place creates the workloads and waits until their Pods are Ready, n in all, all on one
// Karpenter Spot node; it returns that node and the Pods. Karpenter may split them over two
// nodes: the ReplicaSet controller creates a Deployment's Pods in slow-start batches (1, 2,
// then 3 of 6) and, when the API server is slow (make test runs the suites side by side), a
// batch can come after Karpenter's provisioning batch closed (seen in CI: 3 and 3 Pods on two
// new nodes). The tests need one node, so place then scales the workloads to 0, retires the
// Karpenter nodes and scales back, up to three times in all.
func (e *env) place(t *testing.T, ns string, n int, ws ...workload) (string, []corev1.Pod) {
	t.Helper()
	for _, w := range ws {
		e.create(t, ns, w)
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		node, placed, byNode := e.waitPlaced(t, ns, n, ws)
		if node != "" {
			return node, placed
		}
		if attempt == attempts {
			t.Fatalf("Karpenter placed the %d Pods on more than one node in %d attempts (last: %v); the test needs them on one", n, attempts, byNode)
		}
		t.Logf("attempt %d: Karpenter placed the %d Pods on %d nodes %v; scaling to 0 and placing them again", attempt, n, len(byNode), byNode)
		for _, w := range ws {
			e.scale(t, ns, w, 0)
		}
		waitFor(t, "the split Pods gone", 60*time.Second, func(ctx context.Context) (bool, string) {
			left := 0
			for _, w := range ws {
				pods, err := e.listPods(ctx, ns, w.selector())
				if err != nil {
					return false, err.Error()
				}
				left += len(pods)
			}
			return left == 0, fmt.Sprintf("%d Pods left", left)
		})
		e.retireKarpenterNodes(t)
		for _, w := range ws {
			e.scale(t, ns, w, w.replicas)
		}
	}
}

// scale sets a workload's replicas.
func (e *env) scale(t *testing.T, ns string, w workload, replicas int32) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	var err error
	if w.statefulSet {
		_, err = e.kube.AppsV1().StatefulSets(ns).Patch(context.Background(), w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = e.kube.AppsV1().Deployments(ns).Patch(context.Background(), w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitPlaced waits until the workloads' Pods are Ready, n in all. On one Karpenter Spot node it
// returns that node and the Pods; on several, no node and the Pods' count by node.
func (e *env) waitPlaced(t *testing.T, ns string, n int, ws []workload) (string, []corev1.Pod, map[string]int) {
	t.Helper()
	var placed []corev1.Pod
	var nodes map[string]int
	waitFor(t, fmt.Sprintf("%d Ready protected Pods on Karpenter Spot nodes", n), 120*time.Second, func(ctx context.Context) (bool, string) {
		placed = nil
		for _, w := range ws {
			pods, err := e.listPods(ctx, ns, w.selector())
			if err != nil {
				return false, err.Error()
			}
			placed = append(placed, pods...)
		}
		nodes = map[string]int{}
		for i := range placed {
			nodes[placed[i].Spec.NodeName]++
		}
		if readyCount(placed) != n || len(placed) != n {
			return false, fmt.Sprintf("%d Pods, %d Ready, by node %v", len(placed), readyCount(placed), nodes)
		}
		for name := range nodes {
			nd, err := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if nd.Labels[v1alpha1.LabelCapacityType] != "spot" || nd.Labels["karpenter.sh/nodepool"] == "" {
				return false, fmt.Sprintf("node %s is not a Karpenter Spot node: %v", name, nd.Labels)
			}
		}
		return true, ""
	})
	for i := range placed {
		if placed[i].Labels[v1alpha1.LabelProtected] != "true" {
			t.Fatalf("Pod %s is not protected (labels %v): the webhook did not mutate it", placed[i].Name, placed[i].Labels)
		}
	}
	if len(nodes) != 1 {
		return "", nil, nodes
	}
	return placed[0].Spec.NodeName, placed, nodes
}

// retireKarpenterNodes deletes every Karpenter NodeClaim (the test's workloads are gone by
// now: these are replacements launched during earlier rounds) and waits until none of their
// Nodes can take a Pod, so a round's Pods land together on the one node Karpenter launches
// for them.
//
// keep names nodes to leave in service (a test's own node).
func (e *env) retireKarpenterNodes(t *testing.T, keep ...string) {
	t.Helper()
	kept := map[string]bool{}
	for _, name := range keep {
		n, err := e.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kept[n.Spec.ProviderID] = true
	}
	// Deleted again on every look: Karpenter may launch a NodeClaim meanwhile for a Pod of the
	// last test that is still being deleted.
	waitFor(t, "earlier Karpenter nodes out of scheduling", 60*time.Second, func(ctx context.Context) (bool, string) {
		claims, err := e.dyn.Resource(localcluster.NodeClaimGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		claimed := map[string]bool{}
		for _, cl := range claims.Items {
			id, _, _ := unstructured.NestedString(cl.Object, "status", "providerID")
			if id != "" {
				claimed[id] = true
			}
			if cl.GetDeletionTimestamp() != nil || (id != "" && kept[id]) {
				continue
			}
			if err := e.dyn.Resource(localcluster.NodeClaimGVR).Delete(ctx, cl.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
		}
		nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
		if err != nil {
			return false, err.Error()
		}
		var open []string
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if n.DeletionTimestamp != nil || nodeutil.HasTaint(n, v1alpha1.TaintKarpenterDisrupted) || kept[n.Spec.ProviderID] {
				continue
			}
			open = append(open, n.Name)
			if !claimed[n.Spec.ProviderID] {
				// Its NodeClaim was deleted before the Node registered: nothing removes it.
				if err := e.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return false, err.Error()
				}
			}
		}
		return len(open) == 0, fmt.Sprintf("still schedulable: %v", open)
	})
}

var instanceSeq atomic.Int64

// prepareNotice gives a Karpenter node an EC2 instance ID. Karpenter's KWOK nodes have kwok://
// provider IDs; on AWS their aws:///zone/i-… ID is what the notice names. Lifeboat reads the
// ID from the annotation first (nodeutil.InstanceID), so the queue's message finds the Node.
// Written well before the notice: the controller's cache must show it by then.
func (e *env) prepareNotice(t *testing.T, node string) string {
	t.Helper()
	id := fmt.Sprintf("i-%017x", 0xb000+instanceSeq.Add(1))
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationInstanceID, id)
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return id
}

// spotNotice is EventBridge's "EC2 Spot Instance Interruption Warning" for the instance.
func spotNotice(id string, at time.Time) string {
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": "bridge-" + id, "detail-type": "EC2 Spot Instance Interruption Warning",
		"source": "aws.ec2", "account": "000000000000", "time": at.UTC().Format(time.RFC3339), "region": "us-east-1",
		"resources": []string{"arn:aws:ec2:" + zone + ":instance/" + id},
		"detail":    map[string]string{"instance-id": id, "instance-action": "terminate"},
	})
	return string(b)
}

// interrupt delivers one Spot notice for the node at one instant, on both paths: Karpenter's
// (its AWS provider deletes the NodeClaim: the drain starts) and Lifeboat's (the EventBridge
// message lands in the emulated SQS queue). Both writes are released together; it returns the
// notice time.
func (e *env) interrupt(t *testing.T, node, instanceID string) time.Time {
	t.Helper()
	ctx := context.Background()
	claim, err := e.nodeClaimOf(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-start
		errs[0] = e.dyn.Resource(localcluster.NodeClaimGVR).Delete(ctx, claim, metav1.DeleteOptions{})
	}()
	var t0 time.Time
	go func() {
		defer wg.Done()
		<-start
		_, errs[1] = e.emu.SendMessage(queueName, spotNotice(instanceID, t0))
	}()
	t0 = time.Now()
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("deliver the notice for %s: %v", node, err)
		}
	}
	return t0
}

func (e *env) nodeClaimOf(ctx context.Context, node string) (string, error) {
	claims, err := e.dyn.Resource(localcluster.NodeClaimGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, cl := range claims.Items {
		if name, _, _ := unstructured.NestedString(cl.Object, "status", "nodeName"); name == node {
			return cl.GetName(), nil
		}
	}
	return "", fmt.Errorf("no NodeClaim for node %s", node)
}

// waitGoneBy waits until none of the Pods (by UID) exists any more, at the latest until
// reclaim. If some are still there then, the reclaim happens as AWS would do it: those Pods
// die at once (deleted without grace) and are returned, sorted.
func (e *env) waitGoneBy(t *testing.T, ns string, old []corev1.Pod, reclaim time.Time) []string {
	t.Helper()
	alive := func(ctx context.Context) []corev1.Pod {
		var out []corev1.Pod
		for i := range old {
			p, err := e.kube.CoreV1().Pods(ns).Get(ctx, old[i].Name, metav1.GetOptions{})
			if err == nil && p.UID == old[i].UID {
				out = append(out, *p)
			}
		}
		return out
	}
	err := poll(time.Until(reclaim), func(ctx context.Context) (bool, string) {
		left := alive(ctx)
		names := make([]string, len(left))
		for i := range left {
			names[i] = left[i].Name
		}
		return len(left) == 0, fmt.Sprintf("alive: %v", names)
	})
	if err == nil {
		return nil
	}
	ctx := context.Background()
	var killed []string
	for _, p := range alive(ctx) {
		killed = append(killed, fmt.Sprintf("%s (hold %q, deleting %v)", p.Name, p.Annotations[v1alpha1.AnnotationEvictionHold], p.DeletionTimestamp != nil))
		_ = e.kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &p.UID}})
	}
	sort.Strings(killed)
	return killed
}

// waitSurgeDone waits until the Deployment is back to its own replica count with no bridge
// surge recorded, and that many Pods Ready.
func (e *env) waitSurgeDone(t *testing.T, ns, name string, replicas int32, timeout time.Duration) {
	t.Helper()
	waitFor(t, "the bridge surge of "+name+" to end", timeout, func(ctx context.Context) (bool, string) {
		d, err := e.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := e.listPods(ctx, ns, "app="+name)
		if err != nil {
			return false, err.Error()
		}
		surge, surging := d.Annotations[v1alpha1.AnnotationBridgeSurge]
		return !surging && ptr.Deref(d.Spec.Replicas, 0) == replicas && readyCount(pods) == int(replicas) && len(pods) == int(replicas),
			fmt.Sprintf("replicas %d, surge %q, %d Pods, %d Ready", ptr.Deref(d.Spec.Replicas, 0), surge, len(pods), readyCount(pods))
	})
}

// events lists the namespace's events with the reason, as "object: message".
func (e *env) events(ctx context.Context, ns, reason string) ([]string, error) {
	list, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Reason == reason {
			out = append(out, ev.InvolvedObject.Name+": "+ev.Message)
		}
	}
	// events.k8s.io events (the bridge records through the new API) show up here too: the
	// core/v1 view of an events.k8s.io Event carries its reason and note.
	sort.Strings(out)
	return out, nil
}

// evictDryRun asks the Eviction API whether the Pod may be evicted now, without evicting it
// (the webhook answers dry runs: sideEffects None). nil: it may.
func (e *env) evictDryRun(ctx context.Context, ns, name string) error {
	return e.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
}

// heldByLifeboat: the error is lifeboat-webhook's 429 (not a PodDisruptionBudget's).
func heldByLifeboat(err error) bool {
	return apierrors.IsTooManyRequests(err) && strings.Contains(err.Error(), "Lifeboat")
}

func evictionOf(ns, name string) *policyv1.Eviction {
	return &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// TestKarpenterLaunchesReplacements proves the property the design rests on: while the
// lifeboat scheduler puts evicted Pods on an active lifeboat node, Karpenter still launches
// replacement capacity for them, because the Pods do not tolerate the lifeboat taint.
// The control case shows why it matters: Pods that tolerate the taint make Karpenter count
// the lifeboat node as capacity and launch nothing.
//
// Karpenter pre-provisions only for the Pods still active on a node being deleted; evicted
// (terminating) Pods no longer count. So the flow needs what Lifeboat requires of protected
// workloads anyway: a PDB (here maxUnavailable 1), which paces the drain, and a realistic
// start time for Pods on the lifeboat node (images cached: a few seconds).
func TestKarpenterLaunchesReplacements(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the full local control plane (Karpenter, KWOK)")
	}
	t.Run("lifeboat taint untolerated (the design): replacement launched", func(t *testing.T) {
		replacements := interruptOntoLifeboat(t, false)
		if len(replacements) == 0 {
			t.Fatal("Karpenter launched no replacement while the Pods rode on the lifeboat node")
		}
		t.Logf("replacement NodeClaims: %v", replacements)
	})
	t.Run("lifeboat taint tolerated (control): no replacement", func(t *testing.T) {
		if replacements := interruptOntoLifeboat(t, true); len(replacements) != 0 {
			t.Fatalf("Karpenter launched %v although the Pods tolerate the lifeboat node; the control case no longer shows the mechanism", replacements)
		}
	})
}

// interruptOntoLifeboat runs the interruption flow and returns the NodeClaims Karpenter
// created after the interruption. The replacement (if any) must exist and be registered by the
// time the interrupted node is gone and the replicas run on the lifeboat node.
func interruptOntoLifeboat(t *testing.T, tolerateLifeboat bool) []string {
	const replicas = 6
	c := localclustertest.StartT(t, localcluster.Options{Karpenter: true, PodStartDelays: []localcluster.DelayRule{
		{Selector: map[string]string{v1alpha1.LabelPool: "default"}, Delay: 4 * time.Second},
	}})
	startScheduler(t, c.RESTConfig())
	client := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// A hibernated lifeboat node: standby until "the controller" activates it.
	lb := nodeSpec{name: "lifeboat-1", labels: poolLabels(v1alpha1.NodeStateStandby, "m5.xlarge", "us-east-1a"), taints: []v1.Taint{lifeboatTaint, standbyTaint}}.node()
	lb.Status = v1.NodeStatus{}
	if _, err := c.CreateKWOKNode(ctx, lb); err != nil {
		t.Fatal(err)
	}

	// Protected replicas scheduled by lifeboat-scheduler; first they get a Karpenter node.
	ns := createNamespace(t, client, "web")
	labels := map[string]string{"app": "web", v1alpha1.LabelProtected: "true"}
	spec := makePod(ns, "", protected).Spec
	spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("500m")
	if tolerateLifeboat {
		spec.Tolerations = append(spec.Tolerations, v1.Toleration{Key: v1alpha1.TaintLifeboat, Operator: v1.TolerationOpExists})
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victims := map[string]bool{}
	for pod, n := range waitBound(t, client, ns, replicas) {
		if n == "lifeboat-1" {
			t.Fatalf("pod %s on the standby lifeboat node", pod)
		}
		victims[n] = true
	}
	waitReady(t, ctx, client, ns, replicas)
	var victimClaims []string
	for n := range victims {
		victimClaims = append(victimClaims, nodeClaimOf(t, ctx, c, n))
	}

	// The interruption: Lifeboat resumes the lifeboat node, Karpenter's interruption handling
	// deletes the NodeClaim of the Spot node (as its AWS provider does on a Spot notice).
	created, stopWatch := watchNewNodeClaims(t, ctx, c)
	defer stopWatch()
	activate := []byte(`{"metadata":{"labels":{"lifeboat.dev/state":"active"}},"spec":{"taints":[{"key":"lifeboat.dev/lifeboat","value":"default","effect":"NoSchedule"}]}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lifeboat-1", types.StrategicMergePatchType, activate, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, claim := range victimClaims {
		if err := c.Dynamic().Resource(localcluster.NodeClaimGVR).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("deleted NodeClaims %v of nodes %v", victimClaims, victims)

	// Evicted replicas land on the lifeboat node; the interrupted node goes away.
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		onLifeboat := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Spec.NodeName == "lifeboat-1" {
				onLifeboat++
			}
		}
		for n := range victims {
			if _, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err == nil {
				return false, nil
			}
		}
		return onLifeboat == replicas, nil
	})
	if err != nil {
		t.Fatalf("replicas did not move to the lifeboat node or %v were not removed: %v", victims, err)
	}
	replacements := created()
	if len(replacements) == 0 {
		return nil
	}
	// The replacement is real capacity: its Node registers and turns Ready.
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range replacements {
			cl, err := c.Dynamic().Resource(localcluster.NodeClaimGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			nodeName, _, _ := unstructured.NestedString(cl.Object, "status", "nodeName")
			if nodeName == "" {
				continue
			}
			if n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil && localcluster.NodeReadyStatus(n) == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("replacement NodeClaims %v never produced a Ready node: %v", replacements, err)
	}
	return replacements
}

func waitReady(t *testing.T, ctx context.Context, client kubernetes.Interface, ns string, want int) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == want, nil
	})
	if err != nil {
		t.Fatalf("replicas not Ready: %v", err)
	}
}

func nodeClaimOf(t *testing.T, ctx context.Context, c *localcluster.Cluster, node string) string {
	t.Helper()
	var name string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		claims, err := c.Dynamic().Resource(localcluster.NodeClaimGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, cl := range claims.Items {
			if n, _, _ := unstructured.NestedString(cl.Object, "status", "nodeName"); n == node {
				name = cl.GetName()
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no NodeClaim for node %s: %v", node, err)
	}
	return name
}

// watchNewNodeClaims records NodeClaims created from now on.
func watchNewNodeClaims(t *testing.T, ctx context.Context, c *localcluster.Cluster) (created func() []string, stop func()) {
	t.Helper()
	list, err := c.Dynamic().Resource(localcluster.NodeClaimGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Dynamic().Resource(localcluster.NodeClaimGVR).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var names []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			if obj, ok := ev.Object.(*unstructured.Unstructured); ok {
				mu.Lock()
				names = append(names, obj.GetName())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), names...)
		}, func() {
			w.Stop()
			<-done
		}
}

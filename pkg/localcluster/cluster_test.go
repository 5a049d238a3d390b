package localcluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// TestMinimalControlPlane: etcd + kube-apiserver only, with RBAC; Stop leaves no process.
func TestMinimalControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane binaries; run without -short (make test)")
	}
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	if len(pids) != 2 {
		t.Fatalf("want etcd and kube-apiserver, got %v", pids)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// RBAC is on: an unprivileged identity is forbidden.
	cfg := c.RESTConfig()
	cfg.Impersonate.UserName = "nobody"
	nobody := kubernetes.NewForConfigOrDie(cfg)
	if _, err := nobody.CoreV1().Secrets("smoke").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("RBAC not enforced: user nobody could list secrets")
	}
	// Pods are admitted without ServiceAccount objects (no kubelet mounts tokens here).
	if _, err := c.Client().CoreV1().Pods("smoke").Create(ctx, testPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	assertAllExited(t, pids)
}

// TestChildrenDieWithHarness: when the process running the harness dies without calling
// Stop (a panic, a test timeout, SIGKILL), every component dies with it.
func TestChildrenDieWithHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane binaries; run without -short (make test)")
	}
	if os.Getenv("LIFEBOAT_HARNESS_CHILD") != "" {
		return // the child's work happens in TestMain-free helper below
	}
	pidFile := filepath.Join(t.TempDir(), "pids.json")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHarnessCrashHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "LIFEBOAT_HARNESS_CRASH_PIDS="+pidFile)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "panic: harness crash on purpose") {
		t.Fatalf("helper did not panic as planned:\n%s", out)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("helper wrote no PIDs: %v\n%s", err, out)
	}
	pids := map[string]int{}
	if err := json.Unmarshal(b, &pids); err != nil || len(pids) < 2 {
		t.Fatalf("bad pid file %q: %v", b, err)
	}
	assertAllExited(t, pids)
}

// TestHarnessCrashHelper runs only as the child of TestChildrenDieWithHarness.
func TestHarnessCrashHelper(t *testing.T) {
	path := os.Getenv("LIFEBOAT_HARNESS_CRASH_PIDS")
	if path == "" {
		t.Skip("helper process of TestChildrenDieWithHarness")
	}
	c, err := localcluster.Start(context.Background(), localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c.PIDs())
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	panic("harness crash on purpose")
}

func assertAllExited(t *testing.T, pids map[string]int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if localcluster.ProcessAlive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for name, pid := range pids {
			if localcluster.ProcessAlive(pid) {
				t.Errorf("%s (pid %d) is still alive", name, pid)
			}
		}
	}
}

// TestFullControlPlane proves the harness is real: Karpenter launches KWOK nodes for a
// Deployment, the boot-delay model holds Pods Pending for the configured time, deleting a
// NodeClaim drains it within the PDB onto a replacement, and power off/on flips readiness.
func TestFullControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane binaries; run without -short (make test)")
	}
	const bootDelay = 30 * time.Second
	c := localclustertest.StartT(t, localcluster.Options{
		Karpenter: true,
		NodeBootDelays: []localcluster.DelayRule{
			{Selector: map[string]string{"karpenter.sh/nodepool": "default"}, Delay: bootDelay},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	client := c.Client()
	pids := c.PIDs()
	if len(pids) != 6 {
		t.Fatalf("want etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, karpenter; got %v", pids)
	}

	ns := "smoke"
	mustCreate(t, func() error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	labels := map[string]string{"app": "web"}
	mustCreate(t, func() error {
		_, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: labels},
			},
		}, metav1.CreateOptions{})
		return err
	})
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](6),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       testPod("").Spec,
			},
		},
	}
	began := time.Now()
	mustCreate(t, func() error {
		_, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
		return err
	})

	waitRunning(ctx, t, client, ns, 6)
	firstUp := time.Since(began)
	t.Logf("6 Pods Running %s after the Deployment was created (boot delay %s)", firstUp.Round(time.Second), bootDelay)
	if firstUp < bootDelay {
		t.Errorf("Pods ran after %s, before the %s boot delay: the delay model is not applied", firstUp, bootDelay)
	}
	nodes := karpenterNodes(ctx, t, client)
	if len(nodes) == 0 {
		t.Fatal("Pods are Running but no Karpenter node exists")
	}
	claims, err := c.Dynamic().Resource(localcluster.NodeClaimGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) == 0 {
		t.Fatalf("list NodeClaims: %v (%d)", err, len(claims.Items))
	}

	// Delete the NodeClaim of a node that hosts Pods: Karpenter drains it (respecting the
	// PDB) and launches a replacement. Sample readiness the whole time.
	victimNode := podNodes(ctx, t, client, ns)[0]
	var victimClaim string
	for _, cl := range claims.Items {
		if name, _, _ := unstructuredString(cl.Object, "status", "nodeName"); name == victimNode {
			victimClaim = cl.GetName()
		}
	}
	if victimClaim == "" {
		t.Fatalf("no NodeClaim for node %s", victimNode)
	}
	onVictim := countOnNode(ctx, t, client, ns, victimNode)
	t.Logf("deleting NodeClaim %s (node %s, %d of 6 Pods)", victimClaim, victimNode, onVictim)
	deleted := time.Now()
	if err := c.Dynamic().Resource(localcluster.NodeClaimGVR).Delete(ctx, victimClaim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	minReady, longestPending := 6, time.Duration(0)
	pendingSince := map[string]time.Time{}
	for {
		if ctx.Err() != nil {
			t.Fatalf("replacement did not converge: %v", ctx.Err())
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready, running, onOld := 0, 0, 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if podReady(&p) {
				ready++
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
			if p.Spec.NodeName == victimNode {
				onOld++
			}
			if p.Status.Phase == corev1.PodPending {
				if _, ok := pendingSince[p.Name]; !ok {
					pendingSince[p.Name] = time.Now()
				}
			} else if s, ok := pendingSince[p.Name]; ok {
				if d := time.Since(s); d > longestPending {
					longestPending = d
				}
				delete(pendingSince, p.Name)
			}
		}
		if ready < minReady {
			minReady = ready
		}
		_, gone := client.CoreV1().Nodes().Get(ctx, victimNode, metav1.GetOptions{})
		if running == 6 && ready == 6 && onOld == 0 && gone != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("replaced in %s; min ready %d/6; longest Pending %s", time.Since(deleted).Round(time.Second), minReady, longestPending.Round(time.Second))
	if minReady < 5 {
		t.Errorf("ready replicas fell to %d: the drain did not respect the PDB (maxUnavailable 1)", minReady)
	}
	if longestPending < bootDelay*8/10 {
		t.Errorf("longest Pending was %s; with a %s boot delay the evicted Pods should wait about that long", longestPending, bootDelay)
	}
	if after := karpenterNodes(ctx, t, client); len(after) == 0 {
		t.Errorf("no replacement node")
	}

	// Power off a node: NotReady. Power on: Ready again.
	node := podNodes(ctx, t, client, ns)[0]
	if err := c.PowerOff(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.WaitNodeReady(ctx, client, node, false); err != nil {
		t.Fatalf("node %s did not go NotReady after power off: %v", node, err)
	}
	// Still NotReady a few heartbeats later: nothing turns it back on behind our back.
	time.Sleep(3 * time.Second)
	if n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); localcluster.NodeReadyStatus(n) != corev1.ConditionFalse {
		t.Fatalf("powered-off node %s is Ready again", node)
	}
	if err := c.PowerOn(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.WaitNodeReady(ctx, client, node, true); err != nil {
		t.Fatalf("node %s did not return Ready after power on: %v", node, err)
	}
	if err := c.Running(); err != nil {
		t.Fatalf("a component died during the test: %v", err)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	assertAllExited(t, pids)
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example/web:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("200m"),
					corev1.ResourceMemory: resource.MustParse("256Mi"),
				}},
			}},
		},
	}
}

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitRunning(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, n int) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Running Pods in %s: %v", n, ns, err)
	}
}

func karpenterNodes(ctx context.Context, t *testing.T, client kubernetes.Interface) []string {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

func podNodes(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) []string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && !seen[p.Spec.NodeName] {
			seen[p.Spec.NodeName] = true
			out = append(out, p.Spec.NodeName)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no Pod in %s is bound to a node", ns)
	}
	return out
}

func countOnNode(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, node string) int {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, fmt.Errorf("%s is not an object", f)
		}
		cur, ok = m[f]
		if !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}

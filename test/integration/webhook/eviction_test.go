package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// TestEvictionHold drives the eviction webhook through the real apiserver's pods/eviction
// subresource, as Karpenter's terminator and kubectl drain call it: a Pod Lifeboat holds is
// refused with 429 (what a PodDisruptionBudget answers) until released; a protected Pod of a
// ReplicaSet on a Spot node being deleted is held for the pending window only; with the webhook
// down every eviction goes through (failurePolicy: Ignore).
func TestEvictionHold(t *testing.T) {
	w, _ := setup(t, "--eviction-pending-hold=3s")
	ctx := context.Background()
	cs := shared.Client()
	ns := newNamespace(t, "evict", protectedNS)
	waitForWebhooks(t, ns)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:       "spot-" + ns,
		Labels:     map[string]string{v1alpha1.LabelCapacityType: "spot"},
		Finalizers: []string{"lifeboat.dev/test"}, // stays while "being drained"
	}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cs.CoreV1().Nodes().Patch(context.Background(), node.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	newPod := func(name string, labels, annotations map[string]string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node.Name, TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		created, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	evict := func(name string) error {
		return cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}

	// 1. A hold written by the bridge: 429 until it is released.
	until := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339Nano)
	newPod("held", nil, map[string]string{v1alpha1.AnnotationEvictionHold: until})
	err := evict("held")
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of a held Pod: want 429 from the webhook, got %v", err)
	}
	if !strings.Contains(err.Error(), "Lifeboat holds this Pod") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "held", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationEvictionHold+`":"released"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("held"); err != nil {
		t.Errorf("eviction of a released Pod: %v", err)
	}

	// 2. The pending hold: a protected Pod of a ReplicaSet on a Spot node whose deletion began,
	// before Lifeboat wrote anything — refused at first, let through once the window passed.
	labels := map[string]string{"app": "web", v1alpha1.LabelProtected: "true"}
	newPod("web-0", labels, nil)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}},
	}
	if _, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
		return err == nil && metav1.GetControllerOf(p) != nil, nil
	}); err != nil {
		t.Fatalf("the ReplicaSet did not adopt web-0: %v", err)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("web-0"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction right after the node's deletion began: want 429 (pending hold), got %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		err := evict("web-0")
		if err != nil && !apierrors.IsTooManyRequests(err) {
			return false, err
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the pending hold did not end after its window: %v", err)
	}

	// 3. Webhook down: a held Pod's eviction goes through (fail-open).
	newPod("held-2", nil, map[string]string{v1alpha1.AnnotationEvictionHold: until})
	if err := evict("held-2"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of held-2 with the webhook up: want 429, got %v", err)
	}
	if m := w.Metrics(); !strings.Contains(m, `lifeboat_webhook_requests_total{decision="held",webhook="evictions"}`) {
		t.Errorf("/metrics does not count held evictions")
	}
	w.Stop()
	if err := evict("held-2"); err != nil {
		t.Errorf("eviction with the webhook down: %v (the webhook must fail open)", err)
	}
}

package handoff

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

var hpaNow = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

func apiPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, Labels: map[string]string{"app": "api"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "api-1", UID: "rs", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// hpaFixture: a draining lifeboat node with the 2 Pods of Deployment api, which its HPA holds at
// maxReplicas 2 (minReplicas 1).
func hpaFixture(t *testing.T, extra ...client.Object) (*Controller, client.Client) {
	t.Helper()
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateDraining)},
		Annotations: map[string]string{v1alpha1.AnnotationDrainingSince: nodeutil.FormatTime(hpaNow)}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api", UID: "dep"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api-1", UID: "rs",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "dep", Controller: ptr.To(true)}}}}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MinReplicas: ptr.To[int32](1), MaxReplicas: 2}}
	objs := append([]client.Object{pool, node, dep, rs, hpa, apiPod("api-a", "lb-1"), apiPod("api-b", "lb-1")}, extra...)
	c := fakeClient(interceptor.Funcs{}, objs...)
	return New(c, clocktesting.NewFakeClock(hpaNow), events.NewFakeRecorder(100)), c
}

// fakeClient is the fake client of the handoff tests: the scheme, the spec.nodeName Pod index
// the controller lists by, status subresources for Pods and WarmPools, and funcs.
func fakeClient(funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&corev1.Pod{}, &v1alpha1.WarmPool{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(funcs).Build()
}

func reconcileLB(t *testing.T, ctrl *Controller) {
	t.Helper()
	if _, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "lb-1"}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

func getAPI(t *testing.T, c client.Client) (*appsv1.Deployment, *autoscalingv2.HorizontalPodAutoscaler) {
	t.Helper()
	d := &appsv1.Deployment{}
	h := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: "api"}, d); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: "api"}, h); err != nil {
		t.Fatal(err)
	}
	return d, h
}

func TestSurgeRaisesHPABoundsAndRestoresThem(t *testing.T) {
	ctrl, c := hpaFixture(t)
	reconcileLB(t, ctrl)
	d, h := getAPI(t, c)
	if *d.Spec.Replicas != 4 || d.Annotations[v1alpha1.AnnotationHandoffSurge] == "" {
		t.Fatalf("deployment replicas %d annotations %v, want surged to 4", *d.Spec.Replicas, d.Annotations)
	}
	if *h.Spec.MinReplicas != 4 || h.Spec.MaxReplicas != 4 || h.Annotations[v1alpha1.AnnotationHandoffHPAMin] != "1" || h.Annotations[AnnotationHandoffHPAMax] != "2" {
		t.Fatalf("HPA min %d max %d annotations %v: want both raised to 4, originals 1 and 2 kept", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations)
	}

	// The surge is Ready elsewhere: lifeboat Pods get the lowest deletion cost, the HPA gets
	// its bounds back, the Deployment its replicas.
	for _, p := range []*corev1.Pod{apiPod("api-c", "od-1"), apiPod("api-d", "od-1")} {
		if err := c.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	reconcileLB(t, ctrl)
	d, h = getAPI(t, c)
	if *d.Spec.Replicas != 2 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Errorf("deployment replicas %d annotations %v, want back to 2", *d.Spec.Replicas, d.Annotations)
	}
	if *h.Spec.MinReplicas != 1 || h.Spec.MaxReplicas != 2 || len(h.Annotations) != 0 {
		t.Errorf("HPA min %d max %d annotations %v, want 1, 2 and no annotations", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations)
	}
	p := &corev1.Pod{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: "api-a"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Annotations[corev1.PodDeletionCost] != DeletionCost {
		t.Errorf("lifeboat Pod deletion cost %q, want %s", p.Annotations[corev1.PodDeletionCost], DeletionCost)
	}
}

func TestSurgeBelowHPAMaxKeepsMax(t *testing.T) {
	ctrl, c := hpaFixture(t)
	_, h := getAPI(t, c)
	h.Spec.MaxReplicas = 10
	if err := c.Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	reconcileLB(t, ctrl)
	_, h = getAPI(t, c)
	if *h.Spec.MinReplicas != 4 || h.Spec.MaxReplicas != 10 || h.Annotations[AnnotationHandoffHPAMax] != "" {
		t.Fatalf("HPA min %d max %d annotations %v: want min 4, max untouched", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations)
	}
}

// A crash between the Deployment's surge and the HPA's patch: the next pass raises the HPA.
func TestSurgeAfterCrashRaisesHPA(t *testing.T) {
	ctrl, c := hpaFixture(t)
	d, _ := getAPI(t, c)
	raw, _ := json.Marshal(Surge{Node: "lb-1", Base: 2, Surge: 2, ReadyBefore: 2})
	d.Annotations = map[string]string{v1alpha1.AnnotationHandoffSurge: string(raw)}
	d.Spec.Replicas = ptr.To[int32](4)
	if err := c.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	reconcileLB(t, ctrl)
	d, h := getAPI(t, c)
	if *d.Spec.Replicas != 4 || *h.Spec.MinReplicas != 4 || h.Spec.MaxReplicas != 4 {
		t.Fatalf("after the restart: deployment %d, HPA min %d max %d; want 4/4/4", *d.Spec.Replicas, *h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
}

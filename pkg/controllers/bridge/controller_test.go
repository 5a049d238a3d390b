package bridge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	cloudinterruption "github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/scaling"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// The notice came 5 s before ctrlNow.
var (
	ctrlNotice = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	ctrlNow    = ctrlNotice.Add(5 * time.Second)
)

var apiLabels = map[string]string{"app": "api"}

// interruptedNode is a Spot node interrupted at ctrlNotice, with its resume decision.
func interruptedNode(name, decision string) *corev1.Node {
	return buildtest.Node(name, buildtest.CapacityType(buildtest.Spot), buildtest.Annotations(map[string]string{
		v1alpha1.AnnotationResumeDecision: decision, v1alpha1.AnnotationInterruptedAt: nodeutil.FormatTime(ctrlNotice)}),
		buildtest.Taints(corev1.Taint{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule}))
}

// poolNode is a lifeboat (16 Gi) resumed for the node resumedFor.
func poolNode(name, resumedFor string, ready bool, cpu string) *corev1.Node {
	n := lifeboat(name, ready, cpu, "16Gi")
	n.Labels[v1alpha1.LabelResumedFor] = resumedFor
	return n
}

// appPod is a running Pod of Deployment api (ReplicaSet api-1) on node, requesting 1 CPU and 1 Gi.
func appPod(name, node string, protected, ready bool) *corev1.Pod {
	p := buildtest.Pod("app", name, buildtest.UID("uid-"+name), buildtest.Labels(map[string]string{"app": "api"}),
		buildtest.OwnedBy("ReplicaSet", "api-1", "rs"), buildtest.OnNode(node), buildtest.Requests("1", "1Gi"), buildtest.Running(), buildtest.Ready(ready))
	if protected {
		p.Labels[v1alpha1.LabelProtected] = "true"
	}
	return p
}

func apiDeployment(replicas int32, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api", UID: "dep", Annotations: annotations},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: apiLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: apiLabels}}}}
}

func apiReplicaSet() *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api-1", UID: "rs",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "dep", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: apiLabels}}}
}

func apiHPA() *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "api"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MinReplicas: ptr.To[int32](2), MaxReplicas: 6}}
}

type harness struct {
	ctrl *Controller
	c    client.Client
	clk  *clocktesting.FakeClock
	rec  *events.FakeRecorder
}

func newHarness(t *testing.T, objs ...client.Object) *harness {
	t.Helper()
	return newHarnessWith(t, interceptor.Funcs{}, objs...)
}

// newHarnessWith is newHarness with the fake client's calls intercepted (API refusals).
func newHarnessWith(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *harness {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexPodNodeName, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(funcs).Build()
	clk := clocktesting.NewFakeClock(ctrlNow)
	rec := events.NewFakeRecorder(1000)
	return &harness{ctrl: New(c, c, clk, rec, DefaultOptions()), c: c, clk: clk, rec: rec}
}

func (h *harness) reconcileNode(t *testing.T, name string) reconcile.Result {
	t.Helper()
	res, err := h.ctrl.ReconcileNode(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		t.Fatalf("ReconcileNode(%s): %v", name, err)
	}
	return res
}

func (h *harness) reconcileSurge(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := h.ctrl.ReconcileSurge(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "app", Name: "api"}})
	if err != nil {
		t.Fatalf("ReconcileSurge: %v", err)
	}
	return res
}

func (h *harness) pod(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	p := &corev1.Pod{}
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: name}, p)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

func (h *harness) hold(t *testing.T, name string) string {
	t.Helper()
	p, ok := h.pod(t, name)
	if !ok {
		t.Fatalf("Pod %s is gone", name)
	}
	return p.Annotations[v1alpha1.AnnotationEvictionHold]
}

func (h *harness) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: "api"}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (h *harness) hpa(t *testing.T) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	a := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: "api"}, a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// bridgeFixture: interrupted Spot node spot-1 (notice at ctrlNotice, decision lb-1), its Ready
// lifeboat lb-1 (4 CPUs, 16Gi), Deployment api (6 replicas) with ReplicaSet api-1 and an HPA,
// and 2 protected Pods of api on spot-1.
func bridgeFixture(t *testing.T, extra ...client.Object) *harness {
	objs := []client.Object{
		interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"),
		apiDeployment(6, nil), apiReplicaSet(), apiHPA(),
		appPod("api-a", "spot-1", true, true), appPod("api-b", "spot-1", true, true),
	}
	return newHarness(t, append(objs, extra...)...)
}

func TestBridgeDeploymentEndToEnd(t *testing.T) {
	h := bridgeFixture(t)
	wantUntil := HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions())

	res := h.reconcileNode(t, "spot-1")
	if res.RequeueAfter != DefaultOptions().Poll {
		t.Errorf("RequeueAfter = %s, want the poll period while Pods are held", res.RequeueAfter)
	}
	for _, name := range []string{"api-a", "api-b"} {
		raw := h.hold(t, name)
		until, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil || !until.Equal(wantUntil) {
			t.Errorf("%s hold %q, want %s (RFC 3339 nano)", name, raw, nodeutil.FormatTime(wantUntil))
		}
	}
	d := h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d, want 8 (6 + the 2 held Pods)", got)
	}
	if got, want := d.Annotations[v1alpha1.AnnotationBridgeSurge], `{"base":6,"nodes":{"spot-1":2}}`; got != want {
		t.Errorf("bridge surge %q, want %q", got, want)
	}
	a := h.hpa(t)
	if ptr.Deref(a.Spec.MinReplicas, 0) != 8 || a.Spec.MaxReplicas != 8 ||
		a.Annotations[v1alpha1.AnnotationHandoffHPAMin] != "2" || a.Annotations[scaling.AnnotationHPAOriginalMax] != "6" {
		t.Errorf("HPA min %d max %d annotations %v: want both raised to 8, originals 2 and 6 kept", ptr.Deref(a.Spec.MinReplicas, 0), a.Spec.MaxReplicas, a.Annotations)
	}
	evs := strings.Join(h.events(), "\n")
	for _, want := range []string{v1alpha1.EventEvictionHeld, v1alpha1.EventBridged} {
		if !strings.Contains(evs, want) {
			t.Errorf("events %q: want a %s event", evs, want)
		}
	}

	// Idempotent: nothing more is surged or held.
	firstHold := h.hold(t, "api-a")
	h.clk.Step(time.Second)
	h.reconcileNode(t, "spot-1")
	d = h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 8 {
		t.Errorf("second reconcile: replicas %d, want still 8", got)
	}
	if got, want := d.Annotations[v1alpha1.AnnotationBridgeSurge], `{"base":6,"nodes":{"spot-1":2}}`; got != want {
		t.Errorf("second reconcile: bridge surge %q, want %q", got, want)
	}
	if got := h.hold(t, "api-a"); got != firstHold {
		t.Errorf("second reconcile rewrote the hold: %q, was %q", got, firstHold)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("second reconcile recorded %q", evs)
	}

	// Not all replacements Ready yet: the held Pods stay.
	for i := 0; i < 6; i++ {
		if err := h.c.Create(context.Background(), appPod(fmt.Sprintf("api-new-%d", i), "lb-1", false, i < 5)); err != nil {
			t.Fatal(err)
		}
	}
	if res := h.reconcileSurge(t); res.RequeueAfter != DefaultOptions().Poll {
		t.Errorf("RequeueAfter = %s while waiting, want the poll period", res.RequeueAfter)
	}
	if _, ok := h.pod(t, "api-a"); !ok {
		t.Fatalf("held Pod removed with only 5 Ready Pods elsewhere")
	}
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d while waiting, want 8", got)
	}

	// 6 Ready elsewhere: the held Pods get the lowest deletion cost and are deleted, the surge
	// goes back, the HPA gets its bounds back.
	p, _ := h.pod(t, "api-new-5")
	p.Status.Conditions[0].Status = corev1.ConditionTrue
	if err := h.c.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	var costs []string
	deleted := 0
	h.ctrl.client = interceptDeletes(h.c, func(p *corev1.Pod) {
		costs = append(costs, p.Annotations[corev1.PodDeletionCost])
		deleted++
	})
	h.reconcileSurge(t)
	if deleted != 2 {
		t.Errorf("deleted %d held Pods, want 2", deleted)
	}
	for _, cost := range costs {
		if cost != handoff.DeletionCost {
			t.Errorf("held Pod deleted with deletion cost %q, want %s", cost, handoff.DeletionCost)
		}
	}
	for _, name := range []string{"api-a", "api-b"} {
		if _, ok := h.pod(t, name); ok {
			t.Errorf("held Pod %s still exists", name)
		}
	}
	d = h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d after the removal, want 6", got)
	}
	if raw, ok := d.Annotations[v1alpha1.AnnotationBridgeSurge]; ok {
		t.Errorf("bridge surge annotation %q left after the removal", raw)
	}
	a = h.hpa(t)
	if ptr.Deref(a.Spec.MinReplicas, 0) != 2 || a.Spec.MaxReplicas != 6 || len(a.Annotations) != 0 {
		t.Errorf("HPA min %d max %d annotations %v, want 2, 6 and no annotations", ptr.Deref(a.Spec.MinReplicas, 0), a.Spec.MaxReplicas, a.Annotations)
	}
	if evs := strings.Join(h.events(), "\n"); !strings.Contains(evs, "Replacements Ready") {
		t.Errorf("events %q: want the removal's", evs)
	}

	// Done: the next surge reconcile finds no annotation.
	if res := h.reconcileSurge(t); res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %s without a surge, want none", res.RequeueAfter)
	}
}

// interceptDeletes wraps c, calling f with each Pod (as stored) before it is deleted.
func interceptDeletes(c client.Client, f func(*corev1.Pod)) client.Client {
	return &deleteSpy{Client: c, f: f}
}

type deleteSpy struct {
	client.Client
	f func(*corev1.Pod)
}

func (s *deleteSpy) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if p, ok := obj.(*corev1.Pod); ok {
		stored := &corev1.Pod{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(p), stored); err == nil {
			s.f(stored)
		}
	}
	return s.Client.Delete(ctx, obj, opts...)
}

func TestSurgeGoneWhenHeldPodsVanished(t *testing.T) {
	ann := map[string]string{v1alpha1.AnnotationBridgeSurge: `{"base":6,"nodes":{"spot-1":2}}`}
	objs := []client.Object{apiDeployment(8, ann), apiReplicaSet()}
	for i := 0; i < 4; i++ { // fewer than base: a vanished node's surge goes back regardless
		objs = append(objs, appPod(fmt.Sprintf("api-%d", i), "od-1", false, true))
	}
	h := newHarness(t, objs...)
	h.reconcileSurge(t)
	d := h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d, want 6", got)
	}
	if raw, ok := d.Annotations[v1alpha1.AnnotationBridgeSurge]; ok {
		t.Errorf("bridge surge annotation %q left", raw)
	}
}

func TestSurgeGoneKeepsTheOtherNodes(t *testing.T) {
	ann := map[string]string{v1alpha1.AnnotationBridgeSurge: `{"base":6,"nodes":{"spot-1":2,"spot-2":1}}`}
	objs := []client.Object{apiDeployment(9, ann), apiReplicaSet(), appPod("held", "spot-2", true, true)}
	for i := 0; i < 5; i++ {
		objs = append(objs, appPod(fmt.Sprintf("api-%d", i), "od-1", false, true))
	}
	h := newHarness(t, objs...)
	h.reconcileSurge(t)
	d := h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 7 {
		t.Errorf("replicas %d, want 7 (spot-1's 2 back, spot-2's 1 kept)", got)
	}
	if got, want := d.Annotations[v1alpha1.AnnotationBridgeSurge], `{"base":6,"nodes":{"spot-2":1}}`; got != want {
		t.Errorf("bridge surge %q, want %q", got, want)
	}
	if _, ok := h.pod(t, "held"); !ok {
		t.Errorf("spot-2's held Pod removed with 5 Ready Pods elsewhere (base 6)")
	}
}

func TestSurgeTakesBackOnlyTheSurge(t *testing.T) {
	// An HPA scaled the surged Deployment from 8 to 10 meanwhile: only the 2 go back.
	ann := map[string]string{v1alpha1.AnnotationBridgeSurge: `{"base":6,"nodes":{"spot-1":2}}`}
	h := newHarness(t, apiDeployment(10, ann), apiReplicaSet())
	h.reconcileSurge(t)
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d, want 8", got)
	}
	// A user scaled it below the base meanwhile: it stays there.
	h = newHarness(t, apiDeployment(5, ann), apiReplicaSet())
	h.reconcileSurge(t)
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 5 {
		t.Errorf("replicas %d, want 5", got)
	}
}

func TestSurgeUnreadableAnnotationIsDropped(t *testing.T) {
	h := newHarness(t, apiDeployment(8, map[string]string{v1alpha1.AnnotationBridgeSurge: "{"}), apiReplicaSet())
	h.reconcileSurge(t)
	d := h.deployment(t)
	if _, ok := d.Annotations[v1alpha1.AnnotationBridgeSurge]; ok {
		t.Errorf("unreadable annotation kept")
	}
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d, want 8 (not ours to guess)", got)
	}
}

func TestSurgeHandoffBase(t *testing.T) {
	// A handoff surge of 2 is in progress (replicas 8 = 6 + 2): the bridge's base is 6.
	hs := `{"node":"lb-9","base":6,"surge":2,"readyBefore":6}`
	h := bridgeFixture(t)
	d := h.deployment(t)
	d.Spec.Replicas = ptr.To[int32](8)
	d.Annotations = map[string]string{v1alpha1.AnnotationHandoffSurge: hs}
	if err := h.c.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	h.reconcileNode(t, "spot-1")
	d = h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 10 {
		t.Errorf("replicas %d, want 10", got)
	}
	if got, want := d.Annotations[v1alpha1.AnnotationBridgeSurge], `{"base":6,"nodes":{"spot-1":2}}`; got != want {
		t.Errorf("bridge surge %q, want %q", got, want)
	}
	// Gone: the bridge surge goes back, the HPA stays raised for the handoff.
	for _, name := range []string{"api-a", "api-b"} {
		p, _ := h.pod(t, name)
		if err := h.c.Delete(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	h.reconcileSurge(t)
	d = h.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d, want 8", got)
	}
	if a := h.hpa(t); a.Annotations[v1alpha1.AnnotationHandoffHPAMin] == "" {
		t.Errorf("HPA restored while the handoff surge is still on: %v", a.Annotations)
	}
}

func TestReconcileNodeIgnores(t *testing.T) {
	undecided := interruptedNode("spot-2", "")
	delete(undecided.Annotations, v1alpha1.AnnotationResumeDecision)
	pool := poolNode("lb-2", "spot-1", true, "4")
	pool.Annotations = map[string]string{v1alpha1.AnnotationResumeDecision: "lb-3"}
	h := bridgeFixture(t, undecided, pool, appPod("api-c", "spot-2", true, true))
	for _, name := range []string{"spot-2", "lb-2", "missing"} {
		if res := h.reconcileNode(t, name); res.RequeueAfter != 0 {
			t.Errorf("%s: RequeueAfter %s, want none", name, res.RequeueAfter)
		}
	}
	if got := h.hold(t, "api-c"); got != "" {
		t.Errorf("undecided node's Pod got hold %q", got)
	}
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d, want 6", got)
	}
}

func TestReconcileNodeReleasesWhenLifeboatNotReady(t *testing.T) {
	h := newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "4"),
		apiDeployment(6, nil), apiReplicaSet(), appPod("api-a", "spot-1", true, true))
	h.reconcileNode(t, "spot-1")
	if got := h.hold(t, "api-a"); got == "" || got == v1alpha1.EvictionHoldReleased {
		t.Fatalf("hold %q before the resume timeout, want a deadline", got)
	}
	h.clk.SetTime(ctrlNotice.Add(DefaultOptions().ResumeTimeout))
	if res := h.reconcileNode(t, "spot-1"); res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter %s after releasing everything, want none", res.RequeueAfter)
	}
	if got := h.hold(t, "api-a"); got != v1alpha1.EvictionHoldReleased {
		t.Errorf("hold %q past the resume timeout, want released", got)
	}
	if evs := strings.Join(h.events(), "\n"); !strings.Contains(evs, ReleaseLifeboatNotReady) {
		t.Errorf("events %q: want a release naming %s", evs, ReleaseLifeboatNotReady)
	}
}

func TestReconcileNodeNoLifeboat(t *testing.T) {
	h := newHarness(t, interruptedNode("spot-1", "none"), apiDeployment(6, nil), apiReplicaSet(), appPod("api-a", "spot-1", true, true))
	h.reconcileNode(t, "spot-1")
	if got := h.hold(t, "api-a"); got != v1alpha1.EvictionHoldReleased {
		t.Errorf("hold %q without any lifeboat, want released", got)
	}
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d, want 6 (nothing held)", got)
	}
}

// The lifeboats are shared by a burst: a node that got none (or too little) takes what another
// node's lifeboat has left, and no more.
func TestReconcileNodeSharesLifeboats(t *testing.T) {
	other := func(name, node string) *corev1.Pod {
		p := appPod(name, node, true, true)
		p.Labels = map[string]string{"app": "web", v1alpha1.LabelProtected: "true"}
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "web-1", "rs-web"
		return p
	}
	h := newHarness(t, interruptedNode("spot-1", "lb-1"), interruptedNode("spot-2", "none"), poolNode("lb-1", "spot-1", true, "2"),
		appPod("api-a", "spot-1", true, true), other("web-a", "spot-2"), other("web-b", "spot-2"))
	h.reconcileNode(t, "spot-1")
	h.reconcileNode(t, "spot-2")
	if got := h.hold(t, "api-a"); got == "" || got == v1alpha1.EvictionHoldReleased {
		t.Errorf("api-a hold %q, want a deadline", got)
	}
	if got := h.hold(t, "web-a"); got == "" || got == v1alpha1.EvictionHoldReleased {
		t.Errorf("web-a hold %q, want a deadline (the lifeboat's second CPU)", got)
	}
	if got := h.hold(t, "web-b"); got != v1alpha1.EvictionHoldReleased {
		t.Errorf("web-b hold %q, want released (no seat left)", got)
	}
}

func TestReconcileNodeMovesSettledStatefulSetPod(t *testing.T) {
	dbLabels := map[string]string{"app": "db"}
	dbPod := func(name, node string, ready bool, hold string) *corev1.Pod {
		p := appPod(name, node, true, ready)
		p.Labels = map[string]string{"app": "db", v1alpha1.LabelProtected: "true"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
		if hold != "" {
			p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: hold}
		}
		return p
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: dbLabels}}}
	held := nodeutil.FormatTime(HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions()))

	// db-1 is not Ready: nothing moves.
	h := newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"), sts,
		dbPod("db-0", "spot-1", true, held), dbPod("db-1", "spot-1", false, held), dbPod("db-2", "od-1", true, ""))
	if res := h.reconcileNode(t, "spot-1"); res.RequeueAfter == 0 {
		t.Errorf("no requeue while Pods are held")
	}
	for _, name := range []string{"db-0", "db-1"} {
		if got := h.hold(t, name); got != held {
			t.Errorf("%s hold %q while the StatefulSet is not settled, want %q", name, got, held)
		}
	}

	// All Ready: one of the two held Pods moves (released and evicted), not both.
	p, _ := h.pod(t, "db-1")
	p.Status.Conditions[0].Status = corev1.ConditionTrue
	if err := h.c.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	h.reconcileNode(t, "spot-1")
	_, db0 := h.pod(t, "db-0")
	_, db1 := h.pod(t, "db-1")
	if db0 == db1 {
		t.Errorf("db-0 exists %v, db-1 exists %v: want exactly one moved", db0, db1)
	}
	if evs := strings.Join(h.events(), "\n"); !strings.Contains(evs, v1alpha1.EventBridgeMove) {
		t.Errorf("events %q: want a %s event", evs, v1alpha1.EventBridgeMove)
	}
}

// TestMoveRefusedByPDBKeepsTheHold: when the StatefulSet's PodDisruptionBudget refuses a move
// (its view can lag behind a Pod re-created under the same name), the Pod is held again with
// the same deadline and the move is retried — a refusal never gives up the holds one by one.
func TestMoveRefusedByPDBKeepsTheHold(t *testing.T) {
	held := nodeutil.FormatTime(HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions()))
	db := func(name string) *corev1.Pod {
		p := appPod(name, "spot-1", true, true)
		p.Labels = map[string]string{"app": "db", v1alpha1.LabelProtected: "true"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
		p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: held}
		return p
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	refusals := 0
	refuse := interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
		if sub == "eviction" {
			refusals++
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
	}}
	h := newHarnessWith(t, refuse, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"), sts, db("db-0"), db("db-1"))
	for pass := 0; pass < 3; pass++ {
		if res := h.reconcileNode(t, "spot-1"); res.RequeueAfter == 0 {
			t.Fatalf("pass %d: no requeue while Pods are held", pass)
		}
	}
	if refusals != 3 {
		t.Errorf("moves tried %d times over 3 passes, want one per pass", refusals)
	}
	for _, name := range []string{"db-0", "db-1"} {
		if got := h.hold(t, name); got != held {
			t.Errorf("%s hold %q after refused moves, want it held until %q", name, got, held)
		}
	}
	if evs := strings.Join(h.events(), "\n"); strings.Contains(evs, v1alpha1.EventEvictionReleased) {
		t.Errorf("events %q: a refused move released a hold", evs)
	}
}

// A rebalance recommendation marks the Node like an interrupted one (source
// sqs/RebalanceRecommendation) and gets a resume decision, but it is not an eviction
// (docs/WARMPOOL.md "Interruption"): nothing drains the Node. The bridge should neither surge nor
// hold then — and a real interruption that re-marks the Node later must get its own bridge.
func TestRebalanceMarkThenRealInterruption(t *testing.T) {
	node := interruptedNode("spot-1", "lb-1")
	node.Annotations[v1alpha1.AnnotationInterruptionSource] = "sqs/" + string(cloudinterruption.KindRebalanceRecommendation)
	h := newHarness(t, node, poolNode("lb-1", "spot-1", true, "4"), apiDeployment(6, nil), apiReplicaSet(),
		appPod("api-a", "spot-1", true, true), appPod("api-b", "spot-1", true, true))
	h.reconcileNode(t, "spot-1")
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 6 {
		t.Errorf("BUG: a rebalance recommendation surged Deployment api to %d replicas (annotation %q); want 6: the recommendation is not an eviction",
			got, h.deployment(t).Annotations[v1alpha1.AnnotationBridgeSurge])
	}
	for _, name := range []string{"api-a", "api-b"} {
		if got := h.hold(t, name); got != "" {
			t.Errorf("BUG: a rebalance recommendation wrote hold %q on %s; want none", got, name)
		}
	}

	// The real interruption 5 minutes later: re-marked (new interrupted-at and source, the
	// decision made again).
	remarkAt := ctrlNotice.Add(5 * time.Minute)
	n := &corev1.Node{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: "spot-1"}, n); err != nil {
		t.Fatal(err)
	}
	n.Annotations[v1alpha1.AnnotationInterruptedAt] = nodeutil.FormatTime(remarkAt)
	n.Annotations[v1alpha1.AnnotationInterruptionSource] = "sqs/" + string(cloudinterruption.KindSpotInterruption)
	n.Annotations[v1alpha1.AnnotationResumeDecision] = "lb-1"
	if err := h.c.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	h.clk.SetTime(remarkAt.Add(time.Second))
	h.reconcileNode(t, "spot-1")
	want := nodeutil.FormatTime(HoldDeadline(remarkAt, 30*time.Second, DefaultOptions()))
	for _, name := range []string{"api-a", "api-b"} {
		if got := h.hold(t, name); got != want {
			t.Errorf("BUG: after the real interruption %s has hold %q; want %q (the interruption's own bridge)", name, got, want)
		}
	}
	if d := h.deployment(t); ptr.Deref(d.Spec.Replicas, 0) != 8 {
		t.Errorf("after the real interruption: replicas %d (surge %q), want 8", ptr.Deref(d.Spec.Replicas, 0), d.Annotations[v1alpha1.AnnotationBridgeSurge])
	}
}

// TestRestartContinuesFromObjects: the bridge keeps no state a restart needs. A new controller
// (nothing in memory) over the same objects neither surges nor holds again, lets expired holds
// lapse (the webhook reads their time), and takes the surge back once the held Pods are gone.
func TestRestartContinuesFromObjects(t *testing.T) {
	h := bridgeFixture(t)
	h.reconcileNode(t, "spot-1") // holds + surge, then "the controller crashes"
	restarted := &harness{ctrl: New(h.c, h.c, h.clk, h.rec, DefaultOptions()), c: h.c, clk: h.clk, rec: h.rec}
	h.events()

	h.clk.Step(2 * time.Second)
	restarted.reconcileNode(t, "spot-1")
	if got := ptr.Deref(restarted.deployment(t).Spec.Replicas, 0); got != 8 {
		t.Fatalf("after the restart replicas %d, want still 8 (no second surge)", got)
	}
	if evs := restarted.events(); len(evs) != 0 {
		t.Errorf("the restarted controller wrote %q", evs)
	}

	// Past the holds' deadline the webhook lets the drain evict them; nothing is rewritten.
	deadline := HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions())
	h.clk.SetTime(deadline.Add(time.Second))
	if res := restarted.reconcileNode(t, "spot-1"); res.RequeueAfter != 0 {
		t.Errorf("after the deadline RequeueAfter = %s, want none (nothing is held any more)", res.RequeueAfter)
	}
	if got := restarted.hold(t, "api-a"); got != nodeutil.FormatTime(deadline) {
		t.Errorf("hold rewritten after the deadline: %q", got)
	}
	// The drain evicts them: the surge goes back.
	for _, name := range []string{"api-a", "api-b"} {
		p, _ := restarted.pod(t, name)
		if err := h.c.Delete(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	restarted.reconcileSurge(t)
	d := restarted.deployment(t)
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d after the held Pods left, want 6", got)
	}
	if _, ok := d.Annotations[v1alpha1.AnnotationBridgeSurge]; ok {
		t.Errorf("surge record left: %v", d.Annotations)
	}
}

// TestSurgeWaitsForReadyLifeboat: the held Pods' Deployment is surged only once a lifeboat is
// Ready. Before, surge Pods could only wait (Pending), and Pending Pods count against the
// Deployment's PodDisruptionBudget, slowing Karpenter's drain of its other Pods; a lifeboat
// that never turns Ready leaves the Deployment as it was.
func TestSurgeWaitsForReadyLifeboat(t *testing.T) {
	h := newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "4"),
		apiDeployment(6, nil), apiReplicaSet(), appPod("api-a", "spot-1", true, true), appPod("api-b", "spot-1", true, true))
	h.reconcileNode(t, "spot-1")
	if got := h.hold(t, "api-a"); got == "" || got == v1alpha1.EvictionHoldReleased {
		t.Fatalf("hold %q, want a deadline", got)
	}
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d while the lifeboat is not Ready, want 6 (no surge yet)", got)
	}

	n := &corev1.Node{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: "lb-1"}, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := h.c.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	h.clk.Step(2 * time.Second)
	h.reconcileNode(t, "spot-1")
	h.reconcileNode(t, "spot-1") // once per node: a second pass adds nothing
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 8 {
		t.Errorf("replicas %d once the lifeboat is Ready, want 8 (6 + the 2 held Pods)", got)
	}
}

// TestHeldStatefulSetPodsGetSeatsAtTheHold: a held StatefulSet Pod gets its handoff seat as it
// is held — Karpenter launches the room it moves to after the lifeboat at the notice — made
// once, for the interrupted node (the lifeboat adopts it later); a held Deployment Pod (it
// surges) gets none; without a SeatSpec, none at all.
func TestHeldStatefulSetPodsGetSeatsAtTheHold(t *testing.T) {
	db := appPod("db-0", "spot-1", true, true)
	db.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	seats := func(h *harness) []corev1.Pod {
		list := &corev1.PodList{}
		if err := h.c.List(context.Background(), list, client.InNamespace("lifeboat-system")); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	objs := []client.Object{interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "8"), sts, db,
		appPod("api-0", "spot-1", true, true), apiReplicaSet(), apiDeployment(3, nil)}

	h := newHarness(t, objs...)
	h.ctrl.Seats = &handoff.SeatSpec{Namespace: "lifeboat-system", PrePullImages: true}
	h.reconcileNode(t, "spot-1")
	h.reconcileNode(t, "spot-1")
	got := seats(h)
	if len(got) != 1 {
		t.Fatalf("seats %d, want one: db-0's (api-0 surges)", len(got))
	}
	s := got[0]
	if s.Name != handoff.SeatName("app", "db-0") || s.Annotations[v1alpha1.AnnotationSeatNode] != "spot-1" || s.Annotations[v1alpha1.AnnotationSeatFor] != "app/db-0" {
		t.Errorf("seat %s for %q on %q, want db-0's, made for spot-1", s.Name, s.Annotations[v1alpha1.AnnotationSeatFor], s.Annotations[v1alpha1.AnnotationSeatNode])
	}
	if h.hold(t, "db-0") == "" {
		t.Errorf("db-0 was not held")
	}

	h = newHarness(t, objs...)
	h.reconcileNode(t, "spot-1")
	if got := seats(h); len(got) != 0 {
		t.Errorf("seats without a SeatSpec: %d", len(got))
	}
}

// heldSingleReplica is db-0, held on interrupted node spot-1, and its one-replica StatefulSet.
func heldSingleReplica() (*corev1.Pod, *appsv1.StatefulSet) {
	db := appPod("db-0", "spot-1", true, true)
	db.Labels = map[string]string{"app": "db", v1alpha1.LabelProtected: "true"}
	db.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
	db.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: nodeutil.FormatTime(HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions()))}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	return db, sts
}

// TestHeldStatefulSetPodMovesStraightToItsSeat: a held StatefulSet Pod whose seat (made at the
// hold) already holds room on a Ready node moves there at once — no lifeboat Ready needed —
// instead of to a lifeboat and on again at the handoff: the seat's host is recorded on a
// lifeboat Node (AnnotationBridgeSeats, read by the webhook), then, on the next pass, the Pod
// evicted and the seat deleted (its room is the replacement's). A seat on a node not Ready yet, on a node of the capacity
// pool being reclaimed, or not Ready itself (pulling the images) moves nothing.
func TestHeldStatefulSetPodMovesStraightToItsSeat(t *testing.T) {
	db, sts := heldSingleReplica()
	spec := handoff.SeatSpec{Namespace: "lifeboat-system"}
	seat := handoff.Seat(db, interruptedNode("spot-1", "lb-1"), spec)
	seat.Spec.NodeName = "kwok-7"
	seat.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	seatNode := func(ready bool, opts ...buildtest.NodeOption) *corev1.Node {
		return buildtest.Node("kwok-7", append([]buildtest.NodeOption{buildtest.Labels(map[string]string{corev1.LabelHostname: "fast-7"}), buildtest.Ready(ready)}, opts...)...)
	}

	h := newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "8"), sts, db, seat, seatNode(false))
	h.ctrl.Seats = &spec
	h.reconcileNode(t, "spot-1")
	if _, ok := h.pod(t, "db-0"); !ok {
		t.Fatalf("db-0 moved while its seat's node is not Ready and no lifeboat is")
	}
	// A seat node that ran in the capacity pool being reclaimed (spot-1's: Spot, same type and
	// zone) before the notice is likely the reclaim's next: the Pod would move again.
	h = newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "8"), sts, db, seat, seatNode(true, buildtest.CapacityType(buildtest.Spot)))
	h.ctrl.Seats = &spec
	h.reconcileNode(t, "spot-1")
	if _, ok := h.pod(t, "db-0"); !ok {
		t.Fatalf("db-0 moved to a seat in the capacity pool being reclaimed")
	}
	// A seat not Ready yet: its node is still pulling the Pod's images.
	pulling := seat.DeepCopy()
	pulling.Status = corev1.PodStatus{Phase: corev1.PodPending}
	h = newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "8"), sts, db, pulling, seatNode(true))
	h.ctrl.Seats = &spec
	h.reconcileNode(t, "spot-1")
	if _, ok := h.pod(t, "db-0"); !ok {
		t.Fatalf("db-0 moved to a seat that is not Ready (its images not pulled yet)")
	}

	// The move: the seat's host recorded on a lifeboat Node in one pass (the webhook must see
	// it before the Pod is re-created), the eviction in the next, soon after.
	h = newHarness(t, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", false, "8"), sts, db, seat, seatNode(true))
	h.ctrl.Seats = &spec
	res := h.reconcileNode(t, "spot-1")
	boat := &corev1.Node{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Name: "lb-1"}, boat); err != nil {
		t.Fatal(err)
	}
	rec, err := policy.ParseSeatRecord(boat.Annotations[v1alpha1.AnnotationBridgeSeats])
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Host("app/db-0", h.clk.Now()); got != "fast-7" {
		t.Errorf("recorded seat host %q for app/db-0 on lb-1 (%q), want fast-7", got, boat.Annotations[v1alpha1.AnnotationBridgeSeats])
	}
	if _, ok := h.pod(t, "db-0"); !ok {
		t.Errorf("db-0 evicted in the pass that recorded its seat: the webhook may not have seen the record yet")
	}
	if res.RequeueAfter != conflictRetry {
		t.Errorf("the recording pass requeues after %s, want %s (the eviction follows soon)", res.RequeueAfter, conflictRetry)
	}
	h.reconcileNode(t, "spot-1")
	if _, ok := h.pod(t, "db-0"); ok {
		t.Errorf("db-0 still there after the pass that found its seat recorded: want moved straight to its seat's node")
	}
	err = h.c.Get(context.Background(), client.ObjectKeyFromObject(seat), &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the seat after the move: %v, want deleted (its room is the replacement's)", err)
	}
	if evs := strings.Join(h.events(), "\n"); !strings.Contains(evs, "straight to its seat's node fast-7") {
		t.Errorf("events %q: want a move straight to the seat's node", evs)
	}
}

// TestMoveToLifeboatForgetsAnEarlierStraightMove: a Pod moved straight to its seat at an
// earlier interruption, whose node is interrupted now, moves to a lifeboat: the lifeboats'
// bridge seat record loses its entry first, so the webhook routes its replacement to the
// lifeboat's scheduler instead of preferring the old seat's node.
func TestMoveToLifeboatForgetsAnEarlierStraightMove(t *testing.T) {
	db, sts := heldSingleReplica()
	boat := poolNode("lb-1", "spot-1", true, "8")
	rec, _ := policy.SeatRecord{}.With(map[string]string{"app/db-0": "spot-1", "app/other-0": "fast-9"}, ctrlNow.Add(-time.Minute))
	boat.Annotations = map[string]string{v1alpha1.AnnotationBridgeSeats: rec.String()}

	// The lifeboat that took the earlier record went back to standby: the webhook still reads it.
	old := buildtest.Node("lb-0", buildtest.Pool("pool", v1alpha1.NodeStateStandby), buildtest.Annotations(map[string]string{v1alpha1.AnnotationBridgeSeats: rec.String()}))

	h := newHarness(t, interruptedNode("spot-1", "lb-1"), boat, old, sts, db)
	h.ctrl.Seats = &handoff.SeatSpec{Namespace: "lifeboat-system"}
	h.reconcileNode(t, "spot-1")
	if _, ok := h.pod(t, "db-0"); ok {
		t.Fatalf("db-0 still there: want moved to the Ready lifeboat")
	}
	for _, name := range []string{"lb-1", "lb-0"} {
		got := &corev1.Node{}
		if err := h.c.Get(context.Background(), client.ObjectKey{Name: name}, got); err != nil {
			t.Fatal(err)
		}
		after, err := policy.ParseSeatRecord(got.Annotations[v1alpha1.AnnotationBridgeSeats])
		if err != nil {
			t.Fatal(err)
		}
		if h := after.Host("app/db-0", ctrlNow); h != "" {
			t.Errorf("app/db-0 still recorded at %q on %s after its move to a lifeboat", h, name)
		}
		if h := after.Host("app/other-0", ctrlNow); h != "fast-9" {
			t.Errorf("another Pod's entry lost on %s: %q", name, h)
		}
	}
}

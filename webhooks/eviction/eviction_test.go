package eviction

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/webhookmetrics"
)

var now = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

// protectedPod is a protected Pod app/name of ReplicaSet api-1 on node, with the annotations.
func protectedPod(name, node string, annotations map[string]string) *corev1.Pod {
	p := buildtest.Pod("app", name, buildtest.Protected(""), buildtest.OwnedBy("ReplicaSet", "api-1", "rs"), buildtest.OnNode(node))
	p.Annotations = annotations
	return p
}

func evictionRequest(ns, name string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         "req",
		Operation:   admissionv1.Create,
		SubResource: "eviction",
		Kind:        metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Name:        name,
		Namespace:   ns,
	}}
}

func newHolder(funcs interceptor.Funcs, objs ...client.Object) *Holder {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
	return &Holder{Reader: c, Clock: clocktesting.NewFakePassiveClock(now), Pending: policy.DefaultPendingHold,
		Exempt: func(ns string) bool { return ns == "kube-system" || ns == v1alpha1.DefaultNamespace }}
}

func TestHandle(t *testing.T) {
	until := now.Add(30 * time.Second)
	holdAnn := map[string]string{v1alpha1.AnnotationEvictionHold: until.Format(time.RFC3339Nano)}
	// spot-1 is being deleted since 3 s ago; od-1 is on-demand.
	spot := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "spot"},
		Annotations:       map[string]string{v1alpha1.AnnotationResumeDecision: "lb-1"},
		DeletionTimestamp: &metav1.Time{Time: now.Add(-3 * time.Second)}, Finalizers: []string{"karpenter.sh/termination"}}}
	ondemand := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "od-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "on-demand"},
		DeletionTimestamp: &metav1.Time{Time: now.Add(-3 * time.Second)}, Finalizers: []string{"karpenter.sh/termination"}}}
	objs := []client.Object{spot, ondemand,
		protectedPod("held", "spot-1", holdAnn),
		protectedPod("held-no-node", "", holdAnn),
		protectedPod("released", "spot-1", map[string]string{v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased}),
		protectedPod("expired", "spot-1", map[string]string{v1alpha1.AnnotationEvictionHold: now.Add(-time.Second).Format(time.RFC3339Nano)}),
		protectedPod("pending", "spot-1", nil),
		protectedPod("on-demand", "od-1", nil),
		protectedPod("node-gone", "spot-9", nil),
	}
	sys := protectedPod("held", "spot-1", holdAnn)
	sys.Namespace = "kube-system"
	objs = append(objs, sys)
	h := newHolder(interceptor.Funcs{}, objs...)

	notEviction := func(f func(r *admission.Request)) admission.Request {
		r := evictionRequest("app", "held")
		f(&r)
		return r
	}
	tests := []struct {
		name     string
		req      admission.Request
		allowed  bool
		contains string // in the result's message
		warning  bool
		failOpen bool
	}{
		{name: "held Pod", req: evictionRequest("app", "held"), contains: "holds this Pod"},
		{name: "held Pod not on a node", req: evictionRequest("app", "held-no-node"), contains: "holds this Pod"},
		{name: "pending hold of an undecided Pod on a drained Spot node", req: evictionRequest("app", "pending"), contains: "preparing a lifeboat"},
		{name: "released", req: evictionRequest("app", "released"), allowed: true},
		{name: "expired hold", req: evictionRequest("app", "expired"), allowed: true},
		{name: "on-demand node", req: evictionRequest("app", "on-demand"), allowed: true},
		{name: "the Pod's Node does not exist", req: evictionRequest("app", "node-gone"), allowed: true},
		{name: "Pod not found", req: evictionRequest("app", "nope"), allowed: true},
		{name: "exempt namespace", req: evictionRequest("kube-system", "held"), allowed: true},
		{name: "not a create", req: notEviction(func(r *admission.Request) { r.Operation = admissionv1.Update }), allowed: true},
		{name: "not the eviction subresource", req: notEviction(func(r *admission.Request) { r.SubResource = "" }), allowed: true},
		{name: "not an Eviction", req: notEviction(func(r *admission.Request) { r.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"} }), allowed: true},
		{name: "policy/v1beta1 Eviction is handled too", req: notEviction(func(r *admission.Request) { r.Kind.Version = "v1beta1" }), contains: "holds this Pod"},
		{name: "no name: fail open with a warning", req: evictionRequest("app", ""), allowed: true, warning: true, failOpen: true},
		{name: "no namespace: fail open with a warning", req: evictionRequest("", "held"), allowed: true, warning: true, failOpen: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), tt.req)
			if resp.Allowed != tt.allowed {
				t.Fatalf("Allowed = %v (result %+v), want %v", resp.Allowed, resp.Result, tt.allowed)
			}
			if !tt.allowed {
				if resp.Result == nil || resp.Result.Code != http.StatusTooManyRequests || resp.Result.Reason != metav1.StatusReasonTooManyRequests {
					t.Fatalf("result %+v, want code 429 reason TooManyRequests", resp.Result)
				}
				if !strings.Contains(resp.Result.Message, tt.contains) {
					t.Errorf("message %q, want it to contain %q", resp.Result.Message, tt.contains)
				}
			}
			if got := len(resp.Warnings) > 0; got != tt.warning {
				t.Errorf("warnings %v, want some: %v", resp.Warnings, tt.warning)
			}
			if tt.failOpen && (resp.Result == nil || resp.Result.Reason != webhookmetrics.ReasonError) {
				t.Errorf("result %+v, want reason %s (fail-open)", resp.Result, webhookmetrics.ReasonError)
			}
			if !tt.failOpen && resp.Result != nil && resp.Result.Reason == webhookmetrics.ReasonError {
				t.Errorf("result %+v marked as an error", resp.Result)
			}
		})
	}
}

func TestHandleClockAndPending(t *testing.T) {
	spot := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "spot"},
		Annotations: map[string]string{v1alpha1.AnnotationInterruptedAt: now.Add(-3 * time.Second).Format(time.RFC3339Nano)}}}
	h := newHolder(interceptor.Funcs{}, spot, protectedPod("pending", "spot-1", nil),
		protectedPod("held", "spot-1", map[string]string{v1alpha1.AnnotationEvictionHold: now.Add(30 * time.Second).Format(time.RFC3339Nano)}))
	clk := clocktesting.NewFakePassiveClock(now)
	h.Clock = clk
	if resp := h.Handle(context.Background(), evictionRequest("app", "pending")); resp.Allowed {
		t.Errorf("pending hold 3 s into the drain: allowed")
	}
	clk.SetTime(now.Add(7 * time.Second)) // 10 s after the mark
	if resp := h.Handle(context.Background(), evictionRequest("app", "pending")); !resp.Allowed {
		t.Errorf("pending hold past its 10 s: refused (%+v)", resp.Result)
	}
	if resp := h.Handle(context.Background(), evictionRequest("app", "held")); resp.Allowed {
		t.Errorf("annotated hold before its deadline: allowed")
	}
	clk.SetTime(now.Add(30 * time.Second))
	if resp := h.Handle(context.Background(), evictionRequest("app", "held")); !resp.Allowed {
		t.Errorf("annotated hold at its deadline: refused (%+v)", resp.Result)
	}

	h.Pending = 0
	clk.SetTime(now)
	if resp := h.Handle(context.Background(), evictionRequest("app", "pending")); !resp.Allowed {
		t.Errorf("pending holds disabled: refused (%+v)", resp.Result)
	}
}

func TestHandleFailsOpen(t *testing.T) {
	boom := errors.New("apiserver unavailable")
	spot := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "spot"},
		DeletionTimestamp: &metav1.Time{Time: now.Add(-time.Second)}, Finalizers: []string{"karpenter.sh/termination"}}}
	pod := protectedPod("pending", "spot-1", nil)
	for _, kind := range []string{"Pod", "Node"} {
		t.Run(kind, func(t *testing.T) {
			h := newHolder(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, isPod := obj.(*corev1.Pod); isPod == (kind == "Pod") {
					return boom
				}
				return c.Get(ctx, key, obj, opts...)
			}}, spot, pod)
			resp := h.Handle(context.Background(), evictionRequest("app", "pending"))
			if !resp.Allowed {
				t.Fatalf("refused on a read error: %+v", resp.Result)
			}
			if len(resp.Warnings) == 0 || !strings.Contains(resp.Warnings[0], boom.Error()) {
				t.Errorf("warnings %v, want the error", resp.Warnings)
			}
			if resp.Result == nil || resp.Result.Reason != webhookmetrics.ReasonError {
				t.Errorf("result %+v, want reason %s", resp.Result, webhookmetrics.ReasonError)
			}
		})
	}
}

// TestHandleReadsTheNodeOnlyWhenNeeded: a drain of many nodes sends every eviction through
// this webhook, most of them for Pods Lifeboat never holds; those cost one read, not two.
func TestHandleReadsTheNodeOnlyWhenNeeded(t *testing.T) {
	spot := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "spot"},
		DeletionTimestamp: &metav1.Time{Time: now.Add(-time.Second)}, Finalizers: []string{"karpenter.sh/termination"}}}
	unprotected := protectedPod("unprotected", "spot-1", nil)
	unprotected.Labels = map[string]string{"app": "batch"}
	nodeReads := 0
	h := newHolder(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, isNode := obj.(*corev1.Node); isNode {
			nodeReads++
		}
		return c.Get(ctx, key, obj, opts...)
	}}, spot, unprotected,
		protectedPod("held", "spot-1", map[string]string{v1alpha1.AnnotationEvictionHold: now.Add(30 * time.Second).Format(time.RFC3339Nano)}),
		protectedPod("pending", "spot-1", nil))
	for _, tt := range []struct {
		pod       string
		allowed   bool
		nodeReads int
	}{
		{pod: "unprotected", allowed: true, nodeReads: 0},
		{pod: "held", allowed: false, nodeReads: 0},
		{pod: "pending", allowed: false, nodeReads: 1},
	} {
		nodeReads = 0
		resp := h.Handle(context.Background(), evictionRequest("app", tt.pod))
		if resp.Allowed != tt.allowed || nodeReads != tt.nodeReads {
			t.Errorf("%s: allowed %v after %d Node reads, want %v after %d", tt.pod, resp.Allowed, nodeReads, tt.allowed, tt.nodeReads)
		}
	}
}

// TestHandleDecidesFromTheMetadataCache: with a Pod metadata cache, an eviction of a Pod
// Lifeboat never bridges reads nothing from the API server; an annotated or bridgeable Pod is
// still read live (a hold's annotation changes both ways); a cache miss falls back to a read.
func TestHandleDecidesFromTheMetadataCache(t *testing.T) {
	spot := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{v1alpha1.LabelCapacityType: "spot"},
		DeletionTimestamp: &metav1.Time{Time: now.Add(-time.Second)}, Finalizers: []string{"karpenter.sh/termination"}}}
	unprotected := protectedPod("unprotected", "spot-1", nil)
	unprotected.Labels = map[string]string{"app": "batch"}
	critical := protectedPod("critical", "spot-1", nil)
	critical.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCritical)
	held := protectedPod("held", "spot-1", map[string]string{v1alpha1.AnnotationEvictionHold: now.Add(30 * time.Second).Format(time.RFC3339Nano)})
	cached := []client.Object{spot, unprotected, critical, held, protectedPod("pending", "spot-1", nil)}
	fresh := protectedPod("fresh", "spot-1", nil) // created after the cache's last update
	fresh.Labels = map[string]string{"app": "batch"}

	reads := 0
	h := newHolder(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		reads++
		return c.Get(ctx, key, obj, opts...)
	}}, append(cached, fresh)...)
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	h.Metadata = fake.NewClientBuilder().WithScheme(s).WithObjects(cached...).Build()
	for _, tt := range []struct {
		pod     string
		allowed bool
		reads   int
	}{
		{pod: "unprotected", allowed: true, reads: 0},
		{pod: "critical", allowed: true, reads: 0},
		{pod: "held", allowed: false, reads: 1},
		{pod: "pending", allowed: false, reads: 2},
		{pod: "fresh", allowed: true, reads: 1},
	} {
		reads = 0
		resp := h.Handle(context.Background(), evictionRequest("app", tt.pod))
		if resp.Allowed != tt.allowed || reads != tt.reads {
			t.Errorf("%s: allowed %v after %d API reads, want %v after %d", tt.pod, resp.Allowed, reads, tt.allowed, tt.reads)
		}
	}
}

func TestHeld(t *testing.T) {
	resp := Held("wait")
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusTooManyRequests ||
		resp.Result.Status != metav1.StatusFailure || resp.Result.Reason != metav1.StatusReasonTooManyRequests || resp.Result.Message != "wait" {
		t.Errorf("Held = %+v", resp)
	}
}

// Package eviction is the validating webhook on pods/eviction: it refuses (HTTP 429, as a
// PodDisruptionBudget does) the eviction of a protected Pod that Lifeboat holds while the Pod's
// replacement starts on a lifeboat node, so that Karpenter's drain (or NTH's, or kubectl
// drain) removes the Pod only once its replacement is Ready — never past the hold's deadline.
// The decision is policy.EvictionHold; this handler only reads the Pod and its Node.
//
// It fails open: an error, a request it cannot read, a Pod or Node it cannot get all let the
// eviction through, as does the webhook being down (failurePolicy: Ignore). Then the drain goes
// on exactly as without Lifeboat.
package eviction

import (
	"context"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/webhookmetrics"
)

// Path is where the webhook is served.
const Path = "/validate-evictions"

// Holder is the eviction webhook.
type Holder struct {
	// Reader gets the Pod and, when the verdict depends on it (policy.EvictionNeedsNode), its
	// Node. It must read the API server, not a cache: a hold the bridge controller wrote a
	// moment ago must be seen. A drain of many nodes evicts at up to Karpenter's 100 per second
	// and retries held Pods, so the reader's client-side rate limit must allow for that
	// (lifeboat-webhook --kube-api-qps).
	Reader client.Reader
	// Metadata, when set, is an informer cache of Pods' metadata: an eviction it decides alone
	// (policy.EvictionAllowedByMetadata: most Pods of a drained node are never bridged) costs
	// no read of the API server. Every other eviction is decided on Reader's copies.
	Metadata client.Reader
	Clock    clock.PassiveClock
	// Pending bounds the hold of a Pod Lifeboat has not decided about (policy.DefaultPendingHold);
	// 0 disables that hold.
	Pending time.Duration
	// Exempt reports namespaces Lifeboat never touches.
	Exempt func(namespace string) bool
}

var _ admission.Handler = &Holder{}

// Handle answers one eviction.
func (h *Holder) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "eviction" || req.Kind.Kind != "Eviction" {
		return admission.Allowed("not a Pod eviction")
	}
	if req.Name == "" || req.Namespace == "" {
		return failOpen(fmt.Errorf("the eviction request names no Pod"))
	}
	if h.Exempt != nil && h.Exempt(req.Namespace) {
		return admission.Allowed("namespace is never touched by Lifeboat")
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(req.Namespace, req.Name))
	if h.Metadata != nil {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		if err := h.Metadata.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, meta); err == nil {
			if v, ok := policy.EvictionAllowedByMetadata(meta.ObjectMeta); ok {
				logger.V(4).Info("Eviction allowed", "reason", v.Reason, "from", "cache")
				return admission.Allowed(v.Reason)
			}
		}
	}
	pod := &corev1.Pod{}
	if err := h.Reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("the Pod does not exist")
		}
		logger.Error(err, "Letting the eviction through: cannot read the Pod")
		return failOpen(err)
	}
	var node *corev1.Node
	if policy.EvictionNeedsNode(pod) {
		node = &corev1.Node{}
		if err := h.Reader.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "Letting the eviction through: cannot read the Pod's Node")
				return failOpen(err)
			}
			node = nil
		}
	}
	v := policy.EvictionHold(pod, node, h.Clock.Now(), h.Pending)
	if !v.Hold {
		logger.V(4).Info("Eviction allowed", "reason", v.Reason)
		return admission.Allowed(v.Reason)
	}
	logger.V(2).Info("Eviction held", "until", v.Until, "reason", v.Reason)
	return Held(v.Reason)
}

// Held is the refusal: 429 Too Many Requests, which Karpenter's terminator, kubectl drain and
// NTH all treat as "a disruption budget says not now" and retry.
func Held(reason string) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
			Reason: metav1.StatusReasonTooManyRequests, Message: reason,
		},
	}}
}

func failOpen(err error) admission.Response {
	resp := admission.Allowed("Lifeboat could not decide; letting the eviction through").WithWarnings("lifeboat: " + err.Error())
	resp.Result.Reason = webhookmetrics.ReasonError
	return resp
}

// Package webhookmetrics instruments Lifeboat's admission webhooks:
// lifeboat_webhook_requests_total{webhook,decision} and
// lifeboat_webhook_request_duration_seconds{webhook}, measured around the whole HTTP request
// (decode, decision, encode) so the histogram is the server-side latency the apiserver sees minus
// the network. The apiserver's own admission histogram starts at 5 ms, too coarse for a webhook
// that should answer in about a millisecond, hence buckets from 0.5 ms up.
package webhookmetrics

import (
	"context"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/metricdef"
)

// Decisions, the values of the decision label.
const (
	DecisionAllowed = "allowed" // admitted unchanged
	DecisionMutated = "mutated" // admitted with a patch
	DecisionWarned  = "warned"  // admitted with warnings
	DecisionDenied  = "denied"
	DecisionHeld    = "held"  // an eviction refused with 429 while Lifeboat bridges the Pod
	DecisionError   = "error" // bad request or internal error (Pods are still admitted: fail-open)
)

// Buckets are the latency histogram's buckets in seconds.
var Buckets = []float64{0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

var (
	requests = metricdef.CounterVec("lifeboat_webhook_requests_total", "Admission requests handled, by webhook and decision.", "webhook", "decision")
	duration = metricdef.HistogramVec("lifeboat_webhook_request_duration_seconds", "Time to answer an admission request, from the request arriving to the response written.", Buckets, "webhook")
)

type decisionKey struct{}

type decisionHolder struct{ decision string }

// SetDecision records the decision of the request being served (called by Handler).
func setDecision(ctx context.Context, d string) {
	if h, ok := ctx.Value(decisionKey{}).(*decisionHolder); ok {
		h.decision = d
	}
}

// HTTP wraps a webhook's HTTP handler: it times the request and counts it under the decision
// the inner Handler recorded, or "error" when the request never reached it (malformed body).
func HTTP(webhook string, next http.Handler) http.Handler {
	for _, d := range []string{DecisionAllowed, DecisionMutated, DecisionWarned, DecisionDenied, DecisionHeld, DecisionError} {
		requests.WithLabelValues(webhook, d)
	}
	observer := duration.WithLabelValues(webhook)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h := &decisionHolder{decision: DecisionError}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, h)))
		observer.Observe(time.Since(start).Seconds())
		requests.WithLabelValues(webhook, h.decision).Inc()
	})
}

// Handler wraps an admission handler to record its decision for HTTP.
func Handler(next admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		resp := next.Handle(ctx, req)
		setDecision(ctx, Decision(resp))
		return resp
	})
}

// Decision classifies a response.
func Decision(resp admission.Response) string {
	switch {
	case !resp.Allowed && resp.Result != nil && resp.Result.Code == http.StatusTooManyRequests:
		return DecisionHeld
	case !resp.Allowed && resp.Result != nil && resp.Result.Code >= 400 && resp.Result.Code != http.StatusForbidden:
		return DecisionError
	case !resp.Allowed:
		return DecisionDenied
	case resp.Result != nil && resp.Result.Reason == ReasonError:
		return DecisionError
	case len(resp.Patches) > 0:
		return DecisionMutated
	case len(resp.Warnings) > 0:
		return DecisionWarned
	default:
		return DecisionAllowed
	}
}

// ReasonError marks a response that admitted a request after an internal error (fail-open).
const ReasonError = "LifeboatError"

package policy

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// DefaultPendingHold bounds how long a protected Pod of a Spot node that is being drained is
// held while Lifeboat has not yet decided about it: the decision follows the notice in well
// under a second (docs/BENCHMARKS.md), so ten seconds only matter when Lifeboat's controller
// is down — and then the drain goes on as without Lifeboat.
const DefaultPendingHold = 10 * time.Second

// HoldVerdict is the answer to "may this Pod be evicted now".
type HoldVerdict struct {
	// Hold: refuse the eviction (HTTP 429, as a PodDisruptionBudget would); the drainer retries.
	Hold bool
	// Until is the latest time the hold can last (set when Hold).
	Until time.Time
	// Reason says why, in words, for the eviction's caller and the logs.
	Reason string
}

// EvictionHold decides whether an eviction of pod, running on node (nil when unknown), is
// refused at now (docs/WARMPOOL.md "Bridge"). Two holds exist:
//
//   - the bridge controller's: the Pod's lifeboat.dev/eviction-hold annotation holds an RFC 3339
//     deadline; the eviction is refused until then, whatever else the cluster says, and let
//     through from then on (a crashed controller cannot extend a hold). "released" lets it go.
//   - the pending hold, which makes the bridge race-free against a drainer that starts from the
//     same notice: a protected Pod of a Deployment or StatefulSet, on a Spot node that is being
//     drained (deletion requested, Karpenter's disrupted taint, or Lifeboat's interruption mark)
//     is held for at most pending after the drain started, until the bridge controller writes
//     the Pod's annotation — a hold, or "released" (also when the node got no lifeboat: a seat
//     on another interrupted node's lifeboat may still be free).
//
// Everything else is let through: Lifeboat never blocks an eviction it has no reason to.
func EvictionHold(pod *corev1.Pod, node *corev1.Node, now time.Time, pending time.Duration) HoldVerdict {
	if raw, ok := pod.Annotations[v1alpha1.AnnotationEvictionHold]; ok {
		if raw == v1alpha1.EvictionHoldReleased {
			return HoldVerdict{Reason: "hold released by Lifeboat"}
		}
		until, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return HoldVerdict{Reason: fmt.Sprintf("ignoring unparsable %s %q", v1alpha1.AnnotationEvictionHold, raw)}
		}
		if now.Before(until) {
			return HoldVerdict{Hold: true, Until: until, Reason: fmt.Sprintf(
				"Lifeboat holds this Pod until %s while its replacement starts on a lifeboat node (retry later)", until.UTC().Format(time.RFC3339))}
		}
		return HoldVerdict{Reason: "hold expired at " + until.UTC().Format(time.RFC3339)}
	}
	if !Bridgeable(pod) || node == nil || pod.DeletionTimestamp != nil {
		return HoldVerdict{Reason: "not a Pod Lifeboat bridges"}
	}
	if node.Labels[v1alpha1.LabelCapacityType] != "spot" {
		return HoldVerdict{Reason: "not on a Spot node"}
	}
	start, ok := DrainStart(node)
	if !ok {
		return HoldVerdict{Reason: "the node is not being drained"}
	}
	if pending <= 0 {
		return HoldVerdict{Reason: "pending holds are disabled"}
	}
	until := start.Add(pending)
	if !now.Before(until) {
		return HoldVerdict{Reason: "Lifeboat did not decide in time; letting the drain proceed"}
	}
	return HoldVerdict{Hold: true, Until: until, Reason: fmt.Sprintf(
		"Lifeboat is preparing a lifeboat for this Pod (node %s is interrupted); retry after %s", node.Name, until.UTC().Format(time.RFC3339))}
}

// EvictionAllowedByMetadata reports whether an eviction is let through on the Pod's metadata
// alone, as an informer cache may hold it: a Pod Lifeboat never bridges (not protected, the
// critical tier, not of a ReplicaSet or StatefulSet) and never annotated with a hold, or one
// already terminating. These facts do not change during a Pod's life, so a cache's copy
// decides as well as the API server's. A hold's annotation does change both ways (a refused
// StatefulSet move puts it back), so an annotated Pod is never decided here.
func EvictionAllowedByMetadata(meta metav1.ObjectMeta) (HoldVerdict, bool) {
	if _, annotated := meta.Annotations[v1alpha1.AnnotationEvictionHold]; annotated {
		return HoldVerdict{}, false
	}
	if meta.DeletionTimestamp != nil {
		return HoldVerdict{Reason: "the Pod is terminating"}, true
	}
	if !Bridgeable(&corev1.Pod{ObjectMeta: meta}) {
		return HoldVerdict{Reason: "not a Pod Lifeboat bridges"}, true
	}
	return HoldVerdict{}, false
}

// EvictionNeedsNode reports whether EvictionHold's verdict on pod depends on its Node: only a
// bridgeable Pod, bound and not terminating, without the bridge's annotation. The eviction
// webhook reads the Node only then, so an eviction of any other Pod costs one read.
func EvictionNeedsNode(pod *corev1.Pod) bool {
	_, annotated := pod.Annotations[v1alpha1.AnnotationEvictionHold]
	return !annotated && pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil && Bridgeable(pod)
}

// Bridgeable reports whether Lifeboat holds the Pod's eviction for a bridge: a protected Pod
// that may use lifeboat nodes (not the critical tier) and whose controller can make its
// replacement first — a ReplicaSet (of a Deployment: surge) or a StatefulSet (moved one at a
// time). Job Pods are never held: a held Job Pod gains nothing, its Job restarts it from its
// checkpoint wherever it lands.
func Bridgeable(pod *corev1.Pod) bool {
	if pod.Labels[v1alpha1.LabelProtected] != "true" || pod.Labels[v1alpha1.LabelTier] == string(v1alpha1.TierCritical) {
		return false
	}
	ref := metav1.GetControllerOf(pod)
	return ref != nil && (ref.Kind == "ReplicaSet" || ref.Kind == "StatefulSet")
}

// SourceRebalance is the interruption source of a Node Lifeboat marked for a rebalance
// recommendation (pre-resume), not an interruption.
const SourceRebalance = "sqs/RebalanceRecommendation"

// DrainStart is when the node started going away: the earliest of its deletion request,
// Lifeboat's interruption mark and the time Karpenter's disrupted taint (or Lifeboat's
// interruption taint) was added. False when none is set.
func DrainStart(node *corev1.Node) (time.Time, bool) {
	var start time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (start.IsZero() || t.Before(start)) {
			start = t
		}
	}
	if node.DeletionTimestamp != nil {
		earliest(node.DeletionTimestamp.Time)
	}
	// A rebalance recommendation's mark is no drain: Lifeboat pre-resumes, nobody evicts.
	rebalance := node.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance
	if raw := node.Annotations[v1alpha1.AnnotationInterruptedAt]; raw != "" && !rebalance {
		if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
			earliest(t)
		}
	}
	for _, t := range node.Spec.Taints {
		if (t.Key == v1alpha1.TaintKarpenterDisrupted || t.Key == v1alpha1.TaintInterrupted && !rebalance) && t.TimeAdded != nil {
			earliest(t.TimeAdded.Time)
		}
	}
	return start, !start.IsZero()
}

// HoldAnnotations returns the annotations to merge into pod when the bridge writes value
// (an RFC 3339 deadline, or EvictionHoldReleased) into its lifeboat.dev/eviction-hold; a nil
// value removes the key (JSON merge patch).
//
// A hold is paired with Karpenter's karpenter.sh/do-not-disrupt as a duration that ends at
// the deadline: Karpenter (v1.15) counts the duration from the Pod's start, and while it runs
// its eviction queue waits without calling the Eviction API — a refused eviction costs the
// API server an eviction, a Node read and an Event per retry. The duration is a bound a
// crashed Lifeboat cannot outlive. It is written only when the Pod has a start time (without
// one Karpenter treats the duration as never ending) and no do-not-disrupt of its own, and
// removed on release only when Lifeboat wrote it.
func HoldAnnotations(pod *corev1.Pod, value string) map[string]any {
	out := map[string]any{v1alpha1.AnnotationEvictionHold: value}
	ours := pod.Annotations[v1alpha1.AnnotationDoNotDisruptByLifeboat] == "true"
	_, theirs := pod.Annotations[v1alpha1.AnnotationKarpenterDoNotDisrupt]
	theirs = theirs && !ours
	until, err := time.Parse(time.RFC3339Nano, value)
	switch {
	case err == nil && !theirs && pod.Status.StartTime != nil:
		d := until.Sub(pod.Status.StartTime.Time)
		if d <= 0 {
			break
		}
		out[v1alpha1.AnnotationKarpenterDoNotDisrupt] = fmt.Sprintf("%ds", int64((d+time.Second-1)/time.Second))
		out[v1alpha1.AnnotationDoNotDisruptByLifeboat] = "true"
		return out
	}
	if ours {
		out[v1alpha1.AnnotationKarpenterDoNotDisrupt] = nil
		out[v1alpha1.AnnotationDoNotDisruptByLifeboat] = nil
	}
	return out
}

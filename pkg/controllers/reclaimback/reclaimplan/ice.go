package reclaimplan

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ReasonKarpenterICE is the reason of the Warning event Karpenter publishes on a NodeClaim whose
// launch found no capacity in any offering it asked for (sigs.k8s.io/karpenter
// pkg/controllers/nodeclaim/lifecycle/launch.go, v1.15). With Spot allowed, it is how a fallback
// to On-Demand starts: the Spot launch fails with ICE, the offerings are marked unavailable, the
// NodeClaim is deleted and the next one launches On-Demand.
const ReasonKarpenterICE = "InsufficientCapacityError"

// LastICE is the latest time a NodeClaim of nodePool failed to launch for insufficient capacity,
// among events (zero when none did). Karpenter names a NodeClaim "<NodePool>-<suffix>" (a
// generated suffix without "-"), which is how an event, whose NodeClaim is usually deleted by
// then, maps to its NodePool.
func LastICE(events []corev1.Event, nodePool string) time.Time {
	var last time.Time
	for i := range events {
		e := &events[i]
		if e.Reason != ReasonKarpenterICE || e.InvolvedObject.Kind != "NodeClaim" {
			continue
		}
		suffix, ok := strings.CutPrefix(e.InvolvedObject.Name, nodePool+"-")
		if !ok || suffix == "" || strings.Contains(suffix, "-") {
			continue
		}
		if t := eventTime(e); t.After(last) {
			last = t
		}
	}
	return last
}

// eventTime is when an event last happened: the newest of its timestamps.
func eventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

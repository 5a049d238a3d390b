package recycle

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// Action is what happens to an empty lifeboat node after its handoff.
type Action int

const (
	// Terminate the instance; the Node goes with it and the pool refills its slot.
	Terminate Action = iota
	// Rehibernate returns the node to its slot: it goes back to warming and the warmpool
	// controller hibernates it again exactly like a freshly launched one.
	Rehibernate
)

func (a Action) String() string {
	if a == Rehibernate {
		return "Rehibernate"
	}
	return "Terminate"
}

// Observed is what the after-use decision needs.
type Observed struct {
	// Pool is the node's WarmPool; nil when it no longer exists.
	Pool *v1alpha1.WarmPool
	// Instance is the node's EC2 instance; nil when EC2 does not know it (any more).
	Instance *cloud.Instance
	Now      time.Time
}

// Decide chooses between re-hibernating and terminating an empty lifeboat node. Rehibernate is
// chosen only when the pool asks for it and everything needed for a clean return to standby
// holds; anything else falls back to Terminate, which is always safe (the pool refills). The
// reason says why, for the event. Decide is pure.
func Decide(o Observed) (Action, string) {
	pool, in := o.Pool, o.Instance
	switch {
	case pool == nil:
		return Terminate, "its WarmPool is gone"
	case !pool.DeletionTimestamp.IsZero():
		return Terminate, "its WarmPool is being deleted"
	case pool.Spec.AfterUse != v1alpha1.AfterUseRehibernate:
		return Terminate, "afterUse Terminate"
	case in == nil:
		return Terminate, "afterUse Rehibernate, but EC2 does not know the instance"
	case in.State != cloud.StateRunning:
		// Pending (a re-drive of its start), stopping or stopped (not by Lifeboat's handoff),
		// shutting down: not a state a clean hibernation starts from.
		return Terminate, fmt.Sprintf("afterUse Rehibernate, but the instance is %s, not running", in.State)
	case !in.HibernationConfigured:
		return Terminate, "afterUse Rehibernate, but the instance has no hibernation configured"
	case !holdsSlot(pool, in):
		// Claimed while the pool said Terminate (its slot refilled then), or the pool shrank:
		// hibernated, it would have no place and be terminated by the pool anyway.
		return Terminate, fmt.Sprintf("afterUse Rehibernate, but slot %d generation %d is no longer the instance's (refilled, or the pool shrank)", in.Slot, in.Generation)
	}
	maxAge := 720 * time.Hour
	if pool.Spec.MaxStandbyAge != nil && pool.Spec.MaxStandbyAge.Duration > 0 {
		maxAge = pool.Spec.MaxStandbyAge.Duration
	}
	if age := o.Now.Sub(in.LaunchTime); age > maxAge {
		return Terminate, fmt.Sprintf("afterUse Rehibernate, but the instance is older (%s) than maxStandbyAge %s", age.Round(time.Minute), maxAge)
	}
	return Rehibernate, "afterUse Rehibernate"
}

// holdsSlot: the pool's slot table still assigns the instance's slot to its generation.
func holdsSlot(pool *v1alpha1.WarmPool, in *cloud.Instance) bool {
	for _, s := range pool.Status.Slots {
		if int(s.Slot) == in.Slot && int(s.Generation) == in.Generation {
			return true
		}
	}
	return false
}

// SeatReplacementWait bounds how long an empty lifeboat node waits, before its instance is
// terminated, for the Pods its seat records name to be re-created. The records
// (lifeboat.dev/seats, lifeboat.dev/bridge-seats) live on the Node, and the Node goes with the
// instance; the webhook reads them when a StatefulSet re-creates a Pod that moved to its seat,
// to send the new Pod to the room its seat kept (images pulled). The last Pod to leave a
// lifeboat empties it: without the wait its replacement, created a moment later, could find the
// Node gone and land on any node, pulling its images while it is down (found by the bridge
// integration test: the last replica moved off a lifeboat lost its seat). A StatefulSet
// re-creates a Pod within a second of its predecessor's deletion; the bound only covers one
// that never comes back (scaled down, deleted).
const SeatReplacementWait = 30 * time.Second

// AwaitingReplacement returns, sorted, the Pods ("namespace/name") that node n's seat records
// name (entries younger than policy.SeatRecordTTL) and that have not been re-created yet: no
// such Pod (pods: namespace/name → Pod, missing when there is none), or still the predecessor,
// bound to n. Pure.
func AwaitingReplacement(n *corev1.Node, pods map[string]*corev1.Pod, now time.Time) []string {
	var out []string
	for _, key := range RecordedPods(n, now) {
		if p := pods[key]; p == nil || p.Spec.NodeName == n.Name {
			out = append(out, key)
		}
	}
	return out
}

// RecordedPods returns, sorted and once each, the Pods ("namespace/name") that node n's seat
// records name with an entry younger than policy.SeatRecordTTL. A record that does not parse
// names none (the webhook skips it too). Pure.
func RecordedPods(n *corev1.Node, now time.Time) []string {
	seen := map[string]bool{}
	for _, a := range []string{v1alpha1.AnnotationSeats, v1alpha1.AnnotationBridgeSeats} {
		rec, err := policy.ParseSeatRecord(n.Annotations[a])
		if err != nil {
			continue
		}
		for key := range rec {
			if _, ok := rec.Entry(key, now); ok {
				seen[key] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

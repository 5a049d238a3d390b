package reclaimplan

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// Phase is where a move of one fallback node stands (Move.Phase).
type Phase string

const (
	// PhaseSurging: the node is cordoned and the Deployments of its Pods are surged; waiting
	// for their replacements to be Ready, on Spot.
	PhaseSurging Phase = "Surging"
	// PhaseDraining: the replacements are Ready on Spot; the surges are taken back (the old
	// Pods go first: deletion cost), the other Pods are evicted one at a time, then the
	// NodeClaim is deleted.
	PhaseDraining Phase = "Draining"
	// PhaseAborting: the move failed (Karpenter launched On-Demand again, or it timed out);
	// surges are taken back (the new Pods go first), the node is uncordoned.
	PhaseAborting Phase = "Aborting"
	// PhaseDone: the NodeClaim is deleted and the success recorded; Karpenter removes the node.
	PhaseDone Phase = "Done"
)

// Abort reasons (Move.Reason, Event messages, never metric labels).
const (
	AbortOnDemandAgain = "OnDemandAgain"
	AbortTimeout       = "Timeout"
	AbortPolicyDeleted = "PolicyDeleted"
)

// Owner kinds of the Pods a move handles.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
	// KindPod: every other Pod (a bare Pod, a ReplicaSet without Deployment): evicted.
	KindPod = "Pod"
)

// Move is the lifeboat.dev/reclaim-back annotation on a Node being moved: what a restarted
// controller needs to finish or undo the move. The Deployments' surges themselves are in each
// Deployment's lifeboat.dev/handoff-surge record (written with the replica change).
type Move struct {
	Policy   string    `json:"policy"`
	NodePool string    `json:"nodePool"`
	Phase    Phase     `json:"phase"`
	Started  time.Time `json:"started"`
	Owners   []Owner   `json:"owners"`
	// Reason of an abort.
	Reason string `json:"reason,omitempty"`
}

// Owner is a workload whose Pods were on the node when the move started.
type Owner struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods of it on the node: a Deployment's surge.
	Pods int32 `json:"pods"`
}

// Key names the owner in messages.
func (o Owner) Key() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// ParseMove reads the annotation; ok is false when the node has none.
func ParseMove(annotations map[string]string) (m Move, ok bool, err error) {
	raw, ok := annotations[v1alpha1.AnnotationReclaimBack]
	if !ok || raw == "" {
		return Move{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return Move{}, true, fmt.Errorf("bad %s annotation: %w", v1alpha1.AnnotationReclaimBack, err)
	}
	return m, true, nil
}

// Encode renders the annotation value.
func (m Move) Encode() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// OwnersOf groups the Pods that would move (FindFallback's count: not terminal, not DaemonSet)
// by owner: a ReplicaSet's Pods by its Deployment (rsDeployment maps "namespace/replicaset" to
// the Deployment's name, "" when it has none), a StatefulSet's by it; every other Pod is its
// own owner. Sorted for a stable record.
func OwnersOf(pods []*corev1.Pod, rsDeployment map[string]string) []Owner {
	counts := map[Owner]int32{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || isDaemonSetPod(p) {
			continue
		}
		o := Owner{Kind: KindPod, Namespace: p.Namespace, Name: p.Name}
		if ref := metav1.GetControllerOf(p); ref != nil {
			switch ref.Kind {
			case "ReplicaSet":
				if d := rsDeployment[p.Namespace+"/"+ref.Name]; d != "" {
					o = Owner{Kind: KindDeployment, Namespace: p.Namespace, Name: d}
				}
			case "StatefulSet":
				o = Owner{Kind: KindStatefulSet, Namespace: p.Namespace, Name: ref.Name}
			}
		}
		counts[o]++
	}
	out := make([]Owner, 0, len(counts))
	for o, n := range counts {
		o.Pods = n
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Gate is what decides whether a new move may start, apart from the per-NodePool Spot checks
// (SpotStable, the placement score) that only run when the gate is open.
type Gate struct {
	Now      time.Time
	Schedule Schedule
	// CoolDownUntil: the cool-down after the last failure (zero: none).
	CoolDownUntil time.Time
	// InFlight moves now; MaxInFlight allowed (MaxInFlight()); Movable fallback nodes not in
	// flight.
	InFlight, MaxInFlight, Movable int
}

// GateResult says whether, and how many, moves may start, or why not and when to look again.
type GateResult struct {
	// Slots is how many moves may start now (0: blocked).
	Slots int
	// Reason is the Blocked condition's reason when Slots is 0 (v1alpha1.Reason*).
	Reason, Message string
	// RetryAt is when the block lifts by itself (zero: on a change of the cluster).
	RetryAt time.Time
	// NextWindow is the next opening while closed (status.nextWindow).
	NextWindow time.Time
}

// Decide checks the gate in the order a user reads it: nothing to move, outside the window,
// cooling down, enough moves in flight.
func (g Gate) Decide() GateResult {
	open, _, next := g.Schedule.Open(g.Now)
	switch {
	case g.Movable == 0:
		r := GateResult{Reason: v1alpha1.ReasonNoFallbackNodes, Message: "no On-Demand fallback node to move"}
		if !open {
			r.NextWindow = next
		}
		return r
	case !open:
		msg := "outside every maintenance window"
		if !next.IsZero() {
			msg += "; the next opens " + next.UTC().Format(time.RFC3339)
		}
		return GateResult{Reason: v1alpha1.ReasonWindowClosed, Message: msg, RetryAt: next, NextWindow: next}
	case g.Now.Before(g.CoolDownUntil):
		return GateResult{Reason: v1alpha1.ReasonCoolingDown, Message: "cooling down after a failed move until " + g.CoolDownUntil.UTC().Format(time.RFC3339), RetryAt: g.CoolDownUntil}
	case g.InFlight >= g.MaxInFlight:
		return GateResult{Reason: v1alpha1.ReasonMaxInFlight, Message: fmt.Sprintf("%d move(s) in flight, maxInFlight %d", g.InFlight, g.MaxInFlight)}
	}
	return GateResult{Slots: min(g.MaxInFlight-g.InFlight, g.Movable)}
}

// MaxInFlight resolves spec.maxInFlight against the fallback node count: a count, or a
// percentage rounded up; at least 1, default 1.
func MaxInFlight(v *intstr.IntOrString, fallback int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, fallback, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// SpotStable reports whether none of the Spot capacity pools of instanceTypes (any zone) had
// an interruption in the minStability before now, per the telemetry; last is the latest
// interruption seen (zero: none). The telemetry only remembers its own window
// (--telemetry-window): a longer minStability cannot see further back.
func SpotStable(t *telemetry.Telemetry, instanceTypes []string, now time.Time, minStability time.Duration) (stable bool, last time.Time) {
	if t == nil {
		return true, time.Time{}
	}
	for key, s := range t.Pools {
		typ, capacity, ok := splitPoolKey(key)
		if !ok || capacity != "spot" || s.Interruptions == 0 || !slices.Contains(instanceTypes, typ) {
			continue
		}
		if s.LastInterruption.After(last) {
			last = s.LastInterruption
		}
	}
	if last.IsZero() {
		return true, last
	}
	return !last.After(now.Add(-minStability)), last
}

// splitPoolKey reads telemetry.PoolKey's "type/zone/capacity".
func splitPoolKey(key string) (instanceType, capacityType string, ok bool) {
	first, last := -1, -1
	for i := range len(key) {
		if key[i] == '/' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 || first == last {
		return "", "", false
	}
	return key[:first], key[last+1:], true
}

// ProbeScope is what the placement probe asks about for a NodePool: its instance types (the
// values of an In requirement on node.kubernetes.io/instance-type, else those its nodes run)
// and the availability-zone IDs its nodes are in (label topology.k8s.aws/zone-id, set by
// Karpenter's AWS provider). Both sorted, without duplicates.
func ProbeScope(requirements []corev1.NodeSelectorRequirement, nodes []*corev1.Node) (instanceTypes, zoneIDs []string) {
	for _, r := range requirements {
		if r.Key == v1alpha1.LabelInstanceType && r.Operator == corev1.NodeSelectorOpIn {
			instanceTypes = append(instanceTypes, r.Values...)
		}
	}
	fromNodes := len(instanceTypes) == 0
	for _, n := range nodes {
		if fromNodes && n.Labels[v1alpha1.LabelInstanceType] != "" {
			instanceTypes = append(instanceTypes, n.Labels[v1alpha1.LabelInstanceType])
		}
		if z := n.Labels[LabelZoneID]; z != "" {
			zoneIDs = append(zoneIDs, z)
		}
	}
	slices.Sort(instanceTypes)
	slices.Sort(zoneIDs)
	return slices.Compact(instanceTypes), slices.Compact(zoneIDs)
}

// LabelZoneID is the availability-zone ID label of Karpenter's AWS provider.
const LabelZoneID = "topology.k8s.aws/zone-id"

// Observed is one look at a move in flight, fetched by the controller.
type Observed struct {
	Now     time.Time
	Move    Move
	Timeout time.Duration
	// Deployments by Owner.Key(): the state of each surged Deployment of the move.
	Deployments map[string]DeploymentState
	// OffSpot are replacement Pods (created since the move started, not on the node) bound to a
	// node that is not Spot: Karpenter launched, or the scheduler chose, On-Demand again.
	OffSpot []string
	// Evictable are the node's Pods of owners other than Deployments, not yet terminating, in
	// the order to evict them.
	Evictable []string
	// Replacing: an evicted Pod's owner (StatefulSet) has fewer Ready replicas than it wants;
	// the next eviction waits.
	Replacing bool
	// Remaining counts the node's Pods a move waits for (not DaemonSet, not terminal),
	// terminating ones included.
	Remaining int
}

// DeploymentState is a surged Deployment as a move sees it.
type DeploymentState struct {
	// Surged: its handoff-surge record is this node's.
	Surged bool
	// Busy: another surge (a handoff's or the bridge's) holds it; this one waits.
	Busy bool
	// ReadyElsewhere are its Ready Pods off the node; Target what ends the surge
	// (handoff.SurgeTarget).
	ReadyElsewhere, Target int32
}

// Step is what a move does next.
type Step struct {
	Action Action
	// Reason of an abort (Abort* constants); Message for the Event.
	Reason, Message string
	// Evict is the Pod to evict (ActionEvict).
	Evict string
}

// Action of a Step.
type Action string

const (
	// ActionWait: nothing to do until something changes (poll).
	ActionWait Action = "Wait"
	// ActionSurge: surge the Deployments not surged yet.
	ActionSurge Action = "Surge"
	// ActionDrain: every replacement is Ready on Spot: record phase Draining, then take back
	// the surges, the node's Pods first.
	ActionDrain Action = "Drain"
	// ActionEvict: evict Step.Evict (within its PDB).
	ActionEvict Action = "Evict"
	// ActionDeleteNodeClaim: the node is empty: delete its NodeClaim, record the success.
	ActionDeleteNodeClaim Action = "DeleteNodeClaim"
	// ActionAbort: record phase Aborting, take back the surges (the new Pods first),
	// uncordon, record the failure and cool down.
	ActionAbort Action = "Abort"
)

// DecideMove is the next step of a move in flight. Pure.
func DecideMove(o Observed) Step {
	m := o.Move
	switch m.Phase {
	case PhaseAborting:
		return Step{Action: ActionAbort, Reason: m.Reason}
	case PhaseDone:
		return Step{Action: ActionWait}
	}
	if len(o.OffSpot) > 0 {
		return Step{Action: ActionAbort, Reason: AbortOnDemandAgain,
			Message: fmt.Sprintf("replacement Pod(s) %v landed on On-Demand capacity again: Spot is not back yet", o.OffSpot)}
	}
	if o.Timeout > 0 && o.Now.Sub(m.Started) > o.Timeout {
		return Step{Action: ActionAbort, Reason: AbortTimeout,
			Message: fmt.Sprintf("the move did not finish within moveTimeout %s (phase %s)", o.Timeout, m.Phase)}
	}
	if m.Phase == PhaseSurging {
		surge := false
		for _, ow := range m.Owners {
			if ow.Kind != KindDeployment {
				continue
			}
			d, ok := o.Deployments[ow.Key()]
			switch {
			case !ok: // the Deployment is gone: nothing to wait for
			case !d.Surged && !d.Busy:
				surge = true
			case !d.Surged || d.ReadyElsewhere < d.Target:
				return Step{Action: ActionWait}
			}
		}
		if surge {
			return Step{Action: ActionSurge}
		}
		return Step{Action: ActionDrain}
	}
	// Draining.
	for _, ow := range m.Owners {
		if d, ok := o.Deployments[ow.Key()]; ok && ow.Kind == KindDeployment && d.Surged {
			return Step{Action: ActionDrain} // a surge left to take back (a restart after the phase change)
		}
	}
	if o.Replacing {
		return Step{Action: ActionWait}
	}
	if len(o.Evictable) > 0 {
		return Step{Action: ActionEvict, Evict: o.Evictable[0]}
	}
	if o.Remaining > 0 {
		return Step{Action: ActionWait}
	}
	return Step{Action: ActionDeleteNodeClaim}
}

// Accrue brings the On-Demand node-hours returned up to now: every returned node counts from
// its move on. prev is the total at since.
func Accrue(prev float64, returnedNodes int32, since, now time.Time) float64 {
	if since.IsZero() || !now.After(since) || returnedNodes <= 0 {
		return prev
	}
	return prev + float64(returnedNodes)*now.Sub(since).Hours()
}

// Selected reports whether a NodePool with these name and labels is selected by sel.
func Selected(sel v1alpha1.NodePoolSelector, name string, labels map[string]string) (bool, error) {
	if len(sel.Names) == 0 && sel.Selector == nil {
		return true, nil
	}
	if slices.Contains(sel.Names, name) {
		return true, nil
	}
	if sel.Selector == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel.Selector)
	if err != nil {
		return false, fmt.Errorf("nodePools.selector: %w", err)
	}
	return s.Matches(k8slabels.Set(labels)), nil
}

// ScheduleOf parses the policy's always/windows.
func ScheduleOf(spec v1alpha1.ReclaimBackPolicySpec) (Schedule, error) {
	if spec.Always {
		return Schedule{Always: true}, nil
	}
	s := Schedule{}
	for i, w := range spec.Windows {
		win, err := ParseWindow(w.Days, w.Start, w.Duration.Duration, w.TimeZone)
		if err != nil {
			return s, fmt.Errorf("windows[%d]: %w", i, err)
		}
		s.Windows = append(s.Windows, win)
	}
	return s, nil
}

// Package bridge is the controller between an interruption and its placement (docs/ARCHITECTURE.md flow 7,
// docs/WARMPOOL.md "Bridge"): the protected Pods of an interrupted Spot node that Lifeboat
// resumed lifeboat capacity for are held — their evictions refused by lifeboat-webhook — until
// their replacement is Ready on the lifeboat, never past a hard deadline that keeps their
// graceful shutdown inside the notice. A Deployment surges first (replicas + the held Pods) and
// then loses exactly the held Pods; a StatefulSet's held Pods move one at a time once a lifeboat
// is Ready. The decisions are the pure functions of this file; the reconcilers fetch, call them
// and write.
package bridge

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// Options bound the bridge.
type Options struct {
	// Notice is the Spot interruption notice (120 s, AWS EC2 docs).
	Notice time.Duration
	// Margin is kept between the end of a hold plus the Pod's grace period and the reclaim:
	// room for the drainer's retry back-off (Karpenter's eviction queue backs off up to 10 s)
	// and the API calls of the release.
	Margin time.Duration
	// ResumeTimeout: when no lifeboat of an interrupted node is Ready this long after the
	// notice, its holds are released so the drain proceeds as without Lifeboat (a resume takes
	// ~20 s; docs/FACTS.md).
	ResumeTimeout time.Duration
	// Poll is the requeue period while a bridge is in progress.
	Poll time.Duration
	// Off: no bridge at all. Lifeboats still resume and the lifeboat scheduler still seats the
	// evicted Pods on them, but no eviction is held and nothing surges before the drain: the
	// drain proceeds as without the bridge. The webhook's pending hold is separate
	// (lifeboat-webhook --eviction-pending-hold=0).
	Off bool
}

// DefaultOptions are the defaults of the controller's flags.
func DefaultOptions() Options {
	return Options{Notice: policy.DefaultNoticeBudget, Margin: 15 * time.Second, ResumeTimeout: 50 * time.Second, Poll: time.Second}
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	switch {
	case o.Notice <= 0:
		return fmt.Errorf("the notice (%s) must be positive", o.Notice)
	case o.Margin < 0 || o.Margin >= o.Notice:
		return fmt.Errorf("the bridge margin (%s) must be between 0 and the notice (%s)", o.Margin, o.Notice)
	case o.ResumeTimeout <= 0 || o.ResumeTimeout >= o.Notice:
		return fmt.Errorf("the bridge resume timeout (%s) must be between 0 and the notice (%s)", o.ResumeTimeout, o.Notice)
	case o.Poll <= 0:
		return fmt.Errorf("the bridge poll period (%s) must be positive", o.Poll)
	}
	return nil
}

// HoldDeadline is the latest a Pod with grace period grace can be held when its node's notice
// came at noticeAt: released then, its graceful shutdown (grace) still ends Margin before the
// reclaim.
func HoldDeadline(noticeAt time.Time, grace time.Duration, o Options) time.Time {
	return noticeAt.Add(o.Notice - grace - o.Margin)
}

// Grace is the Pod's termination grace period (the API's default, 30 s, when unset).
func Grace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second
	}
	return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
}

// Release reasons (the reason label of lifeboat_bridge_releases_total).
const (
	ReleaseNoLifeboat       = "no_lifeboat"        // nothing was resumed for the node
	ReleaseNoSeat           = "no_seat"            // the resumed lifeboats cannot hold the Pod too
	ReleaseNoTimeLeft       = "no_time_left"       // its grace period leaves no time to hold it
	ReleaseLifeboatNotReady = "lifeboat_not_ready" // no lifeboat Ready by ResumeTimeout
	ReleaseMoved            = "moved"              // a StatefulSet Pod let go to its Ready lifeboat
	ReleaseMovedToSeat      = "moved_to_seat"      // a StatefulSet Pod let go straight to its handoff seat's node
)

// NodeState is what the node reconciler observed of one interrupted Node.
type NodeState struct {
	Now time.Time
	// NoticeAt is when the node's notice came (the earliest of Lifeboat's mark and the drain's
	// start).
	NoticeAt time.Time
	// Decided: the resume decision is written; None: it resumed nothing.
	Decided, None bool
	// Lifeboats are the active lifeboat Nodes (resumed for any interrupted node: a burst's
	// lifeboats hold whichever of its Pods fit).
	Lifeboats []*corev1.Node
	// Free is what the lifeboats can still take for this node's Pods (FreeSeats); nil means
	// their whole allocatable.
	Free []corev1.ResourceList
	// Protected are the node's protected Pods that are not terminating: what the resume plan
	// made room for.
	Protected []*corev1.Pod
	// SettledStatefulSets holds the StatefulSets (namespace/name) whose every replica is Ready
	// and none terminating: one of their held Pods may move.
	SettledStatefulSets map[string]bool
	// SeatHosts are the held StatefulSet Pods whose seat (made at the hold) is Ready and holds
	// room on a usable node, not at risk of the reclaim, that no waiting protected Pod would
	// take first (handoff.SeatNodeUsable, handoff.AtRisk, handoff.Contested), by UID: the
	// kubernetes.io/hostname of that node.
	SeatHosts map[types.UID]string
	// SeatRecords are the pool Nodes carrying AnnotationBridgeSeats, whatever their state (the
	// controller's, not the plan's: forgetSeat).
	SeatRecords []*corev1.Node
}

// PodAction is a write to one Pod's hold annotation.
type PodAction struct {
	Pod    *corev1.Pod
	Until  time.Time // a hold: its deadline
	Reason string    // a release: why
}

// NodePlan is what to write for one interrupted Node.
type NodePlan struct {
	Hold    []PodAction
	Release []PodAction
	// Surge are the held (or now held) Deployment Pods whose replacements start now: once a
	// lifeboat is Ready. Before that a surge would only add Pending Pods, and those count against
	// the Deployment's PodDisruptionBudget (its expected count is the surged replicas), slowing
	// Karpenter's drain of the Deployment's other Pods; a lifeboat that is never Ready then costs
	// the drain nothing but the hold.
	Surge []*corev1.Pod
	// Move are held StatefulSet Pods to release and evict now (at most one per StatefulSet,
	// counting SeatMove).
	Move []*corev1.Pod
	// SeatMove are held StatefulSet Pods to release and evict now straight to their seat's
	// node (NodeState.SeatHosts): the room Karpenter launched at the hold is up, so the Pod moves
	// once, to its final home, instead of to a lifeboat and from there again at the handoff.
	// A StatefulSet moves a Pod with a usable seat before one without, lifeboat Ready or not.
	SeatMove []*corev1.Pod
	// Seat are the held (or now held) StatefulSet Pods: each gets its handoff seat now
	// (handoff.Seat), so that Karpenter launches the room the Pod moves to after the lifeboat
	// at the notice — when it would launch it for the evicted Pod without Lifeboat — and not
	// only once the Pod is on the lifeboat. The lifeboat's handoff adopts the seat.
	Seat []*corev1.Pod
	// Busy: something is still held or pending on the node; look again after Options.Poll.
	Busy bool
}

// HoldState reads a Pod's hold annotation: held until a time, released, or not decided.
func HoldState(p *corev1.Pod) (until time.Time, released, decided bool) {
	raw, ok := p.Annotations[v1alpha1.AnnotationEvictionHold]
	if !ok {
		return time.Time{}, false, false
	}
	if raw == v1alpha1.EvictionHoldReleased {
		return time.Time{}, true, true
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return time.Time{}, true, true // the webhook ignores it too
	}
	return t, false, true
}

// PlanNode decides the holds of one interrupted Node's Pods.
func PlanNode(s NodeState, o Options) NodePlan {
	var plan NodePlan
	if !s.Decided {
		return NodePlan{Busy: true} // the webhook's pending hold covers the Pods meanwhile
	}
	anyReady := false
	for _, n := range s.Lifeboats {
		if nodeutil.Ready(n) {
			anyReady = true
		}
	}
	giveUp := ""
	switch {
	case len(s.Lifeboats) == 0:
		giveUp = ReleaseNoLifeboat
	case !anyReady && !s.Now.Before(s.NoticeAt.Add(o.ResumeTimeout)):
		giveUp = ReleaseLifeboatNotReady
	}
	var seats map[types.UID]bool
	if s.Free == nil {
		free := make([]corev1.ResourceList, len(s.Lifeboats))
		for i, n := range s.Lifeboats {
			free[i] = n.Status.Allocatable
		}
		seats = seatsFor(s.Protected, free)
	} else {
		// Pods already held are booked in Free; the rest of the node's protected Pods (its
		// Job Pods too, evicted at once) compete for what is left.
		var unbooked []*corev1.Pod
		for _, p := range s.Protected {
			if _, _, decided := HoldState(p); !decided {
				unbooked = append(unbooked, p)
			}
		}
		seats = seatsFor(unbooked, s.Free)
	}
	movable := map[string][]*corev1.Pod{} // per settled StatefulSet, its held Pods in order
	var order []string
	for _, p := range s.Protected {
		if !policy.Bridgeable(p) {
			continue
		}
		until, released, decided := HoldState(p)
		held := decided && !released && s.Now.Before(until)
		switch {
		case released || (decided && !held):
			continue // released, or its hold expired: the webhook lets it go
		case giveUp != "":
			plan.Release = append(plan.Release, PodAction{Pod: p, Reason: giveUp})
		case !decided && !seats[p.UID]:
			plan.Release = append(plan.Release, PodAction{Pod: p, Reason: ReleaseNoSeat})
		case !decided:
			deadline := HoldDeadline(s.NoticeAt, Grace(p), o)
			if !s.Now.Before(deadline) {
				plan.Release = append(plan.Release, PodAction{Pod: p, Reason: ReleaseNoTimeLeft})
				continue
			}
			plan.Hold = append(plan.Hold, PodAction{Pod: p, Until: deadline})
			plan.Busy = true
			if anyReady && replicaSetOwned(p) {
				plan.Surge = append(plan.Surge, p)
			}
			if statefulSetOf(p) != "" {
				plan.Seat = append(plan.Seat, p)
			}
		default: // held
			plan.Busy = true
			if anyReady && replicaSetOwned(p) {
				plan.Surge = append(plan.Surge, p)
			}
			sts := statefulSetOf(p)
			if sts != "" {
				plan.Seat = append(plan.Seat, p)
			}
			if sts != "" && s.SettledStatefulSets[sts] {
				if movable[sts] == nil {
					order = append(order, sts)
				}
				movable[sts] = append(movable[sts], p)
			}
		}
	}
	for _, sts := range order {
		if i := slices.IndexFunc(movable[sts], func(p *corev1.Pod) bool { return s.SeatHosts[p.UID] != "" }); i >= 0 {
			p := movable[sts][i]
			plan.SeatMove = append(plan.SeatMove, p)
			// Its seat goes at the move (its room is the replacement's): not made again.
			plan.Seat = slices.DeleteFunc(plan.Seat, func(q *corev1.Pod) bool { return q.UID == p.UID })
		} else if anyReady {
			plan.Move = append(plan.Move, movable[sts][0])
		}
	}
	return plan
}

func statefulSetOf(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "StatefulSet" {
		return p.Namespace + "/" + ref.Name
	}
	return ""
}

// seatsFor packs Pods onto free capacity (first-fit decreasing by CPU, then memory, as the
// resume plan does) and returns the Pods that got a seat. The bridge holds only those, and lets
// the rest go at once (no worse than without Lifeboat).
func seatsFor(pods []*corev1.Pod, free []corev1.ResourceList) map[types.UID]bool {
	left := make([]corev1.ResourceList, len(free))
	for i := range free {
		left[i] = free[i].DeepCopy()
	}
	out := map[types.UID]bool{}
	for _, p := range largestFirst(pods) {
		if take(left, seatRequest(p)) {
			out[p.UID] = true
		}
	}
	return out
}

func largestFirst(pods []*corev1.Pod) []*corev1.Pod {
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(sorted, func(i, j int) bool {
		ri, rj := nodeutil.PodRequests(sorted[i]), nodeutil.PodRequests(sorted[j])
		if c := ri.Cpu().Cmp(*rj.Cpu()); c != 0 {
			return c > 0
		}
		if c := ri.Memory().Cmp(*rj.Memory()); c != 0 {
			return c > 0
		}
		return sorted[i].Name < sorted[j].Name
	})
	return sorted
}

// take subtracts req from the first of free that fits it; false when none does.
func take(free []corev1.ResourceList, req corev1.ResourceList) bool {
	for i := range free {
		if fits(req, free[i]) {
			subtract(free[i], req)
			return true
		}
	}
	return false
}

// seatRequest is what p takes of a lifeboat: its requests and one of the node's Pod slots (a
// lifeboat full of small Pods runs out of its maxPods before its CPU).
func seatRequest(p *corev1.Pod) corev1.ResourceList {
	req := nodeutil.PodRequests(p)
	req[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return req
}

// subtract takes req from what a node has left; a resource the node does not report (a Pod
// slot count missing from allocatable) is not tracked.
func subtract(from, req corev1.ResourceList) {
	for name, q := range req {
		left, ok := from[name]
		if !ok {
			continue
		}
		left.Sub(q)
		from[name] = left
	}
}

// FreeSeats is what the active lifeboats can still take for new holds: each one's allocatable
// less the requests (and Pod slots, seatRequest) of the Pods bound to it (bound: lifeboat name → its non-terminal Pods),
// less the held Pods of every interrupted node whose replacement is not bound to a lifeboat
// yet, less the protected Pods waiting for a node that are no held Pod's replacement
// (pending: evicted Job Pods, say). A held Deployment Pod and its replacement (a surge Pod)
// share their ReplicaSet: per ReplicaSet, as many held Pods as it has Pods on lifeboats created
// since the holds began count as seated already. A held StatefulSet Pod is its own replacement
// (it moves under its name), so it always needs a seat of its own.
func FreeSeats(lifeboats []*corev1.Node, bound map[string][]*corev1.Pod, held, pending []*corev1.Pod) []corev1.ResourceList {
	byOwner := map[string][]*corev1.Pod{}
	since := map[string]time.Time{}
	for _, p := range held {
		k := ownerKey(p)
		byOwner[k] = append(byOwner[k], p)
		// A hold ends at notice + notice − grace − margin: its notice came at most a notice
		// before its deadline.
		if until, _, _ := HoldState(p); !until.IsZero() {
			if start := until.Add(-policy.DefaultNoticeBudget); since[k].IsZero() || start.Before(since[k]) {
				since[k] = start
			}
		}
	}
	free := make([]corev1.ResourceList, len(lifeboats))
	surged := map[string]int{}
	for i, n := range lifeboats {
		free[i] = n.Status.Allocatable.DeepCopy()
		for _, p := range bound[n.Name] {
			subtract(free[i], seatRequest(p))
			if k := ownerKey(p); replicaSetOwned(p) && !p.CreationTimestamp.Time.Before(since[k]) {
				surged[k]++
			}
		}
	}
	var demand []*corev1.Pod
	for owner, pods := range byOwner {
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		if seated := surged[owner]; seated < len(pods) {
			demand = append(demand, pods[seated:]...)
		}
	}
	for _, p := range pending {
		if _, surge := byOwner[ownerKey(p)]; !surge || !replicaSetOwned(p) {
			demand = append(demand, p)
		}
	}
	for _, p := range largestFirst(demand) {
		take(free, seatRequest(p)) // what does not fit takes nothing
	}
	return free
}

func replicaSetOwned(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "ReplicaSet"
}

func ownerKey(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return p.Namespace + "/" + ref.Kind + "/" + ref.Name
	}
	return p.Namespace + "/Pod/" + p.Name
}

func fits(req, free corev1.ResourceList) bool {
	for name, q := range req {
		left, ok := free[name]
		if !ok {
			// A node that reports no Pod slot count has no limit we know of.
			if q.IsZero() || name == corev1.ResourcePods {
				continue
			}
			return false
		}
		if q.Cmp(left) > 0 {
			return false
		}
	}
	return true
}

// Surge is the AnnotationBridgeSurge document on a Deployment.
type Surge struct {
	// Base is the Deployment's own replica count before the first bridge surge.
	Base int32 `json:"base"`
	// Nodes: interrupted node → the replicas added for its held Pods.
	Nodes map[string]int32 `json:"nodes"`
}

// Total is the replicas the bridge added.
func (s Surge) Total() int32 {
	var t int32
	for _, n := range s.Nodes {
		t += n
	}
	return t
}

// ParseSurge reads the annotation ("" → an empty surge).
func ParseSurge(raw string) (Surge, error) {
	s := Surge{Nodes: map[string]int32{}}
	if raw == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return s, fmt.Errorf("bad %s %q: %w", v1alpha1.AnnotationBridgeSurge, raw, err)
	}
	if s.Nodes == nil {
		s.Nodes = map[string]int32{}
	}
	return s, nil
}

// String is the annotation's value.
func (s Surge) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// SurgeStep is what to do next for one surging Deployment.
type SurgeStep struct {
	// Gone are the nodes whose Pods of the Deployment are all gone (removed by the bridge,
	// evicted after their hold, or killed at the reclaim): their surge is taken back.
	Gone []string
	// Remove is a node whose Pods can go now without the ready count falling below Base: they
	// are given the lowest deletion cost, the surge is taken back and they are deleted.
	Remove     string
	RemovePods []*corev1.Pod
}

// PlanSurge decides the next step of a Deployment's bridge surge from its Pods (read live).
// One node's Pods are removed per step: the next step counts again after they are gone.
func PlanSurge(s Surge, pods []*corev1.Pod) SurgeStep {
	var step SurgeStep
	nodes := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		var on []*corev1.Pod
		var readyElsewhere int32
		for _, p := range pods {
			if p.DeletionTimestamp != nil || nodeutil.IsTerminal(p) {
				continue
			}
			if p.Spec.NodeName == node {
				on = append(on, p)
			} else if nodeutil.PodReady(p) {
				readyElsewhere++
			}
		}
		switch {
		case len(on) == 0:
			step.Gone = append(step.Gone, node)
		case step.Remove == "" && readyElsewhere >= s.Base:
			step.Remove, step.RemovePods = node, on
		}
	}
	return step
}

// AddFlags registers the bridge's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Notice, "bridge-notice", o.Notice, "The Spot interruption notice: a held Pod's graceful shutdown must end within it.")
	fs.DurationVar(&o.Margin, "bridge-margin", o.Margin, "Time kept between the end of a held Pod's hold plus its grace period and the reclaim (notice time + --bridge-notice); a hold ends at notice + notice − grace − margin.")
	fs.BoolVar(&o.Off, "disable-bridge", o.Off, "Hold no evictions and surge nothing before a drain (lifeboats still resume and take the evicted Pods); also set lifeboat-webhook --eviction-pending-hold=0.")
	fs.DurationVar(&o.ResumeTimeout, "bridge-resume-timeout", o.ResumeTimeout, "Release the holds of an interrupted node whose lifeboats are not Ready this long after its notice, so the drain proceeds as without Lifeboat.")
}

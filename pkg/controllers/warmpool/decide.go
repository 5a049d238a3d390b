package warmpool

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Observed is what the converge decision needs: the pool's slot table (WarmPool status), its
// EC2 instances (by tag) and its Nodes (by label), the resolved images and timeouts.
type Observed struct {
	Desired   int
	Slots     []v1alpha1.SlotStatus
	Instances []cloud.Instance
	// Nodes of the pool keyed by instance ID.
	Nodes  map[string]*corev1.Node
	Images []string

	PrePullTimeout time.Duration
	MaxStandbyAge  time.Duration
	// BootTimeout: a launched instance whose Node has not registered by then is replaced.
	BootTimeout time.Duration
	// HibernateRetry: a running instance whose hibernation was requested this long ago is asked
	// again (the request was lost).
	HibernateRetry time.Duration
	// KeepClaimed (afterUse Rehibernate): an instance claimed for an interruption keeps its
	// slot while it serves instead of detaching, so the slot is not refilled; the recycle
	// controller returns it to warming after its handoff and it is hibernated again. If it is
	// terminated instead (fallback), the slot refills as for any vanished instance.
	KeepClaimed bool
	// Claimed are the instance IDs in the resume ledger: claimed for an interruption, their
	// Nodes not labelled yet. They are serving, as active Nodes are.
	Claimed map[string]bool
	Now     time.Time
}

// Launch is a RunInstances for a slot's generation.
type Launch struct{ Slot, Generation int32 }

// Terminate is a TerminateInstances with its reason (for the event).
type Terminate struct {
	InstanceID, Node, Reason string
	// Degraded: the reason is a fault the user should see (Degraded condition, Warning event).
	Degraded bool
}

// Plan is the converge decision. The reconciler writes Slots first (so a launch's generation is
// durable before RunInstances), then acts.
type Plan struct {
	Slots        []v1alpha1.SlotStatus
	SlotsChanged bool
	Launch       []Launch
	// Warm: running instances' Nodes to label warming (with taints and the spec's labels).
	Warm []string
	// PrePull: Nodes that need a pre-pull Pod (images missing).
	PrePull []string
	// Hibernate: instance → Node, images present.
	Hibernate map[string]string
	// Standby: Nodes of hibernated instances to label standby.
	Standby   []string
	Terminate []Terminate

	Warming, StandbyCount, Active, Draining int32
}

func (p *Plan) terminate(t Terminate) {
	for _, have := range p.Terminate {
		if have.InstanceID == t.InstanceID {
			return
		}
	}
	p.Terminate = append(p.Terminate, t)
}

// countServing counts a serving instance's Node as draining or (otherwise) active.
func (p *Plan) countServing(node *corev1.Node) {
	if nodeutil.State(node) == v1alpha1.NodeStateDraining {
		p.Draining++
	} else {
		p.Active++
	}
}

// merge adds a part of the decision (one slot's, or the unslotted instances') to the plan.
// Terminations are deduplicated by instance ID, the first kept.
func (p *Plan) merge(q Plan) {
	p.SlotsChanged = p.SlotsChanged || q.SlotsChanged
	p.Launch = append(p.Launch, q.Launch...)
	p.Warm = append(p.Warm, q.Warm...)
	p.PrePull = append(p.PrePull, q.PrePull...)
	for id, node := range q.Hibernate {
		p.Hibernate[id] = node
	}
	p.Standby = append(p.Standby, q.Standby...)
	for _, t := range q.Terminate {
		p.terminate(t)
	}
	p.Warming += q.Warming
	p.StandbyCount += q.StandbyCount
	p.Active += q.Active
	p.Draining += q.Draining
}

// sortLists puts the plan's lists in a stable order: launches by slot, terminations by
// instance ID, Node names alphabetically.
func (p *Plan) sortLists() {
	sort.Slice(p.Launch, func(i, j int) bool { return p.Launch[i].Slot < p.Launch[j].Slot })
	sort.Slice(p.Terminate, func(i, j int) bool { return p.Terminate[i].InstanceID < p.Terminate[j].InstanceID })
	sort.Strings(p.Warm)
	sort.Strings(p.PrePull)
	sort.Strings(p.Standby)
}

// Decide converges a pool: every slot below Desired holds one instance of its current
// generation on its way to (or in) hibernated standby; everything else tagged with the pool is
// terminated unless its Node is active or draining (the handoff owns those). Decide is pure.
//
// A slot's generation moves on whenever its instance leaves standby service: claimed for an
// interruption (the pool refills at once), failed to hibernate, too old, vanished, or never
// registered. The new generation gets a new EC2 client token, the old instance becomes
// "detached". With KeepClaimed a claimed instance stays in its slot (it is lent, not detached).
func Decide(o Observed) Plan {
	slots, resized := sizeSlots(o.Slots, o.Desired)
	order := slotOrder(slots)
	bySlot := indexInstances(o.Instances)
	plan := Plan{Hibernate: map[string]string{}, SlotsChanged: resized}

	// A standby replacement for age is done one slot at a time, and only while every other
	// slot is in standby, so the pool never dips more than one node for routine upkeep.
	mayReplaceAged := allInStandby(o, slots, bySlot)
	keep := map[string]bool{} // instance IDs with a place
	for _, s := range order {
		st := slots[s]
		step := convergeSlot(o, st, bySlot[slotKey{s, st.Generation}], mayReplaceAged)
		slots[s] = step.Status
		if step.Keep != "" {
			keep[step.Keep] = true
		}
		if step.AgedReplaced {
			mayReplaceAged = false
		}
		plan.merge(step.Plan)
	}
	plan.merge(placeRest(o, keep))

	plan.Slots = make([]v1alpha1.SlotStatus, 0, len(slots))
	for _, s := range order {
		plan.Slots = append(plan.Slots, slots[s])
	}
	plan.sortLists()
	return plan
}

// sizeSlots keys the slot table by slot number and fits it to desired: slots at or beyond
// desired are dropped, missing ones below it added at generation 0. changed reports either.
func sizeSlots(have []v1alpha1.SlotStatus, desired int) (slots map[int32]v1alpha1.SlotStatus, changed bool) {
	slots = map[int32]v1alpha1.SlotStatus{}
	for _, s := range have {
		if int(s.Slot) < desired {
			slots[s.Slot] = s
		} else {
			changed = true
		}
	}
	for s := int32(0); int(s) < desired; s++ {
		if _, ok := slots[s]; !ok {
			slots[s] = v1alpha1.SlotStatus{Slot: s}
			changed = true
		}
	}
	return slots, changed
}

// slotOrder lists the slot numbers in ascending order.
func slotOrder(slots map[int32]v1alpha1.SlotStatus) []int32 {
	order := make([]int32, 0, len(slots))
	for s := range slots {
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	return order
}

// slotKey identifies the instance of one generation of a slot.
type slotKey struct{ slot, gen int32 }

// indexInstances indexes instances by (slot, generation); the live one wins over one shutting
// down, and among equals the lowest instance ID.
func indexInstances(instances []cloud.Instance) map[slotKey]*cloud.Instance {
	bySlot := map[slotKey]*cloud.Instance{}
	for i := range instances {
		in := &instances[i]
		k := slotKey{int32(in.Slot), int32(in.Generation)}
		if have, ok := bySlot[k]; ok {
			if gone(in) && !gone(have) || gone(in) == gone(have) && have.ID < in.ID {
				continue
			}
		}
		bySlot[k] = in
	}
	return bySlot
}

// allInStandby: every slot's current instance is hibernated and has its Node.
func allInStandby(o Observed, slots map[int32]v1alpha1.SlotStatus, bySlot map[slotKey]*cloud.Instance) bool {
	for s := range slots {
		in := bySlot[slotKey{s, slots[s].Generation}]
		if in == nil || !in.Hibernated || nodeOf(o, in) == nil {
			return false
		}
	}
	return true
}

// slotStep is the decision for one slot: its new status, the instance that keeps a place in
// the pool (if any), whether it was the one replacement for age, and its contribution to the
// Plan.
type slotStep struct {
	Status       v1alpha1.SlotStatus
	Keep         string
	AgedReplaced bool
	Plan         Plan
}

// bump moves the slot to a new generation and launches it; the old instance, unless gone or
// serving, is terminated for reason.
func (step *slotStep) bump(o Observed, in *cloud.Instance, reason string, degraded bool) {
	step.Status.Generation++
	step.Status.InstanceID = ""
	step.Plan.SlotsChanged = true
	step.launch()
	if in != nil && !gone(in) && !o.serving(in) {
		step.Plan.terminate(Terminate{InstanceID: in.ID, Node: nodeName(nodeOf(o, in)), Reason: reason, Degraded: degraded})
	}
}

// launch runs the slot's current generation; it counts as warming.
func (step *slotStep) launch() {
	step.Plan.Launch = append(step.Plan.Launch, Launch{Slot: step.Status.Slot, Generation: step.Status.Generation})
	step.Plan.Warming++
}

// convergeSlot decides one slot given the instance of its current generation (nil if none is
// visible). mayReplaceAged: the slot may be replaced for age.
func convergeSlot(o Observed, st v1alpha1.SlotStatus, in *cloud.Instance, mayReplaceAged bool) slotStep {
	step := slotStep{Status: st}
	if in != nil && gone(in) {
		// Terminated behind our back (or by a previous replacement): a new generation.
		step.bump(o, in, "vanished", false)
		return step
	}
	if in == nil {
		// Not launched yet, or launched and not visible yet (EC2 eventual consistency):
		// RunInstances with the same client token is idempotent either way.
		step.launch()
		return step
	}
	if step.Status.InstanceID != in.ID {
		step.Status.InstanceID = in.ID
		step.Plan.SlotsChanged = true
	}
	node := nodeOf(o, in)
	if o.serving(in) {
		if o.KeepClaimed {
			// Lent to an interruption; it comes back to this slot after its handoff.
			step.Keep = in.ID
			step.Plan.countServing(node)
			return step
		}
		// Claimed by an interruption: the instance is detached from the slot, which refills.
		step.bump(o, nil, "", false)
		return step
	}
	step.Keep = in.ID
	switch in.State {
	case cloud.StatePending, cloud.StateRunning:
		step.warm(o, in, node)
	case cloud.StateStopping:
		step.Plan.Warming++
	case cloud.StateStopped:
		step.settleStopped(o, in, node, mayReplaceAged)
	}
	return step
}

// warm advances a pending or running instance towards hibernation: wait for its Node (replace
// it after BootTimeout), label it warming, pre-pull missing images (replace it after
// PrePullTimeout), then hibernate it once its Node is Ready, retrying a lost request.
func (step *slotStep) warm(o Observed, in *cloud.Instance, node *corev1.Node) {
	if node == nil {
		if o.Now.Sub(in.LaunchTime) > o.BootTimeout {
			step.bump(o, in, fmt.Sprintf("its Node did not register within %s", o.BootTimeout), true)
		} else {
			step.Plan.Warming++
		}
		return
	}
	if in.State == cloud.StatePending {
		step.Plan.Warming++
		return
	}
	if nodeutil.State(node) != v1alpha1.NodeStateWarming || !nodeutil.HasTaint(node, v1alpha1.TaintStandby) || node.Annotations[v1alpha1.AnnotationWarmingSince] == "" {
		step.Plan.Warm = append(step.Plan.Warm, node.Name)
	}
	if missing := MissingImages(node, o.Images); len(missing) > 0 {
		since, ok := nodeutil.Time(node.Annotations, v1alpha1.AnnotationWarmingSince)
		if ok && o.Now.Sub(since) > o.PrePullTimeout {
			step.bump(o, in, fmt.Sprintf("images %v not present within the pre-pull timeout %s", missing, o.PrePullTimeout), true)
			return
		}
		step.Plan.Warming++
		if nodeutil.Ready(node) {
			step.Plan.PrePull = append(step.Plan.PrePull, node.Name)
		}
		return
	}
	step.Plan.Warming++
	if !nodeutil.Ready(node) {
		return
	}
	if at, ok := nodeutil.Time(node.Annotations, v1alpha1.AnnotationHibernateRequestedAt); ok && o.Now.Sub(at) < o.HibernateRetry {
		return
	}
	step.Plan.Hibernate = map[string]string{in.ID: node.Name}
}

// settleStopped keeps a hibernated instance in standby (labelling its Node standby), or
// replaces it: stopped without hibernation, Node gone, or older than MaxStandbyAge (only if
// mayReplaceAged).
func (step *slotStep) settleStopped(o Observed, in *cloud.Instance, node *corev1.Node, mayReplaceAged bool) {
	switch {
	case !in.Hibernated:
		step.bump(o, in, "hibernation degraded to a plain stop (memory lost; resuming would be a cold boot)", true)
	case node == nil:
		step.bump(o, in, "its Node is gone", false)
	case o.Now.Sub(in.LaunchTime) > o.MaxStandbyAge && mayReplaceAged:
		step.AgedReplaced = true
		step.bump(o, in, fmt.Sprintf("older than maxStandbyAge %s", o.MaxStandbyAge), false)
	default:
		step.Plan.StandbyCount++
		if nodeutil.State(node) != v1alpha1.NodeStateStandby || !nodeutil.HasTaint(node, v1alpha1.TaintStandby) {
			step.Plan.Standby = append(step.Plan.Standby, node.Name)
		}
	}
}

// placeRest decides everything tagged with the pool that has no slot (not in keep): active and
// draining Nodes belong to the handoff and are counted; the rest has no place and is
// terminated.
func placeRest(o Observed, keep map[string]bool) Plan {
	var plan Plan
	for i := range o.Instances {
		in := &o.Instances[i]
		if keep[in.ID] || gone(in) {
			continue
		}
		node := nodeOf(o, in)
		if o.serving(in) {
			plan.countServing(node)
			continue
		}
		plan.terminate(Terminate{InstanceID: in.ID, Node: nodeName(node), Reason: "no place in the pool (old generation, or slot beyond the size)"})
	}
	return plan
}

func gone(in *cloud.Instance) bool {
	return in.State == cloud.StateShuttingDown || in.State == cloud.StateTerminated
}

func nodeOf(o Observed, in *cloud.Instance) *corev1.Node { return o.Nodes[in.ID] }

func nodeName(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	return n.Name
}

// serving: the instance is claimed for an interruption — in the resume ledger, or its Node
// active — or being handed off.
func (o Observed) serving(in *cloud.Instance) bool {
	if o.Claimed[in.ID] {
		return true
	}
	n := nodeOf(o, in)
	return n != nil && isServing(n)
}

// isServing: the Node was claimed for an interruption (active) or is being handed off.
func isServing(n *corev1.Node) bool {
	s := nodeutil.State(n)
	return s == v1alpha1.NodeStateActive || s == v1alpha1.NodeStateDraining
}

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

// Decide converges a pool: every slot below Desired holds one instance of its current
// generation on its way to (or in) hibernated standby; everything else tagged with the pool is
// terminated unless its Node is active or draining (the handoff owns those). Decide is pure.
//
// A slot's generation moves on whenever its instance leaves standby service: claimed for an
// interruption (the pool refills at once), failed to hibernate, too old, vanished, or never
// registered. The new generation gets a new EC2 client token, the old instance becomes
// "detached". With KeepClaimed a claimed instance stays in its slot (it is lent, not detached).
func Decide(o Observed) Plan {
	plan := Plan{Hibernate: map[string]string{}}
	slots := map[int32]v1alpha1.SlotStatus{}
	for _, s := range o.Slots {
		if int(s.Slot) < o.Desired {
			slots[s.Slot] = s
		} else {
			plan.SlotsChanged = true
		}
	}
	for s := int32(0); int(s) < o.Desired; s++ {
		if _, ok := slots[s]; !ok {
			slots[s] = v1alpha1.SlotStatus{Slot: s}
			plan.SlotsChanged = true
		}
	}

	// Index instances by (slot, generation); the live one wins over one shutting down.
	type key struct{ slot, gen int32 }
	bySlot := map[key]*cloud.Instance{}
	for i := range o.Instances {
		in := &o.Instances[i]
		k := key{int32(in.Slot), int32(in.Generation)}
		if have, ok := bySlot[k]; ok {
			if gone(in) && !gone(have) || gone(in) == gone(have) && have.ID < in.ID {
				continue
			}
		}
		bySlot[k] = in
	}

	// A standby replacement for age is done one slot at a time, and only while every other
	// slot is in standby, so the pool never dips more than one node for routine upkeep.
	allStandby := true
	for s := range slots {
		in := bySlot[key{s, slots[s].Generation}]
		if in == nil || !in.Hibernated || nodeOf(o, in) == nil {
			allStandby = false
		}
	}
	agedReplaced := false

	bump := func(s int32, in *cloud.Instance, reason string, degraded bool) {
		st := slots[s]
		st.Generation++
		st.InstanceID = ""
		slots[s] = st
		plan.SlotsChanged = true
		plan.Launch = append(plan.Launch, Launch{Slot: s, Generation: st.Generation})
		plan.Warming++
		if in != nil && !gone(in) {
			if !o.serving(in) {
				plan.terminate(Terminate{InstanceID: in.ID, Node: nodeName(nodeOf(o, in)), Reason: reason, Degraded: degraded})
			}
		}
	}

	keep := map[string]bool{} // instance IDs with a place
	order := make([]int32, 0, len(slots))
	for s := range slots {
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	for _, s := range order {
		st := slots[s]
		in := bySlot[key{s, st.Generation}]
		if in != nil && gone(in) {
			// Terminated behind our back (or by a previous replacement): a new generation.
			bump(s, in, "vanished", false)
			continue
		}
		if in == nil {
			// Not launched yet, or launched and not visible yet (EC2 eventual consistency):
			// RunInstances with the same client token is idempotent either way.
			plan.Launch = append(plan.Launch, Launch{Slot: s, Generation: st.Generation})
			plan.Warming++
			continue
		}
		if st.InstanceID != in.ID {
			st.InstanceID = in.ID
			slots[s] = st
			plan.SlotsChanged = true
		}
		node := nodeOf(o, in)
		if o.serving(in) {
			if o.KeepClaimed {
				// Lent to an interruption; it comes back to this slot after its handoff.
				keep[in.ID] = true
				if nodeutil.State(node) != v1alpha1.NodeStateDraining {
					plan.Active++
				} else {
					plan.Draining++
				}
				continue
			}
			// Claimed by an interruption: the instance is detached from the slot, which refills.
			bump(s, nil, "", false)
			continue
		}
		keep[in.ID] = true
		age := o.Now.Sub(in.LaunchTime)
		switch in.State {
		case cloud.StatePending, cloud.StateRunning:
			if node == nil {
				if age > o.BootTimeout {
					bump(s, in, fmt.Sprintf("its Node did not register within %s", o.BootTimeout), true)
				} else {
					plan.Warming++
				}
				continue
			}
			if in.State == cloud.StatePending {
				plan.Warming++
				continue
			}
			if nodeutil.State(node) != v1alpha1.NodeStateWarming || !nodeutil.HasTaint(node, v1alpha1.TaintStandby) || node.Annotations[v1alpha1.AnnotationWarmingSince] == "" {
				plan.Warm = append(plan.Warm, node.Name)
			}
			if missing := MissingImages(node, o.Images); len(missing) > 0 {
				since, ok := nodeutil.Time(node.Annotations, v1alpha1.AnnotationWarmingSince)
				if ok && o.Now.Sub(since) > o.PrePullTimeout {
					bump(s, in, fmt.Sprintf("images %v not present within the pre-pull timeout %s", missing, o.PrePullTimeout), true)
					continue
				}
				plan.Warming++
				if nodeutil.Ready(node) {
					plan.PrePull = append(plan.PrePull, node.Name)
				}
				continue
			}
			plan.Warming++
			if !nodeutil.Ready(node) {
				continue
			}
			if at, ok := nodeutil.Time(node.Annotations, v1alpha1.AnnotationHibernateRequestedAt); ok && o.Now.Sub(at) < o.HibernateRetry {
				continue
			}
			plan.Hibernate[in.ID] = node.Name
		case cloud.StateStopping:
			plan.Warming++
		case cloud.StateStopped:
			switch {
			case !in.Hibernated:
				bump(s, in, "hibernation degraded to a plain stop (memory lost; resuming would be a cold boot)", true)
			case node == nil:
				bump(s, in, "its Node is gone", false)
			case age > o.MaxStandbyAge && allStandby && !agedReplaced:
				agedReplaced = true
				bump(s, in, fmt.Sprintf("older than maxStandbyAge %s", o.MaxStandbyAge), false)
			default:
				plan.StandbyCount++
				if nodeutil.State(node) != v1alpha1.NodeStateStandby || !nodeutil.HasTaint(node, v1alpha1.TaintStandby) {
					plan.Standby = append(plan.Standby, node.Name)
				}
			}
		}
	}

	// Everything else tagged with the pool: active/draining Nodes belong to the handoff;
	// the rest has no place and is terminated.
	for i := range o.Instances {
		in := &o.Instances[i]
		if keep[in.ID] || gone(in) {
			continue
		}
		node := nodeOf(o, in)
		if o.serving(in) {
			if nodeutil.State(node) == v1alpha1.NodeStateDraining {
				plan.Draining++
			} else {
				plan.Active++
			}
			continue
		}
		plan.terminate(Terminate{InstanceID: in.ID, Node: nodeName(node), Reason: "no place in the pool (old generation, or slot beyond the size)"})
	}

	plan.Slots = make([]v1alpha1.SlotStatus, 0, len(slots))
	for _, s := range order {
		plan.Slots = append(plan.Slots, slots[s])
	}
	sort.Slice(plan.Launch, func(i, j int) bool { return plan.Launch[i].Slot < plan.Launch[j].Slot })
	sort.Slice(plan.Terminate, func(i, j int) bool { return plan.Terminate[i].InstanceID < plan.Terminate[j].InstanceID })
	sort.Strings(plan.Warm)
	sort.Strings(plan.PrePull)
	sort.Strings(plan.Standby)
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

// Package interruption turns interruption notices (Lifeboat's SQS queue and Karpenter's
// SpotInterrupted events) into at most one resume decision per interrupted Node (a rebalance
// recommendation's pre-resume is decided again, once, when a real interruption of the Node
// follows, counting the lifeboats still active for it): mark the Node
// interrupted, plan which standby nodes hold its protected Pods and the DaemonSet Pods that
// come along (first-fit decreasing), claim them in the API (the durable record) and
// StartInstances. The Nodes of a burst are decided in batches — planned together against the
// shared standby nodes, claimed in parallel, started with one StartInstances call. A second
// reconciler finishes the activation of resumed nodes (standby taint off when Ready) and
// re-drives a resume a crash interrupted.
package interruption

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// Signal is what a notice means for the Node of the instance.
type Signal int

const (
	// Ignore: nothing to do.
	Ignore Signal = iota
	// Interrupt: the instance is going away; protect its Pods.
	Interrupt
	// Rebalance: a rebalance recommendation; acted on only by pools with PreResume.
	Rebalance
)

// Classify maps a parsed message to a Signal. Pool instances are never interrupted (their stop
// events are Lifeboat's own hibernations); the caller filters them by Node label.
func Classify(m interruption.Message) Signal {
	switch m.Kind {
	case interruption.KindSpotInterruption, interruption.KindScheduledChange:
		return Interrupt
	case interruption.KindStateChange:
		switch m.State {
		case "stopping", "stopped", "shutting-down", "terminated":
			return Interrupt
		}
	case interruption.KindRebalanceRecommendation:
		return Rebalance
	}
	return Ignore
}

// Source values of AnnotationInterruptionSource.
const (
	SourceKarpenterEvent = "karpenter-event"
	SourceRebalance      = "sqs/" + string(interruption.KindRebalanceRecommendation)
)

// KarpenterReasonSpotInterrupted is the reason of the Warning event Karpenter's AWS provider
// records on the NodeClaim and the Node when it handles a Spot interruption notice
// (karpenter-provider-aws pkg/controllers/interruption/events).
const KarpenterReasonSpotInterrupted = "SpotInterrupted"

// daemonSetPod is a DaemonSet Pod on an interrupted Node, as the resume plan sees it: its
// DaemonSet will run a Pod of the same requests on a resumed lifeboat node too, if the Pod
// tolerates that node's taints and its node affinity matches the node's labels.
type daemonSetPod struct {
	// DaemonSet is namespace/name of the owning DaemonSet.
	DaemonSet   string
	Requests    sizing.Resources
	Tolerations []corev1.Toleration
	// Affinity is the Pod's required node affinity (and nodeSelector) without the
	// metadata.name term the DaemonSet controller pins every Pod to its own Node with.
	Affinity nodeaffinity.RequiredNodeAffinity
}

// daemonSetOwner returns namespace/name of the Pod's owning DaemonSet, or "".
func daemonSetOwner(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return p.Namespace + "/" + o.Name
		}
	}
	return ""
}

// daemonSetPodOf describes a DaemonSet Pod for the plan; ok is false for other Pods.
func daemonSetPodOf(p *corev1.Pod) (ds daemonSetPod, ok bool) {
	owner := daemonSetOwner(p)
	if owner == "" {
		return ds, false
	}
	unpinned := p.DeepCopy()
	if a := unpinned.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []corev1.NodeSelectorTerm
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			fieldReqs := t.MatchFields[:0:0]
			for _, f := range t.MatchFields {
				if f.Key != "metadata.name" {
					fieldReqs = append(fieldReqs, f)
				}
			}
			t.MatchFields = fieldReqs
			if len(t.MatchExpressions) > 0 || len(t.MatchFields) > 0 {
				terms = append(terms, t)
			}
		}
		if len(terms) == 0 {
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
		} else {
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
		}
	}
	return daemonSetPod{
		DaemonSet:   owner,
		Requests:    sizing.PodResources(nodeutil.PodRequests(p)),
		Tolerations: p.Spec.Tolerations,
		Affinity:    nodeaffinity.GetRequiredNodeAffinity(unpinned),
	}, true
}

// poolNode is a standby node (a resume candidate) or a node already claimed for an
// interrupted Node, as the resume plan sees it.
type poolNode struct {
	Name        string
	Pool        string
	Allocatable sizing.Resources
	// Labels and Taints are the node's once it is active: without the standby taint and the
	// node.kubernetes.io/* conditions a hibernated node carries.
	Labels map[string]string
	Taints []corev1.Taint
	// DaemonSets are the requests of the DaemonSet Pods already bound to the node (scheduled
	// while it warmed; they stay bound while it sleeps), by DaemonSet.
	DaemonSets map[string]sizing.Resources
}

// poolNodeOf describes a pool Node for the plan; daemonSetPods are the non-terminal DaemonSet
// Pods bound to it.
func poolNodeOf(n *corev1.Node, daemonSetPods []corev1.Pod) poolNode {
	pn := poolNode{Name: n.Name, Pool: nodeutil.Pool(n), Allocatable: sizing.FromList(n.Status.Allocatable), Labels: n.Labels}
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintStandby || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			continue
		}
		pn.Taints = append(pn.Taints, t)
	}
	for i := range daemonSetPods {
		p := &daemonSetPods[i]
		owner := daemonSetOwner(p)
		if owner == "" || nodeutil.IsTerminal(p) {
			continue
		}
		if pn.DaemonSets == nil {
			pn.DaemonSets = map[string]sizing.Resources{}
		}
		pn.DaemonSets[owner] = pn.DaemonSets[owner].Add(sizing.PodResources(nodeutil.PodRequests(p)))
	}
	return pn
}

// lands reports whether ds's DaemonSet runs a Pod on n: the Pod tolerates n's NoSchedule and
// NoExecute taints and its required node affinity matches n's labels.
func (ds daemonSetPod) lands(n poolNode) bool {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
	if ok, err := ds.Affinity.Match(node); !ok || err != nil {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Taints, ds.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// freeFor is what n offers the protected Pods of d's Node once resumed: its allocatable minus
// the DaemonSet Pods already bound to it, minus the DaemonSet Pods that will land on it after
// the resume. The latter are approximated by the DaemonSet Pods of the interrupted Node that
// would land on n (its DaemonSets are the cluster's DaemonSets that matter for the Pods being
// moved) and that have no Pod on n yet. DaemonSets running on neither node are not seen; the
// approximation errs that way only for DaemonSets that select pool nodes alone.
func freeFor(d demand, n poolNode) sizing.Resources {
	free := n.Allocatable
	for _, r := range n.DaemonSets {
		free = free.Sub(r)
	}
	seen := map[string]bool{}
	for _, ds := range d.DaemonSets {
		if _, there := n.DaemonSets[ds.DaemonSet]; there || seen[ds.DaemonSet] || !ds.lands(n) {
			continue
		}
		seen[ds.DaemonSet] = true
		free = free.Sub(ds.Requests)
	}
	return free
}

// demand is one interrupted Node's part of a batch: its protected Pods, its DaemonSet Pods,
// the pool nodes already claimed for it (a decision a conflict or a restart interrupted) and
// the pools it may resume from (nil: any).
type demand struct {
	Node       string
	Items      []sizing.Item
	DaemonSets []daemonSetPod
	Claimed    []poolNode
	Pools      map[string]bool
}

func (d demand) total() sizing.Resources {
	var r sizing.Resources
	for _, it := range d.Items {
		r = r.Add(it.Resources)
	}
	return r
}

// planBatch plans the resumes of a batch of interrupted Nodes against one shared set of standby
// candidates: a candidate goes to at most one Node. Nodes are planned largest demand first (then
// by name), each by first-fit decreasing (sizing.PlanResume) over the nodes already claimed for
// it and the candidates still free, every bin sized by freeFor (DaemonSet overhead included).
// Candidates of equal size are tried in the Node's own hash order (candidateOrder), so that
// batches planned concurrently rarely pick the same node. Deterministic: the same input gives
// the same plans.
func planBatch(demands []demand, candidates []poolNode) map[string]sizing.ResumePlan {
	order := append([]demand(nil), demands...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].total(), order[j].total()
		if a.MilliCPU != b.MilliCPU {
			return a.MilliCPU > b.MilliCPU
		}
		if a.Memory != b.Memory {
			return a.Memory > b.Memory
		}
		return order[i].Node < order[j].Node
	})
	taken := map[string]bool{}
	plans := make(map[string]sizing.ResumePlan, len(order))
	for _, d := range order {
		claimed := make([]sizing.Bin, 0, len(d.Claimed))
		for _, n := range d.Claimed {
			claimed = append(claimed, sizing.Bin{Name: n.Name, Free: freeFor(d, n)})
		}
		var free []sizing.Bin
		for _, n := range candidates {
			if taken[n.Name] || d.Pools != nil && !d.Pools[n.Pool] {
				continue
			}
			free = append(free, sizing.Bin{Name: n.Name, Free: freeFor(d, n)})
		}
		sort.SliceStable(free, func(i, j int) bool {
			return candidateOrder(d.Node, free[i].Name) < candidateOrder(d.Node, free[j].Name)
		})
		plan := sizing.PlanResume(d.Items, claimed, free)
		for _, name := range plan.Resume {
			taken[name] = true
		}
		plans[d.Node] = plan
	}
	return plans
}

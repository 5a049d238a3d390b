// Package resumeplan decides which standby nodes to resume for a batch of interrupted Nodes:
// pure functions over what the decision read (the interrupted Nodes' protected and DaemonSet
// Pods, the standby candidates, the nodes already claimed), no API or cloud calls. Nodes are
// planned largest demand first, each by first-fit decreasing (sizing.PlanResume), every bin
// sized with the DaemonSet Pods that will land on it.
package resumeplan

import (
	"hash/fnv"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// DaemonSetPod is a DaemonSet Pod on an interrupted Node, as the resume plan sees it: its
// DaemonSet will run a Pod of the same requests on a resumed lifeboat node too, if the Pod
// tolerates that node's taints and its node affinity matches the node's labels.
type DaemonSetPod struct {
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

// DaemonSetPodOf describes a DaemonSet Pod for the plan; ok is false for other Pods.
func DaemonSetPodOf(p *corev1.Pod) (ds DaemonSetPod, ok bool) {
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
	return DaemonSetPod{
		DaemonSet:   owner,
		Requests:    sizing.PodResources(nodeutil.PodRequests(p)),
		Tolerations: p.Spec.Tolerations,
		Affinity:    nodeaffinity.GetRequiredNodeAffinity(unpinned),
	}, true
}

// PoolNode is a standby node (a resume candidate) or a node already claimed for an
// interrupted Node, as the resume plan sees it.
type PoolNode struct {
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

// PoolNodeOf describes a pool Node for the plan; daemonSetPods are the non-terminal DaemonSet
// Pods bound to it.
func PoolNodeOf(n *corev1.Node, daemonSetPods []corev1.Pod) PoolNode {
	pn := PoolNode{Name: n.Name, Pool: nodeutil.Pool(n), Allocatable: sizing.FromList(n.Status.Allocatable), Labels: n.Labels}
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
func (ds DaemonSetPod) lands(n PoolNode) bool {
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
func freeFor(d Demand, n PoolNode) sizing.Resources {
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

// Demand is one interrupted Node's part of a batch: its protected Pods, its DaemonSet Pods,
// the pool nodes already claimed for it (a decision a conflict or a restart interrupted) and
// the pools it may resume from (nil: any).
type Demand struct {
	Node       string
	Items      []sizing.Item
	DaemonSets []DaemonSetPod
	Claimed    []PoolNode
	Pools      map[string]bool
}

func (d Demand) total() sizing.Resources {
	var r sizing.Resources
	for _, it := range d.Items {
		r = r.Add(it.Resources)
	}
	return r
}

// Plan plans the resumes of a batch of interrupted Nodes against one shared set of standby
// candidates: a candidate goes to at most one Node. Nodes are planned largest demand first (then
// by name), each by first-fit decreasing (sizing.PlanResume) over the nodes already claimed for
// it and the candidates still free, every bin sized by freeFor (DaemonSet overhead included).
// Candidates of equal size are tried in the Node's own hash order (candidateOrder), so that
// batches planned concurrently rarely pick the same node. Deterministic: the same input gives
// the same plans.
func Plan(demands []Demand, candidates []PoolNode) map[string]sizing.ResumePlan {
	order := append([]Demand(nil), demands...)
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

// candidateOrder spreads concurrent decisions (a correlated burst interrupts many Nodes at
// once) over different standby nodes of equal size: each interrupted Node prefers candidates in
// its own hash order, so the decisions rarely race for the same node and conflict.
func candidateOrder(interrupted, candidate string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(interrupted))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(candidate))
	return h.Sum64()
}

// PodsToPlace sorts a Node's Pods: the protected ones need a place on a lifeboat; the DaemonSet
// Pods come along (their DaemonSets run on the lifeboat node too); terminal Pods need nothing.
func PodsToPlace(pods []corev1.Pod) (items []sizing.Item, daemonSets []DaemonSetPod) {
	for i := range pods {
		p := &pods[i]
		if nodeutil.IsTerminal(p) {
			continue
		}
		if ds, ok := DaemonSetPodOf(p); ok {
			daemonSets = append(daemonSets, ds)
			continue
		}
		if p.Labels[v1alpha1.LabelProtected] == "true" {
			items = append(items, sizing.Item{Name: p.Namespace + "/" + p.Name, Resources: sizing.PodResources(nodeutil.PodRequests(p))})
		}
	}
	return items, daemonSets
}

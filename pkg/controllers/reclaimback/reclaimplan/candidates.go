package reclaimplan

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Karpenter's names that reclaim-back reads.
const (
	LabelNodePool          = "karpenter.sh/nodepool"
	AnnotationDoNotDisrupt = v1alpha1.AnnotationKarpenterDoNotDisrupt
)

// Exclusion reasons: why an On-Demand node of Karpenter's is not fallback capacity to move.
const (
	ExcludedNodePoolNotSelected = "NodePoolNotSelected"
	ExcludedNodePoolNoSpot      = "NodePoolDisallowsSpot"
	ExcludedDoNotDisrupt        = "DoNotDisrupt"
	ExcludedCriticalPod         = "CriticalPod"
	ExcludedRequiresOnDemand    = "PodRequiresOnDemand"
	ExcludedNothingPrefersSpot  = "NoPodPrefersSpot"
	ExcludedBeingDeleted        = "BeingDeleted"
)

// NodeInfo is a node with the Pods bound to it.
type NodeInfo struct {
	Node *corev1.Node
	Pods []*corev1.Pod
}

// Candidate is an On-Demand node of Karpenter's looked at by FindFallback.
type Candidate struct {
	Node     string
	NodePool string
	// Pods that prefer Spot and would move (DaemonSet and terminal Pods are not counted).
	Pods int
	// Excluded is empty for fallback capacity to move, else the reason (Excluded* constants);
	// Detail says more, for the Event.
	Excluded, Detail string
}

// FindFallback looks at every On-Demand node that Karpenter launched (label karpenter.sh/nodepool)
// and says which are fallback capacity Spot could take back: its NodePool is selected (selected
// nil: every NodePool) and allows Spot (spotAllowed by NodePool name), neither the node nor any
// of its Pods carries karpenter.sh/do-not-disrupt, no Pod is of the critical tier or requires
// On-Demand, and at least one Pod prefers Spot (the tiers stateless, checkpointed, best-effort,
// or no capacity-type requirement at all). Lifeboat's pool nodes are never Karpenter's and so
// never candidates. The result is sorted: movable first, fewest Pods first (cheapest moves),
// then by name.
func FindFallback(nodes []NodeInfo, spotAllowed map[string]bool, selected map[string]bool) []Candidate {
	var out []Candidate
	for _, ni := range nodes {
		n := ni.Node
		pool := n.Labels[LabelNodePool]
		if pool == "" || n.Labels[v1alpha1.LabelCapacityType] != "on-demand" {
			continue
		}
		c := Candidate{Node: n.Name, NodePool: pool}
		c.Pods, c.Excluded, c.Detail = judge(ni, spotAllowed[pool], selected == nil || selected[pool])
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Excluded == "") != (b.Excluded == "") {
			return a.Excluded == ""
		}
		if a.Pods != b.Pods {
			return a.Pods < b.Pods
		}
		return a.Node < b.Node
	})
	return out
}

func judge(ni NodeInfo, spotAllowed, selected bool) (pods int, excluded, detail string) {
	n := ni.Node
	switch {
	case !n.DeletionTimestamp.IsZero():
		return 0, ExcludedBeingDeleted, "the node is being deleted"
	case !selected:
		return 0, ExcludedNodePoolNotSelected, fmt.Sprintf("NodePool %s is not selected for reclaim-back", n.Labels[LabelNodePool])
	case !spotAllowed:
		return 0, ExcludedNodePoolNoSpot, fmt.Sprintf("NodePool %s does not allow Spot", n.Labels[LabelNodePool])
	case n.Annotations[AnnotationDoNotDisrupt] == "true":
		return 0, ExcludedDoNotDisrupt, "the node is annotated " + AnnotationDoNotDisrupt
	}
	for _, p := range ni.Pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || isDaemonSetPod(p) {
			continue
		}
		switch {
		case p.Annotations[AnnotationDoNotDisrupt] == "true":
			return 0, ExcludedDoNotDisrupt, fmt.Sprintf("Pod %s/%s is annotated %s", p.Namespace, p.Name, AnnotationDoNotDisrupt)
		case p.Labels[v1alpha1.LabelTier] == string(v1alpha1.TierCritical):
			return 0, ExcludedCriticalPod, fmt.Sprintf("Pod %s/%s is of the critical tier (On-Demand only)", p.Namespace, p.Name)
		case requiresOnDemand(p):
			return 0, ExcludedRequiresOnDemand, fmt.Sprintf("Pod %s/%s requires %s on-demand", p.Namespace, p.Name, v1alpha1.LabelCapacityType)
		}
		pods++
	}
	if pods == 0 {
		return 0, ExcludedNothingPrefersSpot, "no Pod on the node would move to Spot"
	}
	return pods, "", ""
}

func isDaemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}

// requiresOnDemand: a nodeSelector or every required node-affinity term pins the Pod to a
// capacity type other than Spot. Preferences do not count: they are what Spot satisfies.
func requiresOnDemand(p *corev1.Pod) bool {
	if v, ok := p.Spec.NodeSelector[v1alpha1.LabelCapacityType]; ok {
		return v != "spot"
	}
	aff := p.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms { // terms are ORed: one that admits Spot is enough
		if termAdmitsSpot(t) {
			return false
		}
	}
	return true
}

func termAdmitsSpot(t corev1.NodeSelectorTerm) bool {
	for _, r := range t.MatchExpressions {
		if r.Key != v1alpha1.LabelCapacityType {
			continue
		}
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			if !slices.Contains(r.Values, "spot") {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if slices.Contains(r.Values, "spot") {
				return false
			}
		case corev1.NodeSelectorOpDoesNotExist:
			return false
		}
	}
	return true
}

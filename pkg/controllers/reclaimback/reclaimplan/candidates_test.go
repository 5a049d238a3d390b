package reclaimplan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func karpenterNode(name, pool, capacity string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelNodePool: pool, v1alpha1.LabelCapacityType: capacity}}}
}

func podOf(name, tier, ownerKind string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{}}}
	if tier != "" {
		p.Labels[v1alpha1.LabelTier] = tier
	}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "x", UID: "x", Controller: ptr.To(true)}}
	}
	return p
}

func requiring(p *corev1.Pod, terms ...corev1.NodeSelectorTerm) *corev1.Pod {
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	return p
}

func capacityTerm(op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelCapacityType, Operator: op, Values: values}}}
}

func TestFindFallback(t *testing.T) {
	spotOK := map[string]bool{"default": true, "other": true}
	withAnnotation := func(n *corev1.Node) *corev1.Node {
		n.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"}
		return n
	}
	deleting := karpenterNode("od-deleting", "default", "on-demand")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"karpenter.sh/termination"}
	dnd := podOf("pinned", "stateless", "ReplicaSet")
	dnd.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"}
	selectorOD := podOf("selector", "", "ReplicaSet")
	selectorOD.Spec.NodeSelector = map[string]string{v1alpha1.LabelCapacityType: "on-demand"}
	done := podOf("done", "best-effort", "Job")
	done.Status.Phase = corev1.PodSucceeded
	// best-effort in Lifeboat's shape: required Spot OR a pool node — still admits Spot.
	bestEffort := requiring(podOf("be", "best-effort", "Job"), capacityTerm(corev1.NodeSelectorOpIn, "spot"),
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelPool, Operator: corev1.NodeSelectorOpExists}}})

	nodes := []NodeInfo{
		{Node: karpenterNode("od-two", "default", "on-demand"), Pods: []*corev1.Pod{podOf("a", "stateless", "ReplicaSet"), podOf("b", "", "ReplicaSet"), podOf("ds", "", "DaemonSet")}},
		{Node: karpenterNode("od-one", "default", "on-demand"), Pods: []*corev1.Pod{podOf("c", "checkpointed", "StatefulSet"), done}},
		{Node: karpenterNode("od-be", "other", "on-demand"), Pods: []*corev1.Pod{bestEffort}},
		{Node: karpenterNode("spot-1", "default", "spot"), Pods: []*corev1.Pod{podOf("d", "stateless", "ReplicaSet")}},
		{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lifeboat-1", Labels: map[string]string{v1alpha1.LabelPool: "default", v1alpha1.LabelCapacityType: "on-demand"}}}},
		{Node: karpenterNode("od-nospot", "od-only", "on-demand"), Pods: []*corev1.Pod{podOf("e", "", "ReplicaSet")}},
		{Node: karpenterNode("od-critical", "default", "on-demand"), Pods: []*corev1.Pod{podOf("f", "stateless", "ReplicaSet"), podOf("g", "critical", "ReplicaSet")}},
		{Node: withAnnotation(karpenterNode("od-dnd-node", "default", "on-demand")), Pods: []*corev1.Pod{podOf("h", "", "ReplicaSet")}},
		{Node: karpenterNode("od-dnd-pod", "default", "on-demand"), Pods: []*corev1.Pod{dnd}},
		{Node: karpenterNode("od-selector", "default", "on-demand"), Pods: []*corev1.Pod{selectorOD}},
		{Node: karpenterNode("od-affinity", "default", "on-demand"), Pods: []*corev1.Pod{requiring(podOf("i", "", "ReplicaSet"), capacityTerm(corev1.NodeSelectorOpIn, "on-demand"))}},
		{Node: karpenterNode("od-notin", "default", "on-demand"), Pods: []*corev1.Pod{requiring(podOf("j", "", "ReplicaSet"), capacityTerm(corev1.NodeSelectorOpNotIn, "spot"))}},
		{Node: karpenterNode("od-daemons", "default", "on-demand"), Pods: []*corev1.Pod{podOf("k", "", "DaemonSet")}},
		{Node: deleting, Pods: []*corev1.Pod{podOf("l", "", "ReplicaSet")}},
	}
	want := []Candidate{
		{Node: "od-be", NodePool: "other", Pods: 1},
		{Node: "od-one", NodePool: "default", Pods: 1},
		{Node: "od-two", NodePool: "default", Pods: 2},
		{Node: "od-affinity", NodePool: "default", Excluded: ExcludedRequiresOnDemand},
		{Node: "od-critical", NodePool: "default", Excluded: ExcludedCriticalPod},
		{Node: "od-daemons", NodePool: "default", Excluded: ExcludedNothingPrefersSpot},
		{Node: "od-deleting", NodePool: "default", Excluded: ExcludedBeingDeleted},
		{Node: "od-dnd-node", NodePool: "default", Excluded: ExcludedDoNotDisrupt},
		{Node: "od-dnd-pod", NodePool: "default", Excluded: ExcludedDoNotDisrupt},
		{Node: "od-nospot", NodePool: "od-only", Excluded: ExcludedNodePoolNoSpot},
		{Node: "od-notin", NodePool: "default", Excluded: ExcludedRequiresOnDemand},
		{Node: "od-selector", NodePool: "default", Excluded: ExcludedRequiresOnDemand},
	}
	got := FindFallback(nodes, spotOK, nil)
	if len(got) != len(want) {
		t.Fatalf("got %d candidates %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		g := got[i]
		if g.Node != want[i].Node || g.NodePool != want[i].NodePool || g.Pods != want[i].Pods || g.Excluded != want[i].Excluded {
			t.Errorf("candidate %d = %+v, want %+v", i, g, want[i])
		}
		if (g.Excluded == "") != (g.Detail == "") {
			t.Errorf("%s: excluded %q with detail %q: a reason needs its detail", g.Node, g.Excluded, g.Detail)
		}
	}

	only := FindFallback(nodes, spotOK, map[string]bool{"other": true})
	movable := 0
	for _, c := range only {
		if c.Excluded == "" {
			movable++
			if c.NodePool != "other" {
				t.Errorf("%s of NodePool %s movable, but only other is selected", c.Node, c.NodePool)
			}
		} else if c.NodePool != "other" && c.Excluded != ExcludedNodePoolNotSelected && c.Excluded != ExcludedBeingDeleted {
			t.Errorf("%s: excluded %s, want %s", c.Node, c.Excluded, ExcludedNodePoolNotSelected)
		}
	}
	if movable != 1 {
		t.Errorf("%d movable with only NodePool other selected, want 1 (od-be)", movable)
	}
}

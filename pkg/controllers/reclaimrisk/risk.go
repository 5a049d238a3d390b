// Package reclaimrisk knows which ordinary Spot nodes a reclaim under way is likely to take
// next, and marks them (LabelReclaimAtRisk) so that the room Lifeboat keeps for moved Pods —
// the handoff's seats — is not made there.
//
// A Spot reclaim takes many nodes of one capacity pool within minutes (docs/FACTS.md), so a
// node that ran in a pool being reclaimed before that pool's first notice is at risk; a node
// launched into the pool since is capacity EC2 granted during the reclaim (Karpenter's
// replacements usually go to the same, cheapest pool), no likelier to go than any other. The
// bridge moves a Pod straight to its seat only where it will stay, and a seat that took free
// room on an at-risk node would be made again when that node's own notice came.
package reclaimrisk

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// Interrupted says whether n is an ordinary node under an interruption notice: the
// interruption controller has written its resume decision. Pure.
func Interrupted(n *corev1.Node) bool {
	_, ok := n.Annotations[v1alpha1.AnnotationResumeDecision]
	return ok && nodeutil.Pool(n) == ""
}

// ReclaimedPools maps the capacity pool (telemetry.PoolKey) of each interrupted node to the
// earliest notice among that pool's interrupted nodes (policy.DrainStart; now when a node shows
// none yet). Pure.
func ReclaimedPools(interrupted []*corev1.Node, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range interrupted {
		at, ok := policy.DrainStart(n)
		if !ok {
			at = now
		}
		key := telemetry.PoolKeyFromLabels(n.Labels)
		if first, seen := out[key]; !seen || at.Before(first) {
			out[key] = at
		}
	}
	return out
}

// AtRisk says whether node n is likely the next of a reclaim (reclaimed: ReclaimedPools): it
// is of a capacity pool being reclaimed and ran there before the pool's first notice. Pure.
func AtRisk(n *corev1.Node, reclaimed map[string]time.Time) bool {
	first, ok := reclaimed[telemetry.PoolKeyFromLabels(n.Labels)]
	return ok && n.CreationTimestamp.Time.Before(first)
}

// Marks is what the at-risk label of each node should change to: the nodes to label and the
// nodes to unlabel.
type Marks struct {
	Label, Unlabel []*corev1.Node
}

// Plan decides the at-risk labels of every node (nodes: all of the cluster's): an ordinary,
// not interrupted, not deleted node that is AtRisk carries LabelReclaimAtRisk, every other
// node does not. The label goes with the pool's last interrupted node. Pure.
func Plan(nodes []*corev1.Node, now time.Time) Marks {
	var interrupted []*corev1.Node
	for _, n := range nodes {
		if Interrupted(n) {
			interrupted = append(interrupted, n)
		}
	}
	reclaimed := ReclaimedPools(interrupted, now)
	var m Marks
	for _, n := range nodes {
		want := len(reclaimed) > 0 && nodeutil.Pool(n) == "" && !Interrupted(n) && n.DeletionTimestamp == nil && AtRisk(n, reclaimed)
		_, has := n.Labels[v1alpha1.LabelReclaimAtRisk]
		switch {
		case want && !has:
			m.Label = append(m.Label, n)
		case !want && has && n.DeletionTimestamp == nil:
			m.Unlabel = append(m.Unlabel, n)
		}
	}
	return m
}

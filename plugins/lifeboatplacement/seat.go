package lifeboatplacement

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Seats. When a protected Pod that cannot surge (a StatefulSet's) moves off a lifeboat — or
// straight off an interrupted node — the controller has kept room for it on ordinary capacity
// beforehand: a seat, a placeholder Pod that also had that node pull the Pod's images. The seat
// is deleted at the eviction, and the webhook labels the re-created Pod with the seat's host
// (lifeboat.dev/seat-host, podrole.SeatHost). Such a Pod is down until it runs again, so it
// must land in that room: on any other node it pulls its images first (measured, compressed
// simulation: 9–11 s down instead of 3 s). A preferred node affinity does not ensure it — the
// default scores (topology spread, least allocated) favour an emptier node, such as one
// Karpenter just launched — so PreFilter narrows its cycle to the seat's node while that node
// can take it, as it narrows other protected Pods to active lifeboat nodes; PostFilter's
// fallback widens a narrowed cycle that finds it infeasible after all. A Pod with a seat is
// never steered to lifeboat nodes (podrole.RidesLifeboats): a lifeboat would have to hand it
// off again.

// seatNodeThatCanTake returns the name of the node whose kubernetes.io/hostname is host (its
// name, if it has no such label) when it can take the Pod, or "".
func (pl *LifeboatPlacement) seatNodeThatCanTake(logger klog.Logger, needs *podNeeds, host string) string {
	nodeInfos := pl.handle.SnapshotSharedLister().NodeInfos()
	ni, err := nodeInfos.Get(host) // a node's name is usually its hostname
	if err != nil || ni.Node() == nil || hostname(ni.Node()) != host {
		ni = nil
		all, err := nodeInfos.List()
		if err != nil {
			return ""
		}
		for _, candidate := range all {
			if n := candidate.Node(); n != nil && hostname(n) == host {
				ni = candidate
				break
			}
		}
	}
	if ni == nil || !pl.canTakeSeated(logger, needs, ni) {
		return ""
	}
	return ni.Node().Name
}

func hostname(n *v1.Node) string {
	if h := n.Labels[v1.LabelHostname]; h != "" {
		return h
	}
	return n.Name
}

// canTakeSeated reports whether the node, where a seat kept room, can take the Pod: an
// ordinary node (not of a warm pool), not cordoned nor under interruption, whose
// NoSchedule/NoExecute taints the Pod tolerates, that matches the Pod's required affinity and
// nodeSelector and has its requests free.
func (pl *LifeboatPlacement) canTakeSeated(logger klog.Logger, needs *podNeeds, ni fwk.NodeInfo) bool {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable || IsPoolNode(node) || pl.isInterrupted(node) {
		return false
	}
	return pl.passesTaints(logger, needs.pod, node.Spec.Taints, false) && matchesAndFits(needs, ni)
}

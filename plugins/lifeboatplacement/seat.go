package lifeboatplacement

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/podrole"
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

// The seat's release. The controller deletes a seat once the Pod it kept room for is gone from
// where it was — the replacement is created at that same moment — so the scheduler's cache may
// still hold the seat when the replacement is scheduled: its node then looks full, and the Pod
// goes elsewhere and pulls its images again while it is down (compressed simulation, seed 11:
// 10 s down instead of 3 s). PreEnqueue therefore holds a Pod with a seat host back while a
// seat made for it is still bound to that host; the seat's deletion, seen by the scheduler's
// cache first, requeues it at once (isSchedulableAfterSeatDelete: no back-off for a Pod that
// was never attempted). A controller that never deletes the seat costs at most the plugin's
// seatReleaseWait (args.seatReleaseWait, default 5 s), counted from the Pod's creation; then
// the Pod is scheduled anyway (its seat's node looks full, and it goes elsewhere).

// ErrReasonSeatNotReleased is PreEnqueue's reason for a Pod whose seat still holds its room.
const ErrReasonSeatNotReleased = "the pod's seat still holds its room on the seat's node; waiting for Lifeboat to release it"

// seatForIndex indexes seats (label lifeboat.dev/seat) by the Pod they keep room for
// (annotation lifeboat.dev/seat-for, "namespace/name") on the scheduler's Pod informer.
const seatForIndex = "lifeboat.dev/seat-for"

func seatFor(obj interface{}) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Labels[v1alpha1.LabelSeat] != "true" {
		return nil, nil
	}
	if key := p.Annotations[v1alpha1.AnnotationSeatFor]; key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// SeatHeld says whether a Pod with a seat host must wait for its seat's release, and until
// when: one of seats (those made for it) is still bound to a node whose hostname is host
// (hostOf maps a node name to its kubernetes.io/hostname, "" when unknown), and the Pod was
// created less than wait before now. Pure.
func SeatHeld(pod *v1.Pod, host string, seats []*v1.Pod, hostOf func(node string) string, wait time.Duration, now time.Time) (time.Time, bool) {
	until := pod.CreationTimestamp.Add(wait)
	if host == "" || !now.Before(until) {
		return time.Time{}, false
	}
	for _, s := range seats {
		if s.Spec.NodeName != "" && hostOf(s.Spec.NodeName) == host {
			return until, true
		}
	}
	return time.Time{}, false
}

// PreEnqueue holds back a Pod whose seat still holds its room (SeatHeld), and schedules its
// requeue for when the wait ends.
func (pl *LifeboatPlacement) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	host := podrole.SeatHost(pod)
	if host == "" {
		return nil
	}
	objs, err := pl.seats.ByIndex(seatForIndex, pod.Namespace+"/"+pod.Name)
	if err != nil || len(objs) == 0 {
		return nil
	}
	seats := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*v1.Pod); ok {
			seats = append(seats, s)
		}
	}
	hostOf := func(name string) string {
		n, err := pl.nodes.Get(name)
		if err != nil {
			return ""
		}
		return hostname(n)
	}
	until, held := SeatHeld(pod, host, seats, hostOf, pl.seatReleaseWait, pl.clock.Now())
	if !held {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(3).Info("pod waits for its seat's release", "pod", klog.KObj(pod), "seatHost", host, "until", until)
	if pl.markSeatWait(pod.UID, until) {
		pl.afterFunc(until.Sub(pl.clock.Now()), func() {
			pl.handle.Activate(logger, map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
		})
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonSeatNotReleased)
}

// markSeatWait records that the Pod's requeue at until is scheduled; false when it was already.
func (pl *LifeboatPlacement) markSeatWait(uid types.UID, until time.Time) bool {
	pl.seatWaitMu.Lock()
	defer pl.seatWaitMu.Unlock()
	now := pl.clock.Now()
	for u, t := range pl.seatWaits {
		if now.After(t) {
			delete(pl.seatWaits, u)
		}
	}
	if _, ok := pl.seatWaits[uid]; ok {
		return false
	}
	pl.seatWaits[uid] = until
	return true
}

// isSchedulableAfterSeatDelete requeues a Pod when the seat made for it is deleted.
func (pl *LifeboatPlacement) isSchedulableAfterSeatDelete(logger klog.Logger, pod *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
	seat, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.QueueSkip, nil
	}
	keys, _ := seatFor(seat)
	if len(keys) == 1 && keys[0] == pod.Namespace+"/"+pod.Name {
		logger.V(5).Info("the pod's seat was released", "pod", klog.KObj(pod), "seat", klog.KObj(seat))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

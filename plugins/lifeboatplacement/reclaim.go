package lifeboatplacement

import (
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	taintutil "k8s.io/kubernetes/pkg/util/taints"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/cyclestate"
)

// A Spot reclaim takes many nodes of one capacity pool within minutes (docs/FACTS.md). While one
// node of a pool has its notice, the pool's other nodes are the likeliest to get the next
// ones: a protected Pod placed there now is evicted again within the burst, and every extra
// eviction of a Job's Pod doubles the Job's re-creation back-off. So while a lifeboat node
// that can take the Pod is resuming — a few seconds from Ready, images cached — the Pod waits
// for it instead of landing on a node of a pool being reclaimed (measured in the demo: a Job's
// replacement that landed on a node noticed 34 s later cost the Job a fifth failure and 160 s
// of back-off). The wait is bounded by reclaimedPoolWait after the lifeboat's start request;
// with no lifeboat resuming nothing waits, and nodes of other pools are never held back.

// ErrReasonPoolBeingReclaimed is the Filter reason for a node of a Spot capacity pool under
// reclaim while a lifeboat node for the Pod is resuming.
const ErrReasonPoolBeingReclaimed = "node(s) are in a Spot capacity pool being reclaimed; the pod waits for a resuming lifeboat node"

// reclaimWaitStateKey marks, in the CycleState, a cycle in which the Pod waits for a resuming
// lifeboat instead of nodes of the pools being reclaimed.
const reclaimWaitStateKey fwk.StateKey = "Reclaim" + Name

// reclaimWait is the cycle's decision: which pools to keep the Pod off, and until when.
type reclaimWait struct {
	pools sets.Set[string]
	until time.Time
}

// Clone shares the state: it is never modified after PreFilter.
func (s *reclaimWait) Clone() fwk.StateData { return s }

// reclaimedPools indexes the Spot nodes that carry Lifeboat's interruption taint by capacity
// pool, kept by a handler on the scheduler's shared Node informer.
type reclaimedPools struct {
	mu sync.RWMutex
	// nodes maps an interrupted Spot node's name to its pool key.
	nodes map[string]string
}

func newReclaimedPools() *reclaimedPools { return &reclaimedPools{nodes: map[string]string{}} }

// underReclaim reports the pool key of a Spot node with the interruption taint.
func underReclaim(node *v1.Node) (string, bool) {
	if node.Labels[v1alpha1.LabelCapacityType] != policy.CapacitySpot || !taintutil.TaintKeyExists(node.Spec.Taints, v1alpha1.TaintInterrupted) {
		return "", false
	}
	return telemetry.PoolKeyFromLabels(node.Labels), true
}

func (x *reclaimedPools) set(node *v1.Node) {
	key, ok := underReclaim(node)
	x.mu.Lock()
	defer x.mu.Unlock()
	if ok {
		x.nodes[node.Name] = key
	} else {
		delete(x.nodes, node.Name)
	}
}

func (x *reclaimedPools) delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.nodes, name)
}

// pools returns the keys of the pools with at least one interrupted node, or nil.
func (x *reclaimedPools) pools() sets.Set[string] {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.nodes) == 0 {
		return nil
	}
	out := sets.New[string]()
	for _, key := range x.nodes {
		out.Insert(key)
	}
	return out
}

// eventHandler keeps the index in step with the Node informer.
func (x *reclaimedPools) eventHandler() cache.ResourceEventHandler {
	return nodeEventHandler(x.set, x.delete)
}

// nodeEventHandler calls set on adds and updates, remove on deletes.
func nodeEventHandler(set func(*v1.Node), remove func(name string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if node, ok := obj.(*v1.Node); ok {
				set(node)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if node, ok := obj.(*v1.Node); ok {
				set(node)
			}
		},
		DeleteFunc: func(obj interface{}) {
			switch t := obj.(type) {
			case *v1.Node:
				remove(t.Name)
			case cache.DeletedFinalStateUnknown:
				if node, ok := t.Obj.(*v1.Node); ok {
					remove(node.Name)
				}
			}
		},
	}
}

// resumingTaints are the taints a resuming lifeboat node carries until it is Ready for Pods:
// the node lifecycle controller's while the kubelet is down, Lifeboat's standby taint until the
// activation controller sees it Ready.
var resumingTaints = sets.New(v1.TaintNodeNotReady, v1.TaintNodeUnreachable, v1alpha1.TaintStandby)

// waitSeats books, per resuming lifeboat node, the requests of the Pods waiting for it, so
// that no more Pods wait than the lifeboats can take: in the scale simulation (20 nodes
// reclaimed at once, six lifeboats) every displaced protected Pod fitted an empty lifeboat on
// its own, so all ~220 waited, none used the free room of the pool's other nodes, and
// Karpenter launched nodes for all of them — twice baseline's, which slowed the whole drain.
// A booking ends with the wait, or when the Pod is booked again (its next cycle).
type waitSeats struct {
	mu       sync.Mutex
	bookings map[types.UID]seatBooking
}

type seatBooking struct {
	node     string
	requests *framework.Resource
	until    time.Time
}

func newWaitSeats() *waitSeats { return &waitSeats{bookings: map[types.UID]seatBooking{}} }

// book reserves requests on the first of nodes (in order) whose free room, less the other
// Pods' live bookings, fits them; it returns the node, or "" when none does (the Pod does not
// wait). free reports a node's free room before bookings.
func (w *waitSeats) book(uid types.UID, requests *framework.Resource, nodes []string, free func(string) *framework.Resource, until, now time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.bookings, uid)
	booked := map[string]*framework.Resource{}
	for id, b := range w.bookings {
		if !now.Before(b.until) {
			delete(w.bookings, id)
			continue
		}
		if booked[b.node] == nil {
			booked[b.node] = &framework.Resource{}
		}
		booked[b.node].MilliCPU += b.requests.MilliCPU
		booked[b.node].Memory += b.requests.Memory
	}
	for _, n := range nodes {
		f := free(n)
		if f == nil {
			continue
		}
		if b := booked[n]; b != nil {
			f.MilliCPU -= b.MilliCPU
			f.Memory -= b.Memory
		}
		if requests.MilliCPU <= f.MilliCPU && requests.Memory <= f.Memory {
			w.bookings[uid] = seatBooking{node: n, requests: requests, until: until}
			return n
		}
	}
	return ""
}

// release drops the Pod's booking (bound or deleted).
func (w *waitSeats) release(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.bookings, uid)
}

func freeRoom(ni fwk.NodeInfo) *framework.Resource {
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	return &framework.Resource{MilliCPU: alloc.GetMilliCPU() - used.GetMilliCPU(), Memory: alloc.GetMemory() - used.GetMemory()}
}

// resumingUntil returns how long the Pod may wait for the active lifeboat node: the node was
// asked to start less than wait ago, has not been seen Ready since, and will be able to take
// the Pod once it is (its taints but the resuming ones, the Pod's required affinity, free
// allocatable). ok is false when the node is no such lifeboat.
func (pl *LifeboatPlacement) resumingUntil(logger klog.Logger, needs *podNeeds, ni fwk.NodeInfo, now time.Time) (time.Time, bool) {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable || !IsActivePoolNode(node) || pl.isInterrupted(node) ||
		node.Annotations[v1alpha1.AnnotationResumedReadyAt] != "" {
		return time.Time{}, false
	}
	requested, err := time.Parse(time.RFC3339Nano, node.Annotations[v1alpha1.AnnotationStartRequestedAt])
	if err != nil {
		return time.Time{}, false
	}
	until := requested.Add(pl.reclaimedPoolWait)
	if !now.Before(until) {
		return time.Time{}, false
	}
	var taints []v1.Taint
	for _, t := range node.Spec.Taints {
		if !resumingTaints.Has(t.Key) {
			taints = append(taints, t)
		}
	}
	if !pl.protectedPodPassesTaints(logger, needs.pod, taints) {
		return time.Time{}, false
	}
	if ok, err := needs.affinity.Match(node); err != nil || !ok {
		return time.Time{}, false
	}
	return until, fitsRequests(needs.requests, ni)
}

// decideReclaimWait returns the cycle's wait, or nil: the pools being reclaimed when a
// lifeboat node that will take the Pod is resuming, until the latest such node's wait ends.
func (pl *LifeboatPlacement) decideReclaimWait(logger klog.Logger, needs *podNeeds) *reclaimWait {
	if pl.reclaimedPoolWait <= 0 {
		return nil
	}
	pools := pl.reclaimed.pools()
	if len(pools) == 0 {
		return nil
	}
	now := pl.clock.Now()
	nodeInfos := pl.handle.SnapshotSharedLister().NodeInfos()
	var until time.Time
	var candidates []string
	pl.poolNodes.each(func(name string) {
		ni, err := nodeInfos.Get(name)
		if err != nil {
			return
		}
		if u, ok := pl.resumingUntil(logger, needs, ni, now); ok {
			candidates = append(candidates, name)
			if u.After(until) {
				until = u
			}
		}
	})
	if until.IsZero() {
		pl.waitSeats.release(needs.pod.UID)
		return nil
	}
	sort.Strings(candidates)
	free := func(name string) *framework.Resource {
		ni, err := nodeInfos.Get(name)
		if err != nil {
			return nil
		}
		return freeRoom(ni)
	}
	if pl.waitSeats.book(needs.pod.UID, needs.requests, candidates, free, until, now) == "" {
		logger.V(4).Info("the resuming lifeboats are fully booked by waiting Pods; not waiting", "pod", klog.KObj(needs.pod))
		return nil
	}
	return &reclaimWait{pools: pools, until: until}
}

// keptOff reports whether the cycle keeps the Pod off the node: it waits for a lifeboat, and
// the node is an ordinary node of a pool being reclaimed.
func keptOff(state fwk.CycleState, node *v1.Node) bool {
	if node.Labels[v1alpha1.LabelCapacityType] != policy.CapacitySpot || IsPoolNode(node) {
		return false
	}
	w, status := cyclestate.Read[*reclaimWait](state, reclaimWaitStateKey, Name)
	return status == nil && w.pools.Has(telemetry.PoolKeyFromLabels(node.Labels))
}

// retryAfterWait requeues the Pod when its wait ends, in case the lifeboat never turns Ready
// (a resume that failed): then the pools being reclaimed are candidates again.
func (pl *LifeboatPlacement) retryAfterWait(logger klog.Logger, state fwk.CycleState, pod *v1.Pod) bool {
	w, status := cyclestate.Read[*reclaimWait](state, reclaimWaitStateKey, Name)
	if status != nil {
		return false
	}
	delay := w.until.Sub(pl.clock.Now())
	logger.V(3).Info("pod waits for a resuming lifeboat node instead of a pool being reclaimed", "pod", klog.KObj(pod), "pools", sets.List(w.pools), "for", delay)
	pl.afterFunc(max(delay, 0), func() {
		pl.handle.Activate(logger, map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
	})
	return true
}

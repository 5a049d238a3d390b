// Package lifeboatplacement is the LifeboatPlacement scheduler plugin: protected Pods go to
// active lifeboat nodes first, and nobody goes to a node under interruption or to a pool node
// that is not active (warming, standby, draining).
//
// PreFilter: for Pods labelled lifeboat.dev/protected=true, narrow the cycle
// (PreFilterResult) to the active lifeboat nodes that can take the Pod, when there is one; so
// protected Pods find them under the scheduler's stock node sampling. A protected Pod with a
// seat (lifeboat.dev/seat-host) is narrowed to its seat's node instead, when that can take it. PostFilter: if such a
// narrowed cycle finds no feasible node after all, retry the Pod at once on all nodes.
// Filter: reject nodes carrying an interruption taint (Karpenter's karpenter.sh/disrupted,
// Lifeboat's lifeboat.dev/interrupted, by default) and pool nodes (label lifeboat.dev/pool)
// whose lifeboat.dev/state is not active — after handoff starts (draining) a node is no target.
// Score: for protected Pods, active pool nodes score MaxNodeScore and other nodes 0; configure
// the plugin's weight so this outweighs the other scores (the tie-breaker when PreFilter did
// not narrow, e.g. a node turned active in between).
package lifeboatplacement

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/util"
	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/validation"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/podrole"
)

const (
	// Name is the plugin's name in the registry and in configurations.
	Name = "LifeboatPlacement"
	// ErrReasonInterrupted is the Filter reason for nodes under interruption.
	ErrReasonInterrupted = "node(s) are being interrupted or disrupted"
	// ErrReasonPoolNodeNotActive is the Filter reason for pool nodes that are not active.
	ErrReasonPoolNodeNotActive = "node(s) are lifeboat nodes that are not active"
	// ErrReasonRetryAllNodes is the PostFilter reason when a cycle narrowed to active lifeboat
	// nodes found none feasible; the Pod is retried on all nodes.
	ErrReasonRetryAllNodes = "no active lifeboat node can take the pod; retrying on all nodes"
	// ErrReasonSeatRetryAllNodes is the PostFilter reason when a cycle narrowed to the node of
	// the Pod's seat found it infeasible; the Pod is retried on all nodes.
	ErrReasonSeatRetryAllNodes = "the node of the pod's seat cannot take it; retrying on all nodes"
	// ErrReasonSurgeNoPreemption is the PostFilter reason for a Pod of a handoff surge: it
	// waits for capacity (Karpenter provisions for it) instead of preempting.
	ErrReasonSurgeNoPreemption = "pod of a lifeboat handoff surge: its twin on the lifeboat node still serves, so it waits for new capacity instead of preempting"
)

// LifeboatPlacement filters out interrupted and inactive pool nodes and steers protected Pods
// to active lifeboat nodes.
type LifeboatPlacement struct {
	handle                         fwk.Handle
	clock                          clock.PassiveClock
	interruptionTaintKeys          sets.Set[string]
	enablePodLevelResources        bool
	enableTaintComparisonOperators bool
	// poolNodes are the names of all warm-pool nodes (informer-backed).
	poolNodes *poolNodeIndex
	// nodeIndexesSynced reports whether poolNodes and reclaimed have seen the informer's list.
	nodeIndexesSynced cache.InformerSynced
	// reclaimed are the Spot nodes under interruption by capacity pool (informer-backed), and
	// reclaimedPoolWait how long after a lifeboat's start request a protected Pod may wait for
	// it instead of those pools' other nodes (reclaim.go); afterFunc schedules the retry.
	reclaimed         *reclaimedPools
	waitSeats         *waitSeats
	reclaimedPoolWait time.Duration
	afterFunc         func(time.Duration, func())
	// replicaSets and nodes: to recognise Pods of a handoff surge (see surging).
	replicaSets appslisters.ReplicaSetLister
	nodes       corelisters.NodeLister
	// widen marks Pods whose next cycle must not be narrowed (a narrowed cycle failed).
	widenMu sync.Mutex
	widen   map[types.UID]time.Time
	// seats indexes the seats by the Pod they keep room for (seatForIndex); seatWaits are the
	// Pods held back for their seat's release, with the end of the wait, at most
	// seatReleaseWait after the Pod's creation (seat.go).
	seats           cache.Indexer
	seatReleaseWait time.Duration
	seatWaitMu      sync.Mutex
	seatWaits       map[types.UID]time.Time
}

var (
	_ fwk.PreEnqueuePlugin  = &LifeboatPlacement{}
	_ fwk.PreFilterPlugin   = &LifeboatPlacement{}
	_ fwk.PostFilterPlugin  = &LifeboatPlacement{}
	_ fwk.FilterPlugin      = &LifeboatPlacement{}
	_ fwk.PreScorePlugin    = &LifeboatPlacement{}
	_ fwk.ScorePlugin       = &LifeboatPlacement{}
	_ fwk.EnqueueExtensions = &LifeboatPlacement{}
	_ fwk.SignPlugin        = &LifeboatPlacement{}
)

// New decodes and validates the args, then builds the plugin and registers its index of pool
// nodes on the scheduler's shared Node informer.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := scheme.DecodeArgs(Name, obj, &configv1.LifeboatPlacementArgs{}, validation.ValidateLifeboatPlacementArgs)
	if err != nil {
		return nil, err
	}
	if h == nil || h.SharedInformerFactory() == nil {
		return nil, fmt.Errorf("%s needs a framework handle with a shared informer factory", Name)
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	pl := &LifeboatPlacement{
		handle:                         h,
		clock:                          clock.RealClock{},
		interruptionTaintKeys:          sets.New(args.InterruptionTaintKeys...),
		enablePodLevelResources:        fts.EnablePodLevelResources,
		enableTaintComparisonOperators: fts.EnableTaintTolerationComparisonOperators,
		poolNodes:                      newPoolNodeIndex(),
		reclaimed:                      newReclaimedPools(),
		waitSeats:                      newWaitSeats(),
		reclaimedPoolWait:              args.ReclaimedPoolWait.Duration,
		seatReleaseWait:                args.SeatReleaseWait.Duration,
		afterFunc:                      func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		widen:                          map[types.UID]time.Time{},
		seatWaits:                      map[types.UID]time.Time{},
	}
	nodeInformer := h.SharedInformerFactory().Core().V1().Nodes().Informer()
	pools, err := nodeInformer.AddEventHandler(pl.poolNodes.eventHandler())
	if err != nil {
		return nil, fmt.Errorf("%s: watch nodes: %w", Name, err)
	}
	reclaimed, err := nodeInformer.AddEventHandler(pl.reclaimed.eventHandler())
	if err != nil {
		return nil, fmt.Errorf("%s: watch nodes: %w", Name, err)
	}
	pl.nodeIndexesSynced = func() bool { return pools.HasSynced() && reclaimed.HasSynced() }
	// Registered here so that the scheduler starts the ReplicaSet informer with the others
	// (system:kube-scheduler may list and watch ReplicaSets).
	rs := h.SharedInformerFactory().Apps().V1().ReplicaSets()
	rs.Informer()
	pl.replicaSets = rs.Lister()
	pl.nodes = h.SharedInformerFactory().Core().V1().Nodes().Lister()
	podInformer := h.SharedInformerFactory().Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{seatForIndex: seatFor}); err != nil {
		return nil, fmt.Errorf("%s: index seats: %w", Name, err)
	}
	pl.seats = podInformer.GetIndexer()
	return pl, nil
}

// Name returns the plugin's name.
func (pl *LifeboatPlacement) Name() string { return Name }

// IsPoolNode reports whether the node belongs to a warm pool.
func IsPoolNode(node *v1.Node) bool {
	_, ok := node.Labels[v1alpha1.LabelPool]
	return ok
}

// IsActivePoolNode reports whether the node is a pool node in state active.
func IsActivePoolNode(node *v1.Node) bool {
	return IsPoolNode(node) && node.Labels[v1alpha1.LabelState] == string(v1alpha1.NodeStateActive)
}

func isProtected(pod *v1.Pod) bool {
	return podrole.Protected(pod)
}

// isInterrupted reports whether the node carries one of the interruption taints.
func (pl *LifeboatPlacement) isInterrupted(node *v1.Node) bool {
	for i := range node.Spec.Taints {
		if pl.interruptionTaintKeys.Has(node.Spec.Taints[i].Key) {
			return true
		}
	}
	return false
}

// rejection returns why the node is no target for any Pod, or "".
func (pl *LifeboatPlacement) rejection(node *v1.Node) string {
	if pl.isInterrupted(node) {
		return ErrReasonInterrupted
	}
	if IsPoolNode(node) && !IsActivePoolNode(node) {
		return ErrReasonPoolNodeNotActive
	}
	return ""
}

// Filter rejects interrupted nodes and pool nodes that are not active, and — in a cycle in
// which the Pod waits for a resuming lifeboat node — the nodes of Spot pools being reclaimed.
// All are unresolvable by preemption.
func (pl *LifeboatPlacement) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	reason := pl.rejection(node)
	if reason == "" && keptOff(state, node) {
		reason = ErrReasonPoolBeingReclaimed
	}
	if reason != "" {
		klog.FromContext(ctx).V(4).Info("node is no lifeboat placement target", "node", klog.KObj(node), "pod", klog.KObj(pod), "reason", reason)
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	return nil
}

// EventsToRegister requeues a rejected Pod the moment a node turns into a target: a pool node
// labelled active, an interruption taint removed, a new node, or a resuming lifeboat node seen
// Ready (the annotation lifeboat.dev/resumed-ready-at; a Pod may be waiting for it) — and a Pod
// held back for its seat's release when that seat is deleted.
func (pl *LifeboatPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint | fwk.UpdateNodeAnnotation}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterSeatDelete},
	}, nil
}

func (pl *LifeboatPlacement) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	original, modified, err := util.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	wasRejected := original == nil || pl.rejection(original) != ""
	if wasRejected && pl.rejection(modified) == "" {
		logger.V(5).Info("node became a lifeboat placement target", "pod", klog.KObj(pod), "node", klog.KObj(modified))
		return fwk.Queue, nil
	}
	if original != nil && IsActivePoolNode(modified) && original.Annotations[v1alpha1.AnnotationResumedReadyAt] == "" &&
		modified.Annotations[v1alpha1.AnnotationResumedReadyAt] != "" {
		logger.V(5).Info("resuming lifeboat node is Ready", "pod", klog.KObj(pod), "node", klog.KObj(modified))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// SignPod: the plugin's results depend on whether the Pod is protected and, through
// PreFilter, on its tolerations and required node affinity (signed here as TaintToleration and
// NodeAffinity sign them) and its requests (signed by NodeResourcesFit).
func (pl *LifeboatPlacement) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	aff, err := fwk.NodeAffinitySigner(pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	return []fwk.SignFragment{
		{Key: v1alpha1.LabelProtected, Value: isProtected(pod)},
		{Key: v1alpha1.LabelSeatHost, Value: podrole.SeatHost(pod)},
		{Key: fwk.TolerationsSignerName, Value: fwk.TolerationsSigner(pod)},
		{Key: fwk.NodeAffinitySignerName, Value: aff},
		{Key: fwk.NodeSelectorSignerName, Value: pod.Spec.NodeSelector},
	}, nil
}

// PreScore skips scoring for unprotected Pods and Pods with a seat: all their candidate nodes
// are equal here.
func (pl *LifeboatPlacement) PreScore(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if !podrole.RidesLifeboats(pod) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score gives active lifeboat nodes MaxNodeScore and every other node 0.
func (pl *LifeboatPlacement) Score(_ context.Context, _ fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	if IsActivePoolNode(nodeInfo.Node()) {
		return fwk.MaxNodeScore, nil
	}
	return 0, nil
}

// ScoreExtensions returns nil: scores are already in [0, MaxNodeScore].
func (pl *LifeboatPlacement) ScoreExtensions() fwk.ScoreExtensions { return nil }

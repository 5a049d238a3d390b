package lifeboatplacement

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	taintutil "k8s.io/kubernetes/pkg/util/taints"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/podrole"
)

// narrowedStateKey marks, in the CycleState, a cycle in which PreFilter narrowed the Pod to
// active lifeboat nodes; PostFilter reads it.
const narrowedStateKey fwk.StateKey = "PreFilter" + Name

// narrowedState lists the nodes PreFilter narrowed the cycle to: active lifeboat nodes, or the
// node of the Pod's seat (seat).
type narrowedState struct {
	nodes sets.Set[string]
	seat  bool
}

// Clone shares the state: it is never modified after PreFilter.
func (s *narrowedState) Clone() fwk.StateData { return s }

// widenAfter bounds how long a Pod stays marked for a cycle without narrowing: the mark is
// consumed by the Pod's next attempt, normally within a back-off; this only drops marks of
// Pods deleted in between.
const widenAfter = 10 * time.Minute

// poolNodeIndex is the set of warm-pool node names (label lifeboat.dev/pool, any state),
// kept by a handler on the scheduler's shared Node informer, so that PreFilter visits only
// pool nodes instead of every node of the snapshot. Their state, taints and free capacity are
// read from the cycle's snapshot, never from here.
type poolNodeIndex struct {
	mu    sync.RWMutex
	names sets.Set[string]
}

func newPoolNodeIndex() *poolNodeIndex { return &poolNodeIndex{names: sets.New[string]()} }

func (x *poolNodeIndex) set(node *v1.Node) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if IsPoolNode(node) {
		x.names.Insert(node.Name)
	} else {
		x.names.Delete(node.Name)
	}
}

func (x *poolNodeIndex) delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.names.Delete(name)
}

// each calls fn for every pool node name while holding the read lock.
func (x *poolNodeIndex) each(fn func(name string)) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for name := range x.names {
		fn(name)
	}
}

// eventHandler keeps the index in step with the Node informer.
func (x *poolNodeIndex) eventHandler() cache.ResourceEventHandler {
	return nodeEventHandler(x.set, x.delete)
}

// podNeeds is what a lifeboat node must offer the Pod, computed once per PreFilter.
type podNeeds struct {
	pod      *v1.Pod
	requests *framework.Resource
	affinity nodeaffinity.RequiredNodeAffinity
}

func (pl *LifeboatPlacement) needsOf(pod *v1.Pod) *podNeeds {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{SkipPodLevelResources: !pl.enablePodLevelResources})
	return &podNeeds{pod: pod, requests: framework.NewResource(reqs), affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// PreFilter narrows the cycle of a protected Pod to the active lifeboat nodes that can take
// it, so that it lands on one whatever the profile's node sampling (percentageOfNodesToScore)
// would have looked at. It returns nil (all nodes, normal sampling) for unprotected Pods, when
// no active lifeboat node can take the Pod, and for the one retry after a narrowed cycle
// failed (see PostFilter). It never returns an empty set, which would make the Pod
// unschedulable.
//
// "Can take" mirrors the filters that decide in practice, on the snapshot's NodeInfo: node
// state and interruption taints (this plugin's Filter), not cordoned, the taints as
// LifeboatTaints treats them for protected Pods, the Pod's required node affinity and
// nodeSelector, and free allocatable (pod count, CPU, memory, ephemeral storage, extended
// resources) against the Pod's requests. Filters it does not mirror (host ports, inter-Pod
// affinity, topology spread, volumes, DRA) are covered by PostFilter's fallback.
//
// When it does not narrow, it decides whether the Pod waits for a resuming lifeboat node
// instead of the nodes of Spot pools being reclaimed (reclaim.go); Filter reads the decision.
//
// A protected Pod with a seat (seat.go) is narrowed to its seat's node instead, when that node
// can take it (the same mirror, without the lifeboat exemptions), and otherwise evaluated on
// all nodes like an unprotected Pod: never narrowed to lifeboat nodes, never waiting for one.
func (pl *LifeboatPlacement) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !isProtected(pod) {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	needs := pl.needsOf(pod)
	host := podrole.SeatHost(pod)
	switch {
	case pl.takeWidenMark(pod.UID):
		logger.V(4).Info("narrowing failed last time, evaluating all nodes", "pod", klog.KObj(pod), "seatHost", host)
	case host != "":
		if name := pl.seatNodeThatCanTake(logger, needs, host); name != "" {
			targets := sets.New(name)
			state.Write(narrowedStateKey, &narrowedState{nodes: targets, seat: true})
			logger.V(4).Info("narrowing to the node of the pod's seat", "pod", klog.KObj(pod), "node", name)
			return &fwk.PreFilterResult{NodeNames: targets}, nil
		}
		logger.V(3).Info("the node of the pod's seat cannot take it, evaluating all nodes", "pod", klog.KObj(pod), "seatHost", host)
	default:
		if targets := pl.lifeboatNodesThatCanTake(logger, needs); len(targets) > 0 {
			state.Write(narrowedStateKey, &narrowedState{nodes: targets})
			logger.V(5).Info("narrowing to active lifeboat nodes that can take the pod", "pod", klog.KObj(pod), "nodes", len(targets))
			return &fwk.PreFilterResult{NodeNames: targets}, nil
		}
	}
	if host != "" {
		return nil, nil
	}
	if w := pl.decideReclaimWait(logger, needs); w != nil {
		state.Write(reclaimWaitStateKey, w)
	}
	return nil, nil
}

// PreFilterExtensions returns nil: PreFilter keeps no state that nominated Pods change.
func (pl *LifeboatPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// lifeboatNodesThatCanTake returns the names of the active lifeboat nodes of the snapshot
// that can take the Pod, or nil.
func (pl *LifeboatPlacement) lifeboatNodesThatCanTake(logger klog.Logger, needs *podNeeds) sets.Set[string] {
	nodeInfos := pl.handle.SnapshotSharedLister().NodeInfos()
	var out sets.Set[string]
	pl.poolNodes.each(func(name string) {
		ni, err := nodeInfos.Get(name)
		if err != nil || !pl.canTake(logger, needs, ni) { // not in this cycle's snapshot yet, or no target
			return
		}
		if out == nil {
			out = sets.New[string]()
		}
		out.Insert(name)
	})
	return out
}

// canTake reports whether the active lifeboat node can take the protected Pod.
func (pl *LifeboatPlacement) canTake(logger klog.Logger, needs *podNeeds, ni fwk.NodeInfo) bool {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable || !IsActivePoolNode(node) || pl.isInterrupted(node) {
		return false
	}
	return pl.protectedPodPassesTaints(logger, needs.pod, node.Spec.Taints) && matchesAndFits(needs, ni)
}

// protectedPodPassesTaints is LifeboatTaints' rule for a protected Pod with the keys of
// docs/ARCHITECTURE.md "Nodes of the warm pool": the lifeboat taint passes, the standby taint
// never does, every other NoSchedule/NoExecute taint needs a toleration.
func (pl *LifeboatPlacement) protectedPodPassesTaints(logger klog.Logger, pod *v1.Pod, taints []v1.Taint) bool {
	return pl.passesTaints(logger, pod, taints, true)
}

// passesTaints: every NoSchedule/NoExecute taint is tolerated by the Pod's own tolerations —
// but, for a Pod that rides lifeboats (lifeboat), the lifeboat taint passes and the standby
// taint never does.
func (pl *LifeboatPlacement) passesTaints(logger klog.Logger, pod *v1.Pod, taints []v1.Taint, lifeboat bool) bool {
	for i := range taints {
		t := &taints[i]
		if t.Effect != v1.TaintEffectNoSchedule && t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		if lifeboat {
			switch t.Key {
			case v1alpha1.TaintLifeboat:
				continue
			case v1alpha1.TaintStandby:
				return false
			}
		}
		if !v1helper.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, t, pl.enableTaintComparisonOperators) {
			return false
		}
	}
	return true
}

// matchesAndFits: the node matches the Pod's required affinity and nodeSelector, and its free
// allocatable fits the Pod's requests.
func matchesAndFits(needs *podNeeds, ni fwk.NodeInfo) bool {
	if ok, err := needs.affinity.Match(ni.Node()); err != nil || !ok {
		return false
	}
	return fitsRequests(needs.requests, ni)
}

// fitsRequests is NodeResourcesFit's check (noderesources.Fits) on requests computed once per
// Pod, without ignored resources and without delegating extended resources to DRA — stricter,
// which only ever means no narrowing.
func fitsRequests(req *framework.Resource, ni fwk.NodeInfo) bool {
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	if len(ni.GetPods())+1 > alloc.GetAllowedPodNumber() {
		return false
	}
	if req.MilliCPU > 0 && req.MilliCPU > alloc.GetMilliCPU()-used.GetMilliCPU() {
		return false
	}
	if req.Memory > 0 && req.Memory > alloc.GetMemory()-used.GetMemory() {
		return false
	}
	if req.EphemeralStorage > 0 && req.EphemeralStorage > alloc.GetEphemeralStorage()-used.GetEphemeralStorage() {
		return false
	}
	for name, q := range req.ScalarResources {
		if q > 0 && q > alloc.GetScalarResources()[name]-used.GetScalarResources()[name] {
			return false
		}
	}
	return true
}

// PostFilter is the fallback of the narrowing: when a cycle narrowed to lifeboat nodes found
// none feasible after all (a filter PreFilter does not mirror rejected them, or another
// plugin's PreFilterResult did not intersect), it marks the Pod for one cycle without
// narrowing, requeues it at once (Activate; the Pod is in flight, so the queue retries it
// after its back-off, 1 s in the profile) and returns UnschedulableAndUnresolvable so that
// DefaultPreemption, which runs after it, does not evict Pods from lifeboat nodes while
// ordinary nodes were never looked at. Cycles that did not narrow are left to the other
// PostFilter plugins (Unschedulable).
//
// A Pod of a handoff surge never preempts (UnschedulableAndUnresolvable, whether the cycle was
// narrowed or not): the surge is an over-count while its twin on the lifeboat node still
// serves, and the Pods it would preempt — best-effort Jobs, typically — would lose their
// progress and grow their Job's back-off. It waits for capacity; Karpenter provisions for it.
// Nor does a Pod that waits for a resuming lifeboat node (reclaim.go); it is requeued when the
// wait ends.
func (pl *LifeboatPlacement) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	data, err := state.Read(narrowedStateKey)
	narrowed := err == nil
	logger := klog.FromContext(ctx)
	if !narrowed {
		if pl.retryAfterWait(logger, state, pod) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonPoolBeingReclaimed)
		}
		if pl.surging(pod) {
			logger.V(3).Info("handoff surge pod: no preemption", "pod", klog.KObj(pod))
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonSurgeNoPreemption)
		}
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	reason := ErrReasonRetryAllNodes
	if s, ok := data.(*narrowedState); ok && s.seat {
		reason = ErrReasonSeatRetryAllNodes
	}
	logger.V(3).Info("the nodes of the narrowed cycle could not take the pod after all, retrying on all nodes", "pod", klog.KObj(pod), "reason", reason)
	pl.setWidenMark(pod.UID)
	pl.handle.Activate(logger, map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
}

func (pl *LifeboatPlacement) setWidenMark(uid types.UID) {
	pl.widenMu.Lock()
	defer pl.widenMu.Unlock()
	now := pl.clock.Now()
	for u, at := range pl.widen {
		if now.Sub(at) > widenAfter {
			delete(pl.widen, u)
		}
	}
	pl.widen[uid] = now
}

// takeWidenMark reports whether the Pod is marked for a cycle without narrowing, and clears
// the mark.
func (pl *LifeboatPlacement) takeWidenMark(uid types.UID) bool {
	pl.widenMu.Lock()
	defer pl.widenMu.Unlock()
	if _, ok := pl.widen[uid]; !ok {
		return false
	}
	delete(pl.widen, uid)
	return true
}

// surging reports whether pod belongs to a Deployment whose handoff or bridge surge is in
// progress. The
// handoff writes the surge (JSON with the lifeboat node's name) into the Deployment's
// annotation lifeboat.dev/handoff-surge, and the Deployment controller copies Deployment
// annotations to its new ReplicaSet before it scales it, so the annotation is on the Pod's
// ReplicaSet by the time the surge Pods exist. The Deployment controller never removes a copied
// annotation, so a surge counts only while its node is still a draining pool node.
func (pl *LifeboatPlacement) surging(pod *v1.Pod) bool {
	if !isProtected(pod) {
		return false
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return false
	}
	rs, err := pl.replicaSets.ReplicaSets(pod.Namespace).Get(ref.Name)
	if err != nil {
		return false
	}
	if node := surgeNode(rs.Annotations[v1alpha1.AnnotationHandoffSurge]); node != "" {
		n, err := pl.nodes.Get(node)
		if err == nil && IsPoolNode(n) && n.Labels[v1alpha1.LabelState] == string(v1alpha1.NodeStateDraining) {
			return true
		}
	}
	// The bridge's surge (an interrupted Spot node's held Pods still serve): it counts while
	// one of its interrupted nodes is still there.
	for _, node := range bridgeNodes(rs.Annotations[v1alpha1.AnnotationBridgeSurge]) {
		if n, err := pl.nodes.Get(node); err == nil && (n.DeletionTimestamp != nil || taintutil.TaintKeyExists(n.Spec.Taints, v1alpha1.TaintInterrupted)) {
			return true
		}
	}
	return false
}

// bridgeNodes returns the interrupted nodes of a lifeboat.dev/bridge-surge annotation.
func bridgeNodes(annotation string) []string {
	if annotation == "" {
		return nil
	}
	var s struct {
		Nodes map[string]int32 `json:"nodes"`
	}
	if json.Unmarshal([]byte(annotation), &s) != nil {
		return nil
	}
	out := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		out = append(out, n)
	}
	return out
}

// surgeNode returns the lifeboat node of a lifeboat.dev/handoff-surge annotation ("" when the
// value is empty or not a surge).
func surgeNode(annotation string) string {
	if annotation == "" {
		return ""
	}
	var s struct {
		Node string `json:"node"`
	}
	if json.Unmarshal([]byte(annotation), &s) != nil {
		return ""
	}
	return s.Node
}

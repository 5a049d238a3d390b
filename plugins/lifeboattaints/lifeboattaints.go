// Package lifeboattaints is the LifeboatTaints scheduler plugin: kube-scheduler's
// TaintToleration, except that Pods labelled lifeboat.dev/protected=true pass the
// lifeboat.dev/lifeboat taint (but not those with a seat, lifeboat.dev/seat-host) and that reserved taints (lifeboat, standby) are never passed by a
// Pod's own tolerations. It replaces TaintToleration in the lifeboat-scheduler profile.
//
// Why not a toleration in the Pod spec: Karpenter counts every node a pending Pod could
// tolerate as usable capacity. Pool nodes must stay invisible to it so that it always launches
// replacements while evicted Pods ride on lifeboat nodes (docs/ARCHITECTURE.md "Nodes of the
// warm pool").
package lifeboattaints

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"
	"k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/validation"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/cyclestate"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/podrole"
)

const (
	// Name is the plugin's name in the registry and in configurations.
	Name = "LifeboatTaints"
	// ErrReasonUntolerated is the Filter reason when a Pod does not tolerate a node's taints
	// (the same text as TaintToleration, so operators recognise it).
	ErrReasonUntolerated = "node(s) had untolerated taint(s)"
	// ErrReasonReserved is the Filter reason when a node carries a reserved taint the Pod may not pass.
	ErrReasonReserved = "node(s) are lifeboat capacity reserved for protected Pods or in standby"

	preScoreStateKey = "PreScore" + Name
)

// LifeboatTaints filters nodes by taints and scores PreferNoSchedule taints, like TaintToleration.
type LifeboatTaints struct {
	protectedPodTaintKeys     sets.Set[string]
	reservedTaintKeys         sets.Set[string]
	enableComparisonOperators bool
}

var (
	_ fwk.FilterPlugin      = &LifeboatTaints{}
	_ fwk.PreScorePlugin    = &LifeboatTaints{}
	_ fwk.ScorePlugin       = &LifeboatTaints{}
	_ fwk.EnqueueExtensions = &LifeboatTaints{}
	_ fwk.SignPlugin        = &LifeboatTaints{}
)

// New decodes and validates the args, then builds the plugin.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := scheme.DecodeArgs(Name, obj, &configv1.LifeboatTaintsArgs{}, validation.ValidateLifeboatTaintsArgs)
	if err != nil {
		return nil, err
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return &LifeboatTaints{
		protectedPodTaintKeys:     sets.New(args.ProtectedPodTaintKeys...),
		reservedTaintKeys:         sets.New(args.ReservedTaintKeys...),
		enableComparisonOperators: fts.EnableTaintTolerationComparisonOperators,
	}, nil
}

// Name returns the plugin's name.
func (pl *LifeboatTaints) Name() string { return Name }

// IsProtected reports whether the webhook protected the Pod (label lifeboat.dev/protected=true).
func IsProtected(pod *v1.Pod) bool {
	return podrole.Protected(pod)
}

// passesProtectedTaints: the Pod passes the protectedPodTaintKeys (the lifeboat taint) — a
// protected Pod, but not one with a seat (podrole.RidesLifeboats): it is moving to the room its
// seat kept on ordinary capacity, and on a lifeboat it would have to be handed off again.
func passesProtectedTaints(pod *v1.Pod) bool {
	return podrole.RidesLifeboats(pod)
}

// untoleratedTaint returns the first NoSchedule/NoExecute taint of the node that the Pod may
// not pass, and whether that taint is a reserved one.
func (pl *LifeboatTaints) untoleratedTaint(logger klog.Logger, taints []v1.Taint, pod *v1.Pod) (taint *v1.Taint, reserved bool) {
	protected := passesProtectedTaints(pod)
	isDoNotSchedule := helper.DoNotScheduleTaintsFilterFunc()
	for i := range taints {
		t := &taints[i]
		if !isDoNotSchedule(t) {
			continue
		}
		if protected && pl.protectedPodTaintKeys.Has(t.Key) {
			continue
		}
		if pl.reservedTaintKeys.Has(t.Key) {
			return t, true
		}
		if !v1helper.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, t, pl.enableComparisonOperators) {
			return t, false
		}
	}
	return nil, false
}

// Filter rejects nodes with a taint the Pod does not tolerate, a reserved taint, or (for an
// unprotected Pod) the lifeboat taint.
func (pl *LifeboatTaints) Filter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	logger := klog.FromContext(ctx)
	node := nodeInfo.Node()
	taint, reserved := pl.untoleratedTaint(logger, node.Spec.Taints, pod)
	if taint == nil {
		return nil
	}
	logger.V(4).Info("node had untolerated taints", "node", klog.KObj(node), "pod", klog.KObj(pod), "untoleratedTaint", taint, "reserved", reserved)
	if reserved {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonReserved)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonUntolerated)
}

// EventsToRegister requeues a rejected Pod when a node's taints change so that it may pass, or
// when the Pod itself gains tolerations or the protected label.
func (pl *LifeboatTaints) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeTaint}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodToleration | fwk.UpdatePodLabel}, QueueingHintFn: pl.isSchedulableAfterPodChange},
	}, nil
}

func (pl *LifeboatTaints) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	original, modified, err := util.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	wasUntolerated := true
	if original != nil {
		t, _ := pl.untoleratedTaint(logger, original.Spec.Taints, pod)
		wasUntolerated = t != nil
	}
	t, _ := pl.untoleratedTaint(logger, modified.Spec.Taints, pod)
	if wasUntolerated && t == nil {
		logger.V(5).Info("node's taints now pass for the Pod", "pod", klog.KObj(pod), "node", klog.KObj(modified))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func (pl *LifeboatTaints) isSchedulableAfterPodChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	_, modified, err := util.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if pod.UID == modified.UID {
		logger.V(5).Info("the unschedulable Pod's tolerations or labels changed", "pod", klog.KObj(modified))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// SignPod lets pods with the same tolerations and protection share filtering and scoring
// results (opportunistic batching).
func (pl *LifeboatTaints) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{
		{Key: fwk.TolerationsSignerName, Value: fwk.TolerationsSigner(pod)},
		{Key: v1alpha1.LabelProtected, Value: passesProtectedTaints(pod)},
	}, nil
}

// preScoreState holds the Pod's PreferNoSchedule tolerations for Score.
type preScoreState struct {
	tolerationsPreferNoSchedule []v1.Toleration
}

// Clone shares the state: it is never modified after PreScore.
func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore collects the Pod's tolerations of PreferNoSchedule taints (an empty effect matches all).
func (pl *LifeboatTaints) PreScore(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	var tolerations []v1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == v1.TaintEffectPreferNoSchedule {
			tolerations = append(tolerations, t)
		}
	}
	cycleState.Write(preScoreStateKey, &preScoreState{tolerationsPreferNoSchedule: tolerations})
	return nil
}

// Score counts the node's untolerated PreferNoSchedule taints (fewer is better, see NormalizeScore).
func (pl *LifeboatTaints) Score(ctx context.Context, cycleState fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := cyclestate.Read[*preScoreState](cycleState, preScoreStateKey, Name)
	if status != nil {
		return 0, status
	}
	logger := klog.FromContext(ctx)
	var intolerable int64
	for i := range nodeInfo.Node().Spec.Taints {
		t := &nodeInfo.Node().Spec.Taints[i]
		if t.Effect == v1.TaintEffectPreferNoSchedule &&
			!v1helper.TolerationsTolerateTaint(logger, s.tolerationsPreferNoSchedule, t, pl.enableComparisonOperators) {
			intolerable++
		}
	}
	return intolerable, nil
}

// NormalizeScore maps counts to [0, MaxNodeScore], fewest untolerated taints highest.
func (pl *LifeboatTaints) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	return helper.DefaultNormalizeScore(fwk.MaxNodeScore, true, scores)
}

// ScoreExtensions returns the plugin: it normalizes its own scores.
func (pl *LifeboatTaints) ScoreExtensions() fwk.ScoreExtensions { return pl }

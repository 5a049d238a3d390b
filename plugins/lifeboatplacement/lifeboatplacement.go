// Package lifeboatplacement is the LifeboatPlacement scheduler plugin: protected Pods go to
// active lifeboat nodes first, and nobody goes to a node under interruption or to a pool node
// that is not active (warming, standby, draining).
//
// Filter: reject nodes carrying an interruption taint (Karpenter's karpenter.sh/disrupted,
// Lifeboat's lifeboat.dev/interrupted, by default) and pool nodes (label lifeboat.dev/pool)
// whose lifeboat.dev/state is not active — after handoff starts (draining) a node is no target.
// Score: for Pods labelled lifeboat.dev/protected=true, active pool nodes score MaxNodeScore
// and other nodes 0; configure the plugin's weight so this outweighs the other scores.
package lifeboatplacement

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/validation"
)

const (
	// Name is the plugin's name in the registry and in configurations.
	Name = "LifeboatPlacement"
	// ErrReasonInterrupted is the Filter reason for nodes under interruption.
	ErrReasonInterrupted = "node(s) are being interrupted or disrupted"
	// ErrReasonPoolNodeNotActive is the Filter reason for pool nodes that are not active.
	ErrReasonPoolNodeNotActive = "node(s) are lifeboat nodes that are not active"
)

// LifeboatPlacement filters out interrupted and inactive pool nodes and prefers active
// lifeboat nodes for protected Pods.
type LifeboatPlacement struct {
	interruptionTaintKeys sets.Set[string]
}

var (
	_ fwk.FilterPlugin      = &LifeboatPlacement{}
	_ fwk.PreScorePlugin    = &LifeboatPlacement{}
	_ fwk.ScorePlugin       = &LifeboatPlacement{}
	_ fwk.EnqueueExtensions = &LifeboatPlacement{}
	_ fwk.SignPlugin        = &LifeboatPlacement{}
)

// New decodes and validates the args, then builds the plugin.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	internal, err := scheme.ArgsToInternal(obj, &configv1.LifeboatPlacementArgs{})
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	args, ok := internal.(*config.LifeboatPlacementArgs)
	if !ok {
		return nil, fmt.Errorf("%s args: want LifeboatPlacementArgs, got %T", Name, internal)
	}
	if err := validation.ValidateLifeboatPlacementArgs(nil, args); err != nil {
		return nil, fmt.Errorf("invalid %s args: %w", Name, err)
	}
	return &LifeboatPlacement{interruptionTaintKeys: sets.New(args.InterruptionTaintKeys...)}, nil
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
	return pod.Labels[v1alpha1.LabelProtected] == "true"
}

// rejection returns why the node is no target for any Pod, or "".
func (pl *LifeboatPlacement) rejection(node *v1.Node) string {
	for i := range node.Spec.Taints {
		if pl.interruptionTaintKeys.Has(node.Spec.Taints[i].Key) {
			return ErrReasonInterrupted
		}
	}
	if IsPoolNode(node) && !IsActivePoolNode(node) {
		return ErrReasonPoolNodeNotActive
	}
	return ""
}

// Filter rejects interrupted nodes and pool nodes that are not active. Both are unresolvable
// by preemption.
func (pl *LifeboatPlacement) Filter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if reason := pl.rejection(node); reason != "" {
		klog.FromContext(ctx).V(4).Info("node is no lifeboat placement target", "node", klog.KObj(node), "pod", klog.KObj(pod), "reason", reason)
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	return nil
}

// EventsToRegister requeues a rejected Pod the moment a node turns into a target: a pool node
// labelled active, an interruption taint removed, or a new node.
func (pl *LifeboatPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
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
	return fwk.QueueSkip, nil
}

// SignPod: the plugin's results depend only on whether the Pod is protected.
func (pl *LifeboatPlacement) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: v1alpha1.LabelProtected, Value: isProtected(pod)}}, nil
}

// PreScore skips scoring for unprotected Pods: all their candidate nodes are equal here.
func (pl *LifeboatPlacement) PreScore(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if !isProtected(pod) {
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

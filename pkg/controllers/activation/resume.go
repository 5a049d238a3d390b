package activation

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// StartOutcome is what became of the start of a claimed node's instance.
type StartOutcome int

const (
	// Started: StartInstances accepted it; the Node turns Ready as the instance resumes.
	Started StartOutcome = iota
	// NotStarted: refused or failed (the error says why; IncorrectInstanceState, wrapping
	// cloud.ErrIncorrectState, means still stopping or already running: try again later).
	NotStarted
	// NoCapacity: insufficient capacity. A hibernated instance cannot change its type, so it is
	// terminated and the Node unclaimed (the error is nil when both worked): the caller plans
	// again with the remaining standby nodes, and the pool launches a replacement.
	NoCapacity
)

// ResumeNode starts a claimed node's instance (see StartOutcome).
func ResumeNode(ctx context.Context, c client.Client, instances cloud.Instances, recorder events.EventRecorder, n *corev1.Node) (StartOutcome, error) {
	return AfterStart(ctx, c, instances, recorder, n, instances.Resume(ctx, nodeutil.InstanceID(n)))
}

// AfterStart handles StartInstances' answer (rerr) for a claimed node's instance: see
// StartOutcome. A batch starts many instances in one call and handles each answer here.
func AfterStart(ctx context.Context, c client.Client, instances cloud.Instances, recorder events.EventRecorder, n *corev1.Node, rerr error) (StartOutcome, error) {
	id := nodeutil.InstanceID(n)
	switch {
	case rerr == nil:
		return Started, nil
	case errors.Is(rerr, cloud.ErrIncorrectState):
		return NotStarted, rerr
	case errors.Is(rerr, cloud.ErrInsufficientCapacity):
		recorder.Eventf(n, nil, corev1.EventTypeWarning, v1alpha1.EventResumeFailed, "Resume", "No capacity to resume %s (%v): terminating it and resuming another standby node", id, rerr)
		if err := instances.Terminate(ctx, id); err != nil {
			return NoCapacity, fmt.Errorf("terminate %s after no capacity to resume it: %w", id, err)
		}
		before := n.DeepCopy()
		delete(n.Labels, v1alpha1.LabelResumedFor)
		n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateDraining)
		if err := c.Patch(ctx, n, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return NoCapacity, fmt.Errorf("unclaim node %s after no capacity to resume %s: %w", n.Name, id, err)
		}
		return NoCapacity, nil
	default:
		return NotStarted, fmt.Errorf("resume %s (node %s): %w", id, n.Name, rerr)
	}
}

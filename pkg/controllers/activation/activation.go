// Package activation finishes the activation of claimed (state active) pool nodes: the standby
// taint comes off once the Node is Ready, and an instance a crash left stopped after its claim is
// started again. ResumeNode is the start of a claimed node's instance, shared with the
// interruption controller's decisions.
package activation

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Activator finishes the activation of claimed (state active) pool nodes: when the Node is
// Ready it removes the standby taint, so the lifeboat scheduler can place protected Pods on it;
// while it is not Ready it makes sure the instance was started (a crash between the claim and
// StartInstances leaves a claimed node stopped).
type Activator struct {
	client   client.Client
	cloud    cloud.Instances
	clock    clock.Clock
	recorder events.EventRecorder
	// RestartAfter: a claimed node not Ready this long after its claim has its instance
	// checked and, if stopped, started again. Default 30s.
	RestartAfter time.Duration
}

// NewActivator returns the activator.
func NewActivator(c client.Client, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder) *Activator {
	return &Activator{client: c, cloud: instances, clock: clk, recorder: recorder, RestartAfter: 30 * time.Second}
}

// Register adds the activator.
func (a *Activator) Register(mgr ctrl.Manager) error {
	return nodeutil.RegisterForPoolNodes(mgr, "activation", 4, a, v1alpha1.NodeStateActive)
}

// Reconcile activates one claimed node.
func (a *Activator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	n := &corev1.Node{}
	if err := a.client.Get(ctx, req.NamespacedName, n); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !nodeutil.InPoolState(n, v1alpha1.NodeStateActive) || !nodeutil.HasTaint(n, v1alpha1.TaintStandby) {
		return reconcile.Result{}, nil
	}
	now := a.clock.Now()
	if nodeutil.Ready(n) {
		before := n.DeepCopy()
		nodeutil.EnsureMaps(n)
		taints := n.Spec.Taints[:0:0]
		for _, t := range n.Spec.Taints {
			if t.Key != v1alpha1.TaintStandby {
				taints = append(taints, t)
			}
		}
		n.Spec.Taints = taints
		n.Annotations[v1alpha1.AnnotationResumedReadyAt] = nodeutil.FormatTime(now)
		if err := a.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if at, ok := nodeutil.Time(n.Annotations, v1alpha1.AnnotationInterruptedAt); ok {
			metrics.ResumeSeconds.WithLabelValues("node_ready").Observe(now.Sub(at).Seconds())
		}
		a.recorder.Eventf(n, nil, corev1.EventTypeNormal, v1alpha1.EventActive, "Activate", "Resumed and Ready for protected Pods of %s", n.Labels[v1alpha1.LabelResumedFor])
		return reconcile.Result{}, nil
	}
	claimedAt, ok := nodeutil.Time(n.Annotations, v1alpha1.AnnotationActivatedAt)
	if ok && now.Sub(claimedAt) < a.RestartAfter {
		return reconcile.Result{RequeueAfter: a.RestartAfter - now.Sub(claimedAt)}, nil
	}
	inst, err := a.cloud.Get(ctx, nodeutil.InstanceID(n))
	if errors.Is(err, cloud.ErrNotFound) {
		return reconcile.Result{}, nil // gone: garbage collection removes the Node
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if inst.State == cloud.StateStopped || inst.State == cloud.StateStopping {
		klog.FromContext(ctx).Info("Claimed node's instance is not running; starting it", "node", klog.KObj(n), "instance", inst.ID, "state", inst.State)
		owner := n.Labels[v1alpha1.LabelResumedFor]
		out, err := ResumeNode(ctx, a.client, a.cloud, a.recorder, n)
		switch {
		case out == NoCapacity && err == nil:
			// Unclaimed: ask the interrupted Node's decision to be made again.
			return reconcile.Result{}, a.reopenDecision(ctx, owner)
		case err != nil && !errors.Is(err, cloud.ErrIncorrectState):
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
}

// reopenDecision removes the decision of an interrupted Node so that it is planned again.
func (a *Activator) reopenDecision(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	n := &corev1.Node{}
	if err := a.client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return client.IgnoreNotFound(err)
	}
	before := n.DeepCopy()
	delete(n.Annotations, v1alpha1.AnnotationResumeDecision)
	return client.IgnoreNotFound(a.client.Patch(ctx, n, client.MergeFrom(before)))
}

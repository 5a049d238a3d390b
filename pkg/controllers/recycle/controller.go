// Package recycle ends the life of an empty lifeboat node after its handoff: its instance is
// terminated and the pool's slot, which moved to a new generation when the node was claimed,
// has already been refilled by the warmpool controller.
package recycle

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Controller recycles empty draining pool nodes.
type Controller struct {
	client   client.Client
	cloud    cloud.Instances
	clock    clock.Clock
	recorder events.EventRecorder
}

// New returns the controller.
func New(c client.Client, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder) *Controller {
	return &Controller{client: c, cloud: instances, clock: clk, recorder: recorder}
}

func draining(o client.Object) bool {
	return o.GetLabels()[v1alpha1.LabelPool] != "" && o.GetLabels()[v1alpha1.LabelState] == string(v1alpha1.NodeStateDraining)
}

// Register adds the controller; it also wakes on Pod deletions via its periodic requeue.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("recycle").
		For(&corev1.Node{}, builder.WithPredicates(predicate.NewPredicateFuncs(draining))).
		Complete(c)
}

// Reconcile terminates one empty draining node's instance.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	n := &corev1.Node{}
	if err := c.client.Get(ctx, req.NamespacedName, n); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !draining(n) {
		return reconcile.Result{}, nil
	}
	pods, err := handoff.PodsOn(ctx, c.client, n.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(pods) > 0 {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	id := nodeutil.InstanceID(n)
	if err := c.cloud.Terminate(ctx, id); err != nil {
		return reconcile.Result{}, err
	}
	pool := &v1alpha1.WarmPool{}
	_ = c.client.Get(ctx, types.NamespacedName{Name: nodeutil.Pool(n)}, pool)
	msg := "Empty after handoff: terminated " + id
	if pool.Spec.AfterUse == v1alpha1.AfterUseRehibernate {
		// A resumed instance left its slot when it was claimed; returning it would need its
		// slot tags rewritten, which the cloud layer does not offer yet (docs/WARMPOOL.md).
		msg += " (afterUse Rehibernate is not supported yet: the pool refills with a fresh instance instead)"
	}
	if _, already := n.Annotations[v1alpha1.AnnotationRecycledAt]; !already {
		handoff.ObserveHandoff(n, c.clock.Now(), "drained")
		before := n.DeepCopy()
		nodeutil.EnsureMaps(n)
		n.Annotations[v1alpha1.AnnotationRecycledAt] = nodeutil.FormatTime(c.clock.Now())
		_ = c.client.Patch(ctx, n, client.MergeFrom(before))
		c.recorder.Eventf(n, nil, corev1.EventTypeNormal, v1alpha1.EventRecycled, "Recycle", msg)
	}
	// The Node goes with the instance (the cloud node lifecycle, or garbage collection).
	return reconcile.Result{}, nil
}

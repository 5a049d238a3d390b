package reclaimrisk

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// Controller keeps LabelReclaimAtRisk on exactly the nodes Plan marks. Every relevant Node
// change enqueues one cluster-wide pass (the key "reclaim-risk"): a notice starts the marking
// of its pool, the deletion of the pool's last interrupted node ends it. The state is the labels
// themselves, so a restart picks up where it left off.
type Controller struct {
	client client.Client
	clock  clock.Clock
}

// New returns the controller.
func New(c client.Client, clk clock.Clock) *Controller {
	return &Controller{client: c, clock: clk}
}

var passRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "reclaim-risk"}}

// Register adds the controller: Node creations and deletions, and updates of labels,
// annotations (the resume decision, the notice time) or the deletion timestamp, mapped to one
// pass. Status heartbeats change nothing it reads.
func (c *Controller) Register(mgr ctrl.Manager) error {
	changed := predicate.Or(predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
		},
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("reclaimrisk").
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{passRequest}
		}), builder.WithPredicates(changed)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(c)
}

// Reconcile labels and unlabels the nodes Plan says (fetch, decide, write). A failed write is
// retried with the controller's back-off; the others are still made.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx)
	list := &corev1.NodeList{}
	if err := c.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	nodes := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[i] = &list.Items[i]
	}
	m := Plan(nodes, c.clock.Now())
	var errs []error
	for _, n := range m.Label {
		if err := c.setLabel(ctx, n.Name, true); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Marked a node at risk of the Spot reclaim under way: seats keep off it", "node", n.Name, "pool", telemetry.PoolKeyFromLabels(n.Labels))
	}
	for _, n := range m.Unlabel {
		if err := c.setLabel(ctx, n.Name, false); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Node no longer at risk: its pool has no interrupted node left", "node", n.Name, "pool", telemetry.PoolKeyFromLabels(n.Labels))
	}
	return reconcile.Result{}, errors.Join(errs...)
}

func (c *Controller) setLabel(ctx context.Context, node string, on bool) error {
	value := "null"
	if on {
		value = `"true"`
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, v1alpha1.LabelReclaimAtRisk, value)
	n := &corev1.Node{}
	n.Name = node
	if err := c.client.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("label node %s %s=%v: %w", node, v1alpha1.LabelReclaimAtRisk, on, err)
	}
	return nil
}

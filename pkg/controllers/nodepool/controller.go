package nodepool

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Controller checks the NodePools for each WarmPool.
type Controller struct {
	client   client.Client
	recorder events.EventRecorder
}

// New returns the controller.
func New(c client.Client, recorder events.EventRecorder) *Controller {
	return &Controller{client: c, recorder: recorder}
}

// Register adds the controller (WarmPools; NodePool changes are picked up on the WarmPool's
// next change or the manager's resync).
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("nodepool").For(&v1alpha1.WarmPool{}).Complete(c)
}

// Reconcile assesses every NodePool and sets the WarmPool's NodePoolsReady condition.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pool := &v1alpha1.WarmPool{}
	if err := c.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	list := &karpv1.NodePoolList{}
	if err := c.client.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return reconcile.Result{}, c.setCondition(ctx, pool, metav1.ConditionFalse, v1alpha1.ReasonNoNodePools, "Karpenter's NodePool API is not installed")
		}
		return reconcile.Result{}, err
	}
	if len(list.Items) == 0 {
		return reconcile.Result{}, c.setCondition(ctx, pool, metav1.ConditionFalse, v1alpha1.ReasonNoNodePools, "No Karpenter NodePool exists: replacements for interrupted Spot nodes cannot be launched")
	}
	var as []Assessment
	var errs []error
	for i := range list.Items {
		np := &list.Items[i]
		a := Assess(np)
		if !a.SpotAllowed && pool.Spec.Karpenter.Manage {
			before := np.DeepCopy()
			if AllowSpot(np) && !equality.Semantic.DeepEqual(before, np) {
				if err := c.client.Patch(ctx, np, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
					errs = append(errs, err)
				} else {
					c.recorder.Eventf(np, pool, corev1.EventTypeNormal, v1alpha1.EventNodePoolPatched, "Patch", "Allowed Spot in NodePool %s (WarmPool %s has spec.karpenter.manage)", np.Name, pool.Name)
					a = Assess(np)
				}
			}
		}
		if !a.OK() {
			c.recorder.Eventf(np, pool, corev1.EventTypeWarning, v1alpha1.EventNodePoolNotReady, "Check", "%s", Summary([]Assessment{a}))
		}
		as = append(as, a)
	}
	status, reason, msg := metav1.ConditionTrue, v1alpha1.ReasonNodePoolsOK, "Every NodePool allows Spot and is diversified"
	if s := Summary(as); s != "" {
		status, msg = metav1.ConditionFalse, s
		reason = v1alpha1.ReasonNotDiversified
		for _, a := range as {
			if !a.SpotAllowed {
				reason = v1alpha1.ReasonNoSpot
			}
		}
	}
	errs = append(errs, c.setCondition(ctx, pool, status, reason, msg))
	return reconcile.Result{}, errors.Join(errs...)
}

func (c *Controller) setCondition(ctx context.Context, pool *v1alpha1.WarmPool, status metav1.ConditionStatus, reason, msg string) error {
	cond := metav1.Condition{Type: v1alpha1.ConditionNodePoolsReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !meta.SetStatusCondition(&pool.Status.Conditions, cond) {
			return nil
		}
		return c.client.Status().Update(ctx, pool)
	})
}

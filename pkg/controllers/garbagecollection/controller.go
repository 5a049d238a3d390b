// Package garbagecollection removes what the pool's state has no place for and the converge
// loop cannot see: pool-tagged instances of WarmPools that no longer exist, and pool Nodes whose
// instance is gone. Nothing Karpenter owns is ever touched: instances with Karpenter's tags and
// Nodes with Karpenter's labels are skipped, whatever else they carry.
package garbagecollection

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Controller is a periodic singleton, like Karpenter's nodeclaim garbage collection.
type Controller struct {
	client   client.Client
	cloud    cloud.Instances
	clock    clock.Clock
	recorder events.EventRecorder
	// Period between passes (default 2m); Grace: how long a pool Node may exist without a
	// visible instance (EC2 eventual consistency) before it is deleted (default 2m).
	Period, Grace time.Duration
}

// New returns the controller.
func New(c client.Client, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder) *Controller {
	return &Controller{client: c, cloud: instances, clock: clk, recorder: recorder, Period: 2 * time.Minute, Grace: 2 * time.Minute}
}

// Register adds the singleton.
func (c *Controller) Register(mgr ctrl.Manager) error {
	tick := make(chan event.GenericEvent, 1)
	tick <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "garbagecollection"}}}
	return ctrl.NewControllerManagedBy(mgr).Named("garbagecollection").
		WatchesRawSource(source.Channel(tick, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// KarpenterOwned reports whether EC2 tags mark an instance as Karpenter's (or the cluster's
// node groups'): such instances are never touched.
func KarpenterOwned(tags map[string]string) bool {
	for k := range tags {
		if strings.HasPrefix(k, "karpenter.sh/") || strings.HasPrefix(k, "karpenter.k8s.aws/") || k == "eks:nodegroup-name" {
			return true
		}
	}
	return false
}

func karpenterNode(n *corev1.Node) bool {
	for k := range n.Labels {
		if strings.HasPrefix(k, "karpenter.sh/") {
			return true
		}
	}
	return false
}

// Reconcile runs one pass.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx)
	pools := &v1alpha1.WarmPoolList{}
	if err := c.client.List(ctx, pools); err != nil {
		return reconcile.Result{}, err
	}
	known := map[string]bool{}
	for _, p := range pools.Items {
		known[p.Name] = true
	}
	// Every pool-tagged instance (any pool).
	instances, err := c.cloud.List(ctx, "*")
	if err != nil {
		return reconcile.Result{}, err
	}
	live := map[string]bool{}
	var errs []error
	for _, in := range instances {
		if in.State != cloud.StateShuttingDown && in.State != cloud.StateTerminated {
			live[in.ID] = true
		}
		if known[in.Pool] || KarpenterOwned(in.Tags) || !live[in.ID] {
			continue
		}
		log.Info("Terminating instance of a WarmPool that no longer exists", "instance", in.ID, "pool", in.Pool)
		if err := c.cloud.Terminate(ctx, in.ID); err != nil {
			errs = append(errs, err)
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes, client.HasLabels{v1alpha1.LabelPool}); err != nil {
		return reconcile.Result{}, err
	}
	now := c.clock.Now()
	for i := range nodes.Items {
		n := &nodes.Items[i]
		id := nodeutil.InstanceID(n)
		if karpenterNode(n) || id == "" || live[id] || now.Sub(n.CreationTimestamp.Time) < c.Grace {
			continue
		}
		log.Info("Deleting pool Node whose instance is gone", "node", klog.KObj(n), "instance", id)
		if err := client.IgnoreNotFound(c.client.Delete(ctx, n)); err != nil {
			errs = append(errs, err)
			continue
		}
		c.recorder.Eventf(n, nil, corev1.EventTypeNormal, v1alpha1.EventGarbageCollected, "Delete", "Deleted: instance %s is gone", id)
	}
	return reconcile.Result{RequeueAfter: c.Period}, errors.Join(errs...)
}

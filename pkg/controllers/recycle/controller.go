// Package recycle ends the service of an empty lifeboat node after its handoff. With afterUse
// Terminate (the default) its instance is terminated; the pool's slot moved to a new generation
// when the node was claimed and has already been refilled by the warmpool controller. With
// afterUse Rehibernate the instance kept its slot while it served (the pool did not refill it):
// the Node goes back to warming, claim state cleared, and the warmpool controller proves its
// images and hibernates it again like a freshly launched instance. When that is not possible
// (see Decide) it is terminated instead and the slot refills.
package recycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/warmpool"
)

// Controller recycles empty draining pool nodes.
type Controller struct {
	client   client.Client
	cloud    cloud.Instances
	clock    clock.Clock
	recorder events.EventRecorder
	// emptySince is when each empty node (by UID) was first seen waiting for the replacement
	// of a Pod its seat records name (SeatReplacementWait). In memory: after a restart the
	// wait starts again, bounded all the same.
	mu         sync.Mutex
	emptySince map[types.UID]time.Time
}

// New returns the controller.
func New(c client.Client, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder) *Controller {
	return &Controller{client: c, cloud: instances, clock: clk, recorder: recorder, emptySince: map[types.UID]time.Time{}}
}

// Register adds the controller; it also wakes on Pod deletions via its periodic requeue.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return nodeutil.RegisterForPoolNodes(mgr, "recycle", 0, c, v1alpha1.NodeStateDraining)
}

// Reconcile recycles one empty draining node: re-hibernate or terminate (Decide).
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	n := &corev1.Node{}
	if err := c.client.Get(ctx, req.NamespacedName, n); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !nodeutil.InPoolState(n, v1alpha1.NodeStateDraining) {
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
	pool := &v1alpha1.WarmPool{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: nodeutil.Pool(n)}, pool); apierrors.IsNotFound(err) {
		pool = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	// recycled-at: an earlier pass decided to terminate and a crash (or a failed call)
	// interrupted it; that decision stands.
	_, decided := n.Annotations[v1alpha1.AnnotationRecycledAt]
	var inst *cloud.Instance
	if !decided && pool != nil && pool.Spec.AfterUse == v1alpha1.AfterUseRehibernate && id != "" {
		// Only Rehibernate needs the instance's state, slot and age: Terminate stays one call.
		got, err := c.cloud.Get(ctx, id)
		switch {
		case err == nil:
			inst = got
		case !errors.Is(err, cloud.ErrNotFound):
			return reconcile.Result{}, fmt.Errorf("recycle %s: %w", n.Name, err)
		}
	}
	action, reason := Decide(Observed{Pool: pool, Instance: inst, Now: c.clock.Now()})
	if action == Rehibernate && !decided {
		err := c.rehibernate(ctx, n, pool, id)
		if apierrors.IsConflict(err) {
			// The kubelet (or KWOK) updated the Node: decide again on a fresh copy.
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	if !decided {
		if wait, err := c.awaitReplacements(ctx, n); err != nil || wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, err
		}
		// The decision is recorded with a resourceVersion precondition before the instance is
		// terminated: a stale cached copy (the node already went back to warming, its
		// instance is hibernating) conflicts here instead of terminating a standby instance.
		now := c.clock.Now()
		before := n.DeepCopy()
		nodeutil.EnsureMaps(n)
		n.Annotations[v1alpha1.AnnotationRecycledAt] = nodeutil.FormatTime(now)
		if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				return reconcile.Result{}, nil
			case apierrors.IsConflict(err):
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("record recycle of %s: %w", n.Name, err)
		}
		handoff.ObserveHandoff(before, now, "drained")
		c.recorder.Eventf(n, nil, corev1.EventTypeNormal, v1alpha1.EventRecycled, "Recycle", "Empty after handoff: terminating %s (%s)", id, reason)
	}
	if err := c.cloud.Terminate(ctx, id); err != nil {
		return reconcile.Result{}, err
	}
	// The Node goes with the instance (the cloud node lifecycle, or garbage collection).
	return reconcile.Result{}, nil
}

// awaitReplacements says how long to look again before terminating empty node n: a Pod its
// seat records name is not re-created yet (AwaitingReplacement) and the node has waited less
// than SeatReplacementWait; 0 when it may go.
func (c *Controller) awaitReplacements(ctx context.Context, n *corev1.Node) (time.Duration, error) {
	now := c.clock.Now()
	pods := map[string]*corev1.Pod{}
	for _, key := range RecordedPods(n, now) {
		ns, name, _ := strings.Cut(key, "/")
		p := &corev1.Pod{}
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			if !apierrors.IsNotFound(err) {
				return 0, err
			}
			continue
		}
		pods[key] = p
	}
	waiting := AwaitingReplacement(n, pods, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(waiting) == 0 {
		delete(c.emptySince, n.UID)
		return 0, nil
	}
	since, ok := c.emptySince[n.UID]
	if !ok {
		since, c.emptySince[n.UID] = now, now
	}
	if now.Sub(since) >= SeatReplacementWait {
		delete(c.emptySince, n.UID)
		klog.FromContext(ctx).Info("Terminating without the re-creation of Pods its seat records name", "node", klog.KObj(n), "pods", waiting, "waited", now.Sub(since))
		return 0, nil
	}
	klog.FromContext(ctx).V(2).Info("Waiting for Pods its seat records name to be re-created before terminating", "node", klog.KObj(n), "pods", waiting)
	return time.Second, nil
}

// claimAnnotations are the traces of a node's service (claim, start, activation, handoff) that
// a node back in the pool must not carry: the interruption controller only claims standby
// nodes without lifeboat.dev/resumed-for, and the warmpool controller times the warming from
// warming-since and re-sends a hibernation after hibernate-requested-at.
var claimAnnotations = []string{
	v1alpha1.AnnotationActivatedAt, v1alpha1.AnnotationStartRequestedAt, v1alpha1.AnnotationResumedReadyAt,
	v1alpha1.AnnotationDrainingSince, v1alpha1.AnnotationInterruptedAt, v1alpha1.AnnotationHibernateRequestedAt,
	v1alpha1.AnnotationRecycledAt,
}

// rehibernate hands an empty draining node back to its pool in one write (the only state this
// step has, so a crash before it repeats the decision and a crash after it leaves a warming node
// the warmpool controller finishes): state warming with the standby taint, claim state cleared,
// uncordoned. The warmpool controller then proves the images in node.status.images, calls
// StopInstances(Hibernate=true) and marks it standby; a hibernation that EC2 rejects or degrades
// to a stop makes it replace the instance, as for a fresh one.
func (c *Controller) rehibernate(ctx context.Context, n *corev1.Node, pool *v1alpha1.WarmPool, id string) error {
	now := c.clock.Now()
	before := n.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateWarming)
	delete(n.Labels, v1alpha1.LabelResumedFor)
	for _, k := range claimAnnotations {
		delete(n.Annotations, k)
	}
	n.Annotations[v1alpha1.AnnotationWarmingSince] = nodeutil.FormatTime(now)
	if id != "" {
		n.Annotations[v1alpha1.AnnotationInstanceID] = id
	}
	warmpool.EnsurePoolTaints(n, pool.Name, true)
	n.Spec.Unschedulable = false
	if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("return %s to pool %s: %w", n.Name, pool.Name, err)
	}
	handoff.ObserveHandoff(before, now, "drained")
	c.recorder.Eventf(n, pool, corev1.EventTypeNormal, v1alpha1.EventRecycled, "Recycle", "Empty after handoff: returning %s to standby of pool %s (afterUse Rehibernate); it is hibernated again", id, pool.Name)
	return nil
}

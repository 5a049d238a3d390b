package interruption

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// The resume ledger (the ConfigMap lifeboat-resume-ledger in Lifeboat's namespace; format in
// pkg/controllers/ledger) is the durable record of a burst's claims before StartInstances: one
// write per decision batch, with the ConfigMap's resourceVersion as precondition, instead of
// one Node write per claimed node. (Not the WarmPool's status: a write there costs more the
// larger the pool, and it would conflict with the warm-pool controller's status updates.)
// A claim is:
//
//  1. planned on the cached ledger and Nodes, and written to the ledger (a conflict plans the
//     batch again from the API server);
//  2. started (one StartInstances call for the batch);
//  3. labelled on its Node (state active, resumed-for, ...), in parallel;
//  4. the interrupted Node's mark and decision written, in one write each;
//  5. removed from the ledger once this process's cache shows the labels (reconcileLedger).
//
// Every reader of "claimed" takes the ledger into account until step 5: the decision planner
// (entries for its Nodes count as their claims; nodes in any entry are no candidates), the
// warm-pool converge loop (an entry's instance is serving, not standby). Entries whose batch is
// not in flight in this process and did not finish here — the process crashed, or a step
// failed — are finished by reconcileLedger: label the Node (recording whether the instance was
// started), mark the interrupted Node if its mark was never written; the interrupted Node's
// decision is then made from its mark, counting the labelled claim.

// labelClaim writes a ledger entry's claim on its Node: state active, resumed-for, the claim and
// notice times, and the StartInstances time if started is set. The ledger entry owns the node
// (no other writer claims a node in the ledger), so no precondition.
func (c *Controller) labelClaim(ctx context.Context, n *corev1.Node, cl ledger.Claim, activatedAt string, started time.Time) error {
	before := n.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateActive)
	n.Labels[v1alpha1.LabelResumedFor] = cl.For
	n.Annotations[v1alpha1.AnnotationActivatedAt] = activatedAt
	if cl.InterruptedAt != "" {
		n.Annotations[v1alpha1.AnnotationInterruptedAt] = cl.InterruptedAt
	}
	if !started.IsZero() {
		n.Annotations[v1alpha1.AnnotationStartRequestedAt] = nodeutil.FormatTime(started)
	}
	return c.client.Patch(ctx, n, client.MergeFrom(before))
}

// ledgerPoll: how often the ledger is looked at again while it holds entries (a batch in
// flight, or a cache behind the claim labels).
const ledgerPoll = 100 * time.Millisecond

// reconcileLedger removes the ledger entries that are done with, and finishes the ones no batch
// of this process finished. An entry is removed once the batch that wrote it is over (or it was
// finished here) and this process's cache shows its Node's claim labels (or the Node is gone,
// or no longer a claimable standby node): from then on the cache alone shows the claim, so a
// plan on the cached ledger and Nodes cannot miss it.
func (c *Controller) reconcileLedger(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := c.client.Get(ctx, req.NamespacedName, cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if len(cm.Data) == 0 {
		return reconcile.Result{}, nil
	}
	log := klog.FromContext(ctx)
	claims, derr := ledger.Decode(cm)
	drop := map[string]string{} // node → holder
	waiting := false
	var errs []error
	for node, cl := range claims {
		if cl.For == "" {
			// Unparsable: nothing to finish. Dropped, so that its node can be claimed again
			// (Decode's error names it).
			log.Error(derr, "Dropping a resume ledger entry that does not parse", "node", node)
			drop[node] = cl.Holder
			continue
		}
		if c.holders.isRunning(cl.Holder) {
			waiting = true
			continue
		}
		if !c.holders.isFinished(cl.Holder, node) {
			log.Info("Finishing a resume claim left by an interrupted decision", "node", node, "instance", cl.InstanceID, "for", cl.For, "holder", cl.Holder)
			if err := c.finishClaim(ctx, cl); err != nil {
				errs = append(errs, fmt.Errorf("finish the claim of %s for %s: %w", node, cl.For, err))
				continue
			}
			c.holders.finish(cl.Holder, node)
		}
		n := &corev1.Node{}
		err := c.client.Get(ctx, types.NamespacedName{Name: node}, n)
		switch {
		case apierrors.IsNotFound(err):
			drop[node] = cl.Holder
		case err != nil:
			errs = append(errs, err)
		case n.Labels[v1alpha1.LabelResumedFor] == cl.For,
			nodeutil.State(n) != v1alpha1.NodeStateStandby || n.Labels[v1alpha1.LabelResumedFor] != "":
			// Labelled (the cache shows the claim), or no longer claimable (unclaimed after
			// an ICE, replaced): the ledger has nothing more to say about it.
			drop[node] = cl.Holder
		default:
			waiting = true // the cache is behind the label write
		}
	}
	if len(drop) > 0 {
		err := c.ledger.Remove(ctx, func(cl ledger.Claim) bool {
			holder, ok := drop[cl.Node]
			return ok && holder == cl.Holder
		})
		if err != nil {
			errs = append(errs, err)
		} else {
			for node, holder := range drop {
				c.holders.forget(holder, node)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if waiting || len(drop) > 0 {
		return reconcile.Result{RequeueAfter: ledgerPoll}, nil
	}
	return reconcile.Result{}, nil
}

// finishClaim completes an orphaned ledger entry: its Node is labelled claimed (with the
// StartInstances time if the instance is already starting or running, so it is not started
// again), and the interrupted Node is marked if its mark was never written, so that its
// decision is made — counting this claim — and the Node watch drives it to the end.
func (c *Controller) finishClaim(ctx context.Context, cl ledger.Claim) error {
	now := c.clock.Now()
	n := &corev1.Node{}
	err := c.reader.Get(ctx, types.NamespacedName{Name: cl.Node}, n)
	switch {
	case apierrors.IsNotFound(err):
		// Gone: nothing to label; the interrupted Node is planned again below.
	case err != nil:
		return err
	case n.Labels[v1alpha1.LabelResumedFor] == cl.For:
		// Labelled already (the batch got that far).
	case nodeutil.State(n) != v1alpha1.NodeStateStandby || n.Labels[v1alpha1.LabelResumedFor] != "":
		// The claim never took effect on this node (replaced, or an ICE unclaimed it).
	default:
		inst, err := c.cloud.Get(ctx, cl.InstanceID)
		if err != nil && !errors.Is(err, cloud.ErrNotFound) {
			return err
		}
		if err == nil {
			var started time.Time
			if inst.State == cloud.StatePending || inst.State == cloud.StateRunning {
				started = now
			}
			// activated-at is now: the activator gives a claim that was never started its
			// restart delay before it starts the instance itself; the decision starts it first.
			if err := c.labelClaim(ctx, n, cl, nodeutil.FormatTime(now), started); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		// An instance that is gone is not labelled: garbage collection removes its Node.
	}
	x := &corev1.Node{}
	if err := c.reader.Get(ctx, types.NamespacedName{Name: cl.For}, x); err != nil {
		return client.IgnoreNotFound(err)
	}
	at, perr := time.Parse(time.RFC3339Nano, cl.InterruptedAt)
	if perr != nil {
		at = now
	}
	source := cl.Source
	if source == "" {
		source = marks.SourceKarpenterEvent
	}
	if _, err := c.marks.Write(ctx, x, source, at); err != nil {
		return err
	}
	c.RequestDecision(x.Name)
	return nil
}

// Package interruption makes at most one resume decision per interrupted Node (a rebalance
// recommendation's pre-resume is decided again, once, when a real interruption of the Node
// follows, counting the lifeboats still active for it). The notices come in through intake/
// (Lifeboat's SQS queue and Karpenter's SpotInterrupted events) and marks/ is the mark they
// leave on the Node. The Nodes of a burst are decided in batches (batcher.go): planned together
// against the shared standby nodes (resumeplan/, pure), the claims recorded in the resume ledger
// in one write (ledger.go, pkg/controllers/ledger), started with one StartInstances call, then
// the claimed Nodes labelled and the decisions recorded (batch.go, record.go). The activation
// of the resumed nodes is its own controller (pkg/controllers/activation).
package interruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/intake"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/resumeplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/pooltelemetry"
)

// Batching defaults: see batcher. The idle and maximum windows only apply where no notice batch
// announced the Nodes to come (the Node watch, Karpenter's events); an announcement lapses after
// DefaultBatchExpect, which bounds what a lost announcement adds to a batch's latency.
const (
	DefaultBatchIdle     = 5 * time.Millisecond
	DefaultBatchMax      = 50 * time.Millisecond
	DefaultBatchExpect   = 250 * time.Millisecond
	DefaultBatchMaxNodes = 100
	// maxConcurrentDecisions bounds the Nodes that can wait in one batch at a time (each
	// waits in its own reconcile).
	maxConcurrentDecisions = 128
)

// Controller decides and carries out resumes for interrupted Nodes. The decisions of a burst
// are made in batches: one live read of the nodes already claimed, one plan over the shared
// standby candidates, the claims in one ledger write, one StartInstances call.
type Controller struct {
	client    client.Client
	reader    client.Reader
	cloud     cloud.Instances
	clock     clock.Clock
	recorder  events.EventRecorder
	telemetry *pooltelemetry.Store

	marks   *marks.Writer
	notices *marks.Notices
	intake  *intake.Intake
	ledger  *ledger.Store

	trigger chan event.GenericEvent
	batch   *batcher

	// This process's memory (state.go).
	reservations    reservations
	recentDecisions recentDecisions
	holders         *ledgerHolders
	beforeStart     batchesBeforeStart
}

// New returns the controller; namespace ("": lifeboat-system) holds the resume ledger. client
// reads from the informer cache; reader must read from the API server directly (the manager's
// APIReader): it is used where a stale read could resume twice — the standby nodes already
// claimed for an interrupted Node, and a Node whose decision this process may just have
// recorded. Standby candidates come from the cache: a stale candidate is rejected by the
// ledger write's resourceVersion precondition and the plan is made again.
func New(c client.Client, reader client.Reader, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder, store *pooltelemetry.Store, namespace string) *Controller {
	if namespace == "" {
		namespace = v1alpha1.DefaultNamespace
	}
	ctrl := &Controller{
		client: c, reader: reader, cloud: instances, clock: clk, recorder: recorder, telemetry: store,
		marks: marks.NewWriter(c, reader, recorder), notices: marks.NewNotices(), ledger: ledger.NewStore(namespace, c, reader),
		trigger: make(chan event.GenericEvent, 1024), holders: newLedgerHolders(),
	}
	ctrl.beforeStart.clock = clk
	ctrl.batch = newBatcher(clk, DefaultBatchIdle, DefaultBatchMax, DefaultBatchExpect, DefaultBatchMaxNodes, ctrl.decideBatch)
	ctrl.intake = intake.New(c, clk, ctrl.marks, ctrl.notices, ctrl)
	return ctrl
}

// YieldToResumes waits until no decision batch of this process is on its way to
// StartInstances, at most max: writers that can wait a moment (the bridge's holds) keep the
// API server's queue clear for the resume, whose latency decides how soon the lifeboat is Ready.
func (c *Controller) YieldToResumes(ctx context.Context, max time.Duration) {
	c.beforeStart.waitIdle(ctx, max)
}

// Intake is the intake of the notices this controller decides on (the SQS consumer's handler,
// the Karpenter-event reconciler).
func (c *Controller) Intake() *intake.Intake { return c.intake }

// Register adds the decision reconciler (interrupted Nodes without a decision, and direct
// triggers from the intake) and the ledger reconciler.
func (c *Controller) Register(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("interruption").
		For(&corev1.Node{}, builder.WithPredicates(predicate.NewPredicateFuncs(marks.AwaitsDecision))).
		WatchesRawSource(source.Channel(c.trigger, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentDecisions}).
		Complete(c)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("interruption-ledger").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == c.ledger.Namespace() && o.GetName() == ledger.Name
		}))).
		Complete(reconcile.Func(c.reconcileLedger))
}

// AwaitDecisions implements intake.Decisions: the open batch waits for the Nodes.
func (c *Controller) AwaitDecisions(names []string) { c.batch.await(names) }

// StopAwaiting implements intake.Decisions.
func (c *Controller) StopAwaiting(name string) { c.batch.stopAwaiting(name) }

// HoldBatchOpen implements intake.Decisions: the open batch (at most DefaultBatchExpect) waits
// until release.
func (c *Controller) HoldBatchOpen() (release func()) { return c.batch.holdOpen() }

// RequestDecision triggers the decision reconciler for the Node; false if the trigger is full
// (a marked Node then comes through the Node watch anyway).
func (c *Controller) RequestDecision(name string) bool {
	select {
	case c.trigger <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		return true
	default:
		return false
	}
}

// Reconcile makes the one resume decision of an interrupted Node. It prepares the Node's part
// (its protected and DaemonSet Pods, from the cache) and waits for the batch it joins.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	base := ctx
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", req.Name))
	r, err := c.prepare(ctx, req.NamespacedName)
	if err != nil || r == nil {
		c.batch.stopAwaiting(req.Name)
		if err != nil {
			c.markNotice(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	// The batch runs on the context of its first request, without that Node in its logger.
	r.ctx = base
	c.batch.join(r)
	select {
	case res := <-r.done:
		if res.err != nil || res.requeue {
			// The decision did not get to its record: the notice's mark is written now, and
			// the retry starts from it.
			c.markNotice(ctx, req.Name)
		}
		return reconcile.Result{Requeue: res.requeue}, res.err
	case <-ctx.Done():
		return reconcile.Result{}, ctx.Err()
	}
}

// markNotice writes the mark of the Node's pending notice (the decision could not be made with
// it) and resolves the notice with the result: the queue message is deleted once the mark is
// durable, and the Node watch drives the decision from it.
func (c *Controller) markNotice(ctx context.Context, name string) {
	nt := c.notices.Pending(name)
	if nt == nil {
		return
	}
	node := &corev1.Node{}
	if err := c.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		c.notices.Resolve(name, nt, client.IgnoreNotFound(err))
		return
	}
	_, err := c.marks.Write(ctx, node, c.notices.Source(nt), nt.At)
	c.notices.Resolve(name, nt, err)
}

// prepare returns the Node's decision request, or nil if the Node waits for no decision.
func (c *Controller) prepare(ctx context.Context, key types.NamespacedName) (*decisionRequest, error) {
	node, unmarked, nt, err := c.interruptedNode(ctx, key)
	if err != nil || node == nil {
		return nil, err
	}
	r := &decisionRequest{ctx: ctx, node: node, unmarked: unmarked, notice: nt, done: make(chan decisionResult, 1)}
	r.noticeAt, _ = nodeutil.Time(node.Annotations, v1alpha1.AnnotationInterruptedAt)
	// What needs a place: the protected Pods still bound to the Node; and what comes along:
	// its DaemonSet Pods (their DaemonSets run on the lifeboat node too).
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingFields{indexes.PodNodeName: node.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	r.items, r.daemonSets = resumeplan.PodsToPlace(pods.Items)
	if len(r.items) == 0 {
		// A decision is made once per interruption, and "none" resumes nothing: before it,
		// the API server confirms that the Node holds no protected Pod (the cache may not show
		// Pods bound moments before the notice). Off the batch's path: the Node leaves the
		// batch it was announced to, so the batch's StartInstances does not wait for the read.
		c.batch.stopAwaiting(node.Name)
		if err := c.reader.List(ctx, pods, client.MatchingFields{indexes.PodNodeName: node.Name}); err != nil {
			return nil, fmt.Errorf("confirm that node %s holds no protected Pod: %w", node.Name, err)
		}
		r.items, r.daemonSets = resumeplan.PodsToPlace(pods.Items)
	}
	if node.Annotations[v1alpha1.AnnotationInterruptionSource] == marks.SourceRebalance {
		if r.pools, err = intake.PreResumePools(ctx, c.client); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// interruptedNode returns the Node if it waits for a decision, else nil. It reads the cache
// unless the cache may be behind this process's own writes: the answer to its mark is used when
// the cache does not show that mark yet (no mark, or the rebalance recommendation's mark it
// replaced), and a Node it recorded a decision on is read from the API server (the cache may not
// show the decision yet, or the activator reopened it, or a later interruption re-marked it).
// A Node with a pending queue notice that needs its mark is returned carrying the mark in
// memory (marks.Marked), with the copy it was read as (unmarked) and the notice: the decision
// writes the mark. A pending notice whose Node is marked already, gone or a pool node is
// resolved here.
func (c *Controller) interruptedNode(ctx context.Context, key types.NamespacedName) (node, unmarked *corev1.Node, nt *marks.Notice, err error) {
	nt = c.notices.Pending(key.Name)
	node = &corev1.Node{}
	// Read only (every write works on a copy): no deep copy from the cache.
	err = c.client.Get(ctx, key, node, client.UnsafeDisableDeepCopy)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, nil, err
	}
	decidedHere := c.recentDecisions.has(key.Name)
	if decidedHere && err == nil && node.Annotations[v1alpha1.AnnotationResumeDecision] != "" && nt == nil {
		// The cache has caught up with the decision; later changes (a reopened decision)
		// arrive through it in order. (A new notice reads the API server: the cache may
		// show the decision but not a later change.)
		c.recentDecisions.drop(key.Name)
		decidedHere = false
	}
	answer, markedHere := c.marks.Answer(key.Name)
	switch {
	case decidedHere:
		node = &corev1.Node{}
		if err := c.reader.Get(ctx, key, node); err != nil {
			if apierrors.IsNotFound(err) {
				c.recentDecisions.drop(key.Name)
				c.notices.Resolve(key.Name, nt, nil)
			}
			return nil, nil, nil, client.IgnoreNotFound(err)
		}
	case markedHere && (err != nil || !marks.Same(node, answer)):
		node = answer.DeepCopy()
	case err == nil && (nt != nil || marks.AwaitsDecision(node)):
	default:
		// Not interrupted as far as this process knows (a stale cache gets the Node watch's
		// event later), or decided on the mark this process wrote, or gone.
		c.marks.Forget(key.Name)
		c.notices.Resolve(key.Name, nt, nil)
		return nil, nil, nil, nil
	}
	c.marks.Forget(key.Name)
	if nodeutil.Pool(node) != "" {
		c.notices.Resolve(key.Name, nt, nil)
		return nil, nil, nil, nil
	}
	if nt != nil {
		if source := c.notices.Source(nt); marks.Needed(node, source) {
			return marks.Marked(node, source, nt.At), node, nt, nil
		}
		// Marked already (another source, or this process's own mark): the mark serves the
		// notice; the decision follows from it.
		c.notices.Resolve(key.Name, nt, nil)
	}
	if !marks.AwaitsDecision(node) {
		return nil, nil, nil, nil
	}
	return node, nil, nil, nil
}

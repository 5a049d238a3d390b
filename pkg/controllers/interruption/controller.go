package interruption

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
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
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	cloudinterruption "github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/telemetry"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// Field indexes the controllers register on the manager's cache.
const (
	IndexNodeInstanceID = "lifeboat.dev/instance-id"
	IndexPodNodeName    = "spec.nodeName"
)

// RegisterIndexes adds the Node-by-instance-ID and Pod-by-node indexes.
func RegisterIndexes(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Node{}, IndexNodeInstanceID, func(o client.Object) []string {
		if id := nodeutil.InstanceID(o.(*corev1.Node)); id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexPodNodeName, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	})
}

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
	// maxConcurrentEventMarks bounds the Karpenter SpotInterrupted events handled at once.
	maxConcurrentEventMarks = 32
)

// Controller decides and carries out resumes for interrupted Nodes. The decisions of a burst
// are made in batches: one live read of the nodes already claimed, one plan over the shared
// standby candidates, the claims in parallel, one StartInstances call.
type Controller struct {
	// Namespace holds the resume ledger (Lifeboat's namespace; default lifeboat-system).
	Namespace string

	client    client.Client
	reader    client.Reader
	cloud     cloud.Instances
	clock     clock.Clock
	recorder  events.EventRecorder
	telemetry *telemetry.Store

	trigger chan event.GenericEvent
	batch   *batcher
	// marked holds the API server's answer to this process's own interruption mark, by Node
	// name, until the decision consumes it: the decision is triggered right after the mark,
	// usually before the informer has delivered it, and the answer is newer than the cache.
	marked sync.Map // string → *corev1.Node
	// decided remembers the Nodes this process recorded a decision on. A cached copy may not
	// show that decision yet; for these Nodes the decision re-reads the Node from the API
	// server before acting (the activator may also have reopened the decision since).
	decided sync.Map // string → struct{}
	// reserved are the standby nodes an in-flight batch of this process planned to claim, by
	// the interrupted Node it plans for. Batches that overlap in time plan around each other's
	// picks instead of racing for the same node and losing a round trip to the conflict; the
	// claim's resourceVersion precondition still guards against other writers.
	reserveMu sync.Mutex
	reserved  map[string]string // standby node → interrupted node

	// notices are the queue's notices waiting for their decision, by Node name: see notice.
	noticeMu sync.Mutex
	notices  map[string]*notice
	// id names this process in the ledger entries it writes (holder = id/batch sequence);
	// inflight holds the holders of the batches running now (reconcileLedger leaves their
	// entries alone).
	id       string
	batchSeq atomic.Uint64
	inflight sync.Map // string → struct{}
	// finished holds the ledger entries (holder|node) a batch of this process finished — their
	// Nodes labelled, their decisions recorded or retried from the mark — or reconcileLedger
	// finished, until they are removed from the ledger.
	finished sync.Map // string → struct{}
	// ledgerMu serializes this process's ledger writes; ledgerLast is the API server's answer
	// to the last of them and ledgerSuperseded the versions they replaced ("" for none): a
	// cached ledger at such a version is behind this process's own writes.
	// critical: the batches on their way to StartInstances (see decideBatch).
	critical criticalSection

	ledgerMu         sync.Mutex
	ledgerLast       *corev1.ConfigMap
	ledgerSuperseded map[string]bool
}

// New returns the controller. client reads from the informer cache; reader must read from the
// API server directly (the manager's APIReader): it is used where a stale read could resume
// twice — the standby nodes already claimed for an interrupted Node, and a Node whose decision
// this process may just have recorded. Standby candidates come from the cache: a stale candidate
// is rejected by the claim's resourceVersion precondition and the plan is made again.
func New(c client.Client, reader client.Reader, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder, store *telemetry.Store) *Controller {
	ctrl := &Controller{Namespace: v1alpha1.DefaultNamespace, client: c, reader: reader, cloud: instances, clock: clk, recorder: recorder, telemetry: store, trigger: make(chan event.GenericEvent, 1024), reserved: map[string]string{}, notices: map[string]*notice{}, id: processID()}
	ctrl.batch = newBatcher(DefaultBatchIdle, DefaultBatchMax, DefaultBatchExpect, DefaultBatchMaxNodes, ctrl.decideBatch)
	return ctrl
}

// reservePlans plans a batch under the reservation lock: candidates reserved by Nodes of other
// batches are left out, and the plans' picks are reserved for their Nodes.
func (c *Controller) reservePlans(demands []demand, candidates []poolNode) map[string]sizing.ResumePlan {
	c.reserveMu.Lock()
	defer c.reserveMu.Unlock()
	inBatch := make(map[string]bool, len(demands))
	for _, d := range demands {
		inBatch[d.Node] = true
	}
	free := candidates[:0:0]
	for _, n := range candidates {
		if owner, ok := c.reserved[n.Name]; !ok || inBatch[owner] {
			free = append(free, n)
		}
	}
	plans := planBatch(demands, free)
	for node, plan := range plans {
		for _, name := range plan.Resume {
			c.reserved[name] = node
		}
	}
	return plans
}

// release drops the reservations of the batch's Nodes (their decisions are over; their claims
// are in the API).
func (c *Controller) release(nodes map[string]*decisionRequest) {
	c.reserveMu.Lock()
	defer c.reserveMu.Unlock()
	for name, owner := range c.reserved {
		if _, ok := nodes[owner]; ok {
			delete(c.reserved, name)
		}
	}
}

// processID is a random name for this process's ledger entries.
func processID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func interrupted(o client.Object) bool {
	a := o.GetAnnotations()
	return a[v1alpha1.AnnotationInterruptedAt] != "" && a[v1alpha1.AnnotationResumeDecision] == ""
}

// Register adds the decision reconciler (interrupted Nodes without a decision, and direct
// triggers from the notice handlers) and the Karpenter-event source.
func (c *Controller) Register(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("interruption").
		For(&corev1.Node{}, builder.WithPredicates(predicate.NewPredicateFuncs(interrupted))).
		WatchesRawSource(source.Channel(c.trigger, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentDecisions}).
		Complete(c)
	if err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("interruption-ledger").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == c.Namespace && o.GetName() == ledger.Name
		}))).
		Complete(reconcile.Func(c.reconcileLedger))
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("interruption-karpenter-events").
		For(&corev1.Event{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			e, ok := o.(*corev1.Event)
			return ok && e.Reason == KarpenterReasonSpotInterrupted
		}))).
		// A reclaim brings a burst of events (one per NodeClaim and one per Node): marked one at
		// a time, the last Node of a 20-node burst would wait for 19 marks (seconds on a busy
		// API server). Marks of one Node from its two events are safe in parallel: the mark's
		// resourceVersion precondition lets one write it, the other finds it marked.
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentEventMarks}).
		Complete(reconcile.Func(c.reconcileKarpenterEvent))
}

// HandleMessage handles one notice: HandleBatch of one message.
func (c *Controller) HandleMessage(ctx context.Context, msg cloudinterruption.Message) error {
	return c.HandleBatch(ctx, []cloudinterruption.Message{msg})[0]
}

// HandleBatch is the SQS consumer's handler for a receive batch: it announces the Nodes of the
// messages' instances to the decision batcher and requests their decisions, so that they are
// made as one batch at once. A Node not marked yet is not marked first: its mark is written
// with its decision, after StartInstances (the claims' ledger entry is the durable record
// before it; see notice). A message's error is nil once the marks of all its Nodes are written:
// the consumer then deletes it; until then a crash delivers it again.
func (c *Controller) HandleBatch(ctx context.Context, msgs []cloudinterruption.Message) []error {
	errs := make([]error, len(msgs))
	// The notices' receipt is what the resume latency is measured from (EventBridge's event
	// time is in lifeboat_cloud_interruption_message_age_seconds).
	received := c.clock.Now()
	type target struct {
		node   *corev1.Node
		source string
		msgs   []int
	}
	var (
		targets      = map[string]*target{}
		order        []string
		preResume    map[string]bool
		preResumeErr error
		loaded       bool
	)
	for i, msg := range msgs {
		signal := Classify(msg)
		if signal == Ignore {
			continue
		}
		if signal == Rebalance {
			if !loaded {
				preResume, preResumeErr = c.preResumePools(ctx)
				loaded = true
			}
			if preResumeErr != nil {
				// Not deleted: the recommendation is handled again once the pools can be read.
				errs[i] = preResumeErr
				continue
			}
			if len(preResume) == 0 {
				continue
			}
		}
		source := "sqs/" + string(msg.Kind)
		for _, id := range msg.InstanceIDs {
			list := &corev1.NodeList{}
			// Read only (mark works on a copy): no deep copy from the cache.
			if err := c.client.List(ctx, list, client.MatchingFields{IndexNodeInstanceID: id}, client.UnsafeDisableDeepCopy); err != nil {
				errs[i] = errors.Join(errs[i], err)
				continue
			}
			for k := range list.Items {
				n := &list.Items[k]
				if nodeutil.Pool(n) != "" {
					continue // Lifeboat's own hibernations and resumes
				}
				t, ok := targets[n.Name]
				if !ok {
					t = &target{node: n, source: source}
					targets[n.Name] = t
					order = append(order, n.Name)
				} else if t.source == SourceRebalance && signal == Interrupt {
					// The same batch says the instance is going away: that is the signal.
					t.source = source
				}
				t.msgs = append(t.msgs, i)
			}
		}
	}
	var expected []string
	for _, name := range order {
		if t := targets[name]; needsMark(t.node, t.source) {
			expected = append(expected, name)
		}
	}
	c.batch.expect(expected)
	// The batch is taken in: a Gather hold on the open batch may end (see Gather).
	cloudinterruption.Announce(ctx)
	waits := map[string]*notice{}
	for _, name := range order {
		t := targets[name]
		// A fallback mark's error reaches the message through its notice.
		if n, _ := c.notice(ctx, t.node, t.source, received); n != nil {
			waits[name] = n
		}
	}
	for _, name := range order {
		n, ok := waits[name]
		if !ok {
			continue
		}
		if err := n.wait(ctx); err != nil {
			for _, i := range targets[name].msgs {
				errs[i] = errors.Join(errs[i], fmt.Errorf("node %s: %w", name, err))
			}
		}
	}
	return errs
}

// Gather is the SQS consumer's Gather: it holds the decision batch open (at most
// DefaultBatchExpect) until release, while the consumer looks for the rest of a burst that the
// queue returned in part. The rest's Nodes, announced before the release, join the batch: one
// ledger write and one StartInstances call for the burst, not two of each one after the other.
func (c *Controller) Gather() (release func()) { return c.batch.hold() }

func (c *Controller) reconcileKarpenterEvent(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ev := &corev1.Event{}
	if err := c.client.Get(ctx, req.NamespacedName, ev); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	nodeName := ""
	switch ev.InvolvedObject.Kind {
	case "Node":
		nodeName = ev.InvolvedObject.Name
	case "NodeClaim":
		nc := &karpv1.NodeClaim{}
		if err := c.client.Get(ctx, types.NamespacedName{Name: ev.InvolvedObject.Name}, nc); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		nodeName = nc.Status.NodeName
	}
	if nodeName == "" {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: nodeName}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	_, err := c.notice(ctx, node, SourceKarpenterEvent, c.clock.Now())
	return reconcile.Result{}, err
}

// notice asks for the decision of a Node a durable notice names (a queue message is deleted
// only once the notice is resolved; Karpenter's Event stays in the API server, and a restart
// lists it again): its mark is written with the decision, after StartInstances. It returns the
// Node's pending notice, or nil if the Node needs no mark (a pool node, or marked already: the
// decision follows from the mark). If the decision cannot be requested now, the Node is marked
// instead (the Node watch brings the decision) and the notice resolved with the mark's error.
func (c *Controller) notice(ctx context.Context, node *corev1.Node, source string, at time.Time) (*notice, error) {
	if nodeutil.Pool(node) != "" {
		return nil, nil
	}
	if !needsMark(node, source) {
		c.requestDecision(node.Name)
		return nil, nil
	}
	n := c.addNotice(node.Name, source, at)
	if c.tryRequestDecision(node.Name) {
		return n, nil
	}
	c.batch.forget(node.Name)
	_, err := c.mark(ctx, node, source, at)
	c.resolveNotice(node.Name, n, err)
	return n, err
}

// Mark records the interruption on the Node (taint lifeboat.dev/interrupted, annotations) once,
// counts it in the telemetry, and triggers the decision. Pool nodes are never marked.
func (c *Controller) Mark(ctx context.Context, node *corev1.Node, source string, at time.Time) error {
	if nodeutil.Pool(node) != "" {
		return nil
	}
	if _, err := c.mark(ctx, node, source, at); err != nil {
		return err
	}
	c.requestDecision(node.Name)
	return nil
}

// requestDecision triggers the decision reconciler for the marked Node (if the trigger is full,
// the Node watch delivers the marked Node anyway).
func (c *Controller) requestDecision(name string) { c.tryRequestDecision(name) }

// tryRequestDecision triggers the decision reconciler for the Node; false if the trigger is full.
func (c *Controller) tryRequestDecision(name string) bool {
	select {
	case c.trigger <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		return true
	default:
		return false
	}
}

// needsMark reports whether a notice from source marks the Node: it carries no mark yet, or
// only the mark of a rebalance recommendation and source is a real interruption. The latter
// re-marks it once: the pre-resume served the recommendation (resumed from the PreResume pools
// alone, maybe handed off already), and the interruption needs its own plan over every pool.
// Once re-marked, the source is no longer the recommendation's, so the duplicates of the
// interruption find it marked.
func needsMark(n *corev1.Node, source string) bool {
	if n.Annotations[v1alpha1.AnnotationInterruptedAt] == "" {
		return true
	}
	return n.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance && source != SourceRebalance
}

// sameMark reports whether a and b carry the same interruption mark.
func sameMark(a, b *corev1.Node) bool {
	return a.Annotations[v1alpha1.AnnotationInterruptedAt] == b.Annotations[v1alpha1.AnnotationInterruptedAt] &&
		a.Annotations[v1alpha1.AnnotationInterruptionSource] == b.Annotations[v1alpha1.AnnotationInterruptionSource]
}

// mark writes the interruption mark if the notice needs one (needsMark); newly reports that
// this call wrote it. Re-marking a Node a rebalance recommendation marked also removes its
// decision, in the same write, so that the decision is made again: the nodes still claimed for
// the Node count in that plan, so an active pre-resumed node means nothing more is resumed.
// A Node that is gone is not an error.
func (c *Controller) mark(ctx context.Context, node *corev1.Node, source string, at time.Time) (newly bool, err error) {
	if nodeutil.Pool(node) != "" || !needsMark(node, source) {
		return false, nil
	}
	var remarked bool
	// First attempt on the given (usually cached) copy with a resourceVersion precondition:
	// no extra read on the notice's path. A conflict means the copy was stale: read the
	// Node from the API server and try again.
	n := node.DeepCopy()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if n == nil {
			n = &corev1.Node{}
			if err := c.reader.Get(ctx, types.NamespacedName{Name: node.Name}, n); err != nil {
				return err
			}
		}
		defer func() { n = nil }()
		if !needsMark(n, source) {
			return nil
		}
		before := n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		remarked = n.Annotations[v1alpha1.AnnotationInterruptedAt] != ""
		n.Annotations[v1alpha1.AnnotationInterruptedAt] = nodeutil.FormatTime(at)
		n.Annotations[v1alpha1.AnnotationInterruptionSource] = source
		delete(n.Annotations, v1alpha1.AnnotationResumeDecision)
		if !nodeutil.HasTaint(n, v1alpha1.TaintInterrupted) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule})
		}
		if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		c.marked.Store(n.Name, n.DeepCopy())
		newly = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark node %s interrupted: %w", node.Name, err)
	}
	if newly {
		c.noteMark(node, source, remarked)
	}
	return newly, nil
}

// noteMark counts a newly written mark (lifeboat_interruptions_total, once per Node: a re-mark
// after a rebalance recommendation was counted at the recommendation) and records its event.
func (c *Controller) noteMark(node *corev1.Node, source string, remarked bool) {
	if remarked {
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s) after a rebalance recommendation; planning its resume again over every pool", source)
		return
	}
	metrics.Interruptions.WithLabelValues(node.Labels[v1alpha1.LabelInstanceType], node.Labels[v1alpha1.LabelZone]).Inc()
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s); resuming standby capacity for its protected Pods", source)
}

// preResumePools are the pools with rebalanceRecommendation PreResume. An error is returned, not
// an empty or nil set: nil means "every pool" to the plan, and empty ignores the recommendation.
func (c *Controller) preResumePools(ctx context.Context) (map[string]bool, error) {
	pools := &v1alpha1.WarmPoolList{}
	if err := c.client.List(ctx, pools); err != nil {
		return nil, fmt.Errorf("list WarmPools for their rebalance policy: %w", err)
	}
	out := map[string]bool{}
	for _, p := range pools.Items {
		if p.Spec.RebalanceRecommendation == v1alpha1.RebalancePreResume {
			out[p.Name] = true
		}
	}
	return out, nil
}

// Reconcile makes the one resume decision of an interrupted Node. It prepares the Node's part
// (its protected and DaemonSet Pods, from the cache) and waits for the batch it joins.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	base := ctx
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", req.Name))
	r, err := c.prepare(ctx, req.NamespacedName)
	if err != nil || r == nil {
		c.batch.forget(req.Name)
		if err != nil {
			c.markNotice(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	// The batch runs on the context of its first request, without that Node in its logger.
	r.ctx = base
	c.batch.add(r)
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
	nt := c.pendingNotice(name)
	if nt == nil {
		return
	}
	node := &corev1.Node{}
	if err := c.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		c.resolveNotice(name, nt, client.IgnoreNotFound(err))
		return
	}
	_, err := c.mark(ctx, node, nt.source, nt.at)
	c.resolveNotice(name, nt, err)
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
	if err := c.client.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	r.items, r.daemonSets = podsToPlace(pods.Items)
	if len(r.items) == 0 {
		// A decision is made once per interruption, and "none" resumes nothing: before it,
		// the API server confirms that the Node holds no protected Pod (the cache may not show
		// Pods bound moments before the notice). Off the batch's path: the Node leaves the
		// batch it was announced to, so the batch's StartInstances does not wait for the read.
		c.batch.forget(node.Name)
		if err := c.reader.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node.Name}); err != nil {
			return nil, fmt.Errorf("confirm that node %s holds no protected Pod: %w", node.Name, err)
		}
		r.items, r.daemonSets = podsToPlace(pods.Items)
	}
	if node.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance {
		if r.pools, err = c.preResumePools(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// podsToPlace sorts a Node's Pods: the protected ones need a place on a lifeboat; the DaemonSet
// Pods come along (their DaemonSets run on the lifeboat node too); terminal Pods need nothing.
func podsToPlace(pods []corev1.Pod) (items []sizing.Item, daemonSets []daemonSetPod) {
	for i := range pods {
		p := &pods[i]
		if nodeutil.IsTerminal(p) {
			continue
		}
		if ds, ok := daemonSetPodOf(p); ok {
			daemonSets = append(daemonSets, ds)
			continue
		}
		if p.Labels[v1alpha1.LabelProtected] == "true" {
			items = append(items, sizing.Item{Name: p.Namespace + "/" + p.Name, Resources: sizing.PodResources(nodeutil.PodRequests(p))})
		}
	}
	return items, daemonSets
}

// interruptedNode returns the Node if it waits for a decision, else nil. It reads the cache
// unless the cache may be behind this process's own writes: the answer to its mark is used when
// the cache does not show that mark yet (no mark, or the rebalance recommendation's mark it
// replaced), and a Node it recorded a decision on is read from the API server (the cache may not
// show the decision yet, or the activator reopened it, or a later interruption re-marked it).
// A Node with a pending queue notice that needs its mark is returned carrying the mark in
// memory (withMark), with the copy it was read as (unmarked) and the notice: the decision
// writes the mark. A pending notice whose Node is marked already, gone or a pool node is
// resolved here.
func (c *Controller) interruptedNode(ctx context.Context, key types.NamespacedName) (node, unmarked *corev1.Node, nt *notice, err error) {
	nt = c.pendingNotice(key.Name)
	node = &corev1.Node{}
	// Read only (every write works on a copy): no deep copy from the cache.
	err = c.client.Get(ctx, key, node, client.UnsafeDisableDeepCopy)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, nil, err
	}
	_, decidedHere := c.decided.Load(key.Name)
	if decidedHere && err == nil && node.Annotations[v1alpha1.AnnotationResumeDecision] != "" && nt == nil {
		// The cache has caught up with the decision; later changes (a reopened decision)
		// arrive through it in order. (A new notice reads the API server: the cache may
		// show the decision but not a later change.)
		c.decided.Delete(key.Name)
		decidedHere = false
	}
	m, markedHere := c.marked.Load(key.Name)
	switch {
	case decidedHere:
		node = &corev1.Node{}
		if err := c.reader.Get(ctx, key, node); err != nil {
			if apierrors.IsNotFound(err) {
				c.decided.Delete(key.Name)
				c.resolveNotice(key.Name, nt, nil)
			}
			return nil, nil, nil, client.IgnoreNotFound(err)
		}
	case markedHere && (err != nil || !sameMark(node, m.(*corev1.Node))):
		node = m.(*corev1.Node).DeepCopy()
	case err == nil && (nt != nil || interrupted(node)):
	default:
		// Not interrupted as far as this process knows (a stale cache gets the Node watch's
		// event later), or decided on the mark this process wrote, or gone.
		c.marked.Delete(key.Name)
		c.resolveNotice(key.Name, nt, nil)
		return nil, nil, nil, nil
	}
	c.marked.Delete(key.Name)
	if nodeutil.Pool(node) != "" {
		c.resolveNotice(key.Name, nt, nil)
		return nil, nil, nil, nil
	}
	if nt != nil {
		if source := c.sourceOf(nt); needsMark(node, source) {
			return withMark(node, source, nt.at), node, nt, nil
		}
		// Marked already (another source, or this process's own mark): the mark serves the
		// notice; the decision follows from it.
		c.resolveNotice(key.Name, nt, nil)
	}
	if !interrupted(node) {
		return nil, nil, nil, nil
	}
	return node, nil, nil, nil
}

// ResumeNode starts a claimed node's instance. On insufficient capacity (the instance type of a
// hibernated instance cannot change) it terminates the instance and unclaims the Node, and
// returns iceErr so the caller plans again with the remaining standby nodes; the pool launches a
// replacement.
func ResumeNode(ctx context.Context, c client.Client, instances cloud.Instances, recorder events.EventRecorder, n *corev1.Node) (err, iceErr error) {
	return afterResume(ctx, c, instances, recorder, n, instances.Resume(ctx, nodeutil.InstanceID(n)))
}

// afterResume handles StartInstances' answer for a claimed node's instance: see ResumeNode.
func afterResume(ctx context.Context, c client.Client, instances cloud.Instances, recorder events.EventRecorder, n *corev1.Node, rerr error) (err, iceErr error) {
	id := nodeutil.InstanceID(n)
	switch {
	case rerr == nil:
		return nil, nil
	case errors.Is(rerr, cloud.ErrIncorrectState):
		// IncorrectInstanceState: still stopping (retry later) or already running.
		return rerr, nil
	case errors.Is(rerr, cloud.ErrInsufficientCapacity):
		recorder.Eventf(n, nil, corev1.EventTypeWarning, v1alpha1.EventResumeFailed, "Resume", "No capacity to resume %s (%v): terminating it and resuming another standby node", id, rerr)
		if terr := instances.Terminate(ctx, id); terr != nil {
			return terr, rerr
		}
		before := n.DeepCopy()
		delete(n.Labels, v1alpha1.LabelResumedFor)
		n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateDraining)
		if perr := c.Patch(ctx, n, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
			return perr, rerr
		}
		return nil, rerr
	default:
		return fmt.Errorf("resume %s (node %s): %w", id, n.Name, rerr), nil
	}
}

// candidateOrder spreads concurrent decisions (a correlated burst interrupts many Nodes at
// once) over different standby nodes of equal size: each interrupted Node prefers candidates in
// its own hash order, so the decisions rarely race for the same node and conflict.
func candidateOrder(interrupted, candidate string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(interrupted))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(candidate))
	return h.Sum64()
}

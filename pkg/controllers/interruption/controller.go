package interruption

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/telemetry"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
	pooltelemetry "github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
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
}

// New returns the controller. client reads from the informer cache; reader must read from the
// API server directly (the manager's APIReader): it is used where a stale read could resume
// twice — the standby nodes already claimed for an interrupted Node, and a Node whose decision
// this process may just have recorded. Standby candidates come from the cache: a stale candidate
// is rejected by the claim's resourceVersion precondition and the plan is made again.
func New(c client.Client, reader client.Reader, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder, store *telemetry.Store) *Controller {
	ctrl := &Controller{client: c, reader: reader, cloud: instances, clock: clk, recorder: recorder, telemetry: store, trigger: make(chan event.GenericEvent, 1024), reserved: map[string]string{}}
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

// HandleBatch is the SQS consumer's handler for a receive batch: it marks the Nodes of the
// messages' instances interrupted, in parallel, and announces them to the decision batcher so
// that their decisions are made as one batch as soon as the last mark is written. A message's
// error is nil once the marks of all its Nodes are written: the consumer then deletes it
// (the mark is the durable record the decision follows from).
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
			if err := c.client.List(ctx, list, client.MatchingFields{IndexNodeInstanceID: id}); err != nil {
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
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, name := range order {
		t := targets[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			newly, err := c.mark(ctx, t.node, t.source, received)
			if !newly {
				c.batch.forget(name)
			}
			if err != nil {
				mu.Lock()
				for _, i := range t.msgs {
					errs[i] = errors.Join(errs[i], err)
				}
				mu.Unlock()
				return
			}
			c.requestDecision(name)
		}()
	}
	wg.Wait()
	return errs
}

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
	return reconcile.Result{}, c.Mark(ctx, node, SourceKarpenterEvent, c.clock.Now())
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

// requestDecision triggers the decision reconciler for the Node.
func (c *Controller) requestDecision(name string) {
	select {
	case c.trigger <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
	default:
		// The Node watch delivers the marked Node anyway.
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
	switch {
	case newly && remarked:
		// Counted once per Node (lifeboat_interruptions_total): at the recommendation.
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s) after a rebalance recommendation; planning its resume again over every pool", source)
	case newly:
		metrics.Interruptions.WithLabelValues(node.Labels[v1alpha1.LabelInstanceType], node.Labels[v1alpha1.LabelZone]).Inc()
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s); resuming standby capacity for its protected Pods", source)
	}
	return newly, nil
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
		return reconcile.Result{}, err
	}
	// The batch runs on the context of its first request, without that Node in its logger.
	r.ctx = base
	c.batch.add(r)
	select {
	case res := <-r.done:
		return reconcile.Result{Requeue: res.requeue}, res.err
	case <-ctx.Done():
		return reconcile.Result{}, ctx.Err()
	}
}

// prepare returns the Node's decision request, or nil if the Node waits for no decision.
func (c *Controller) prepare(ctx context.Context, key types.NamespacedName) (*decisionRequest, error) {
	node, err := c.interruptedNode(ctx, key)
	if err != nil || node == nil {
		return nil, err
	}
	r := &decisionRequest{ctx: ctx, node: node, done: make(chan decisionResult, 1)}
	r.noticeAt, _ = nodeutil.Time(node.Annotations, v1alpha1.AnnotationInterruptedAt)
	// What needs a place: the protected Pods still bound to the Node; and what comes along:
	// its DaemonSet Pods (their DaemonSets run on the lifeboat node too).
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node.Name}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if nodeutil.IsTerminal(p) {
			continue
		}
		if ds, ok := daemonSetPodOf(p); ok {
			r.daemonSets = append(r.daemonSets, ds)
			continue
		}
		if p.Labels[v1alpha1.LabelProtected] == "true" {
			r.items = append(r.items, sizing.Item{Name: p.Namespace + "/" + p.Name, Resources: sizing.PodResources(nodeutil.PodRequests(p))})
		}
	}
	if node.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance {
		if r.pools, err = c.preResumePools(ctx); err != nil {
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
func (c *Controller) interruptedNode(ctx context.Context, key types.NamespacedName) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.client.Get(ctx, key, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	_, decidedHere := c.decided.Load(key.Name)
	if decidedHere && err == nil && node.Annotations[v1alpha1.AnnotationResumeDecision] != "" {
		// The cache has caught up with the decision; later changes (a reopened decision)
		// arrive through it in order.
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
			}
			return nil, client.IgnoreNotFound(err)
		}
	case markedHere && (err != nil || !sameMark(node, m.(*corev1.Node))):
		node = m.(*corev1.Node).DeepCopy()
	case err == nil && interrupted(node):
	default:
		// Not interrupted as far as this process knows (a stale cache gets the Node watch's
		// event later), or decided on the mark this process wrote.
		c.marked.Delete(key.Name)
		return nil, nil
	}
	c.marked.Delete(key.Name)
	if !interrupted(node) || nodeutil.Pool(node) != "" {
		return nil, nil
	}
	return node, nil
}

// decision is one interrupted Node's progress through a batch.
type decision struct {
	*decisionRequest
	plan sizing.ResumePlan
	// toStart are the pool nodes claimed for the Node (earlier claims included).
	toStart []*corev1.Node
	result  decisionResult
	// finished: the result is set; the Node takes no further part in the batch.
	finished bool
}

func (d *decision) finish(res decisionResult) {
	d.result, d.finished = res, true
}

// decideBatch makes the decisions of a batch of interrupted Nodes: plan them together, claim
// in parallel, start every claimed instance with one StartInstances call, record the decisions.
// Each request's done channel receives its result.
func (c *Controller) decideBatch(batch []*decisionRequest) {
	if len(batch) == 0 {
		return
	}
	ctx := batch[0].ctx
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("batchNodes", len(batch)))
	byNode := make(map[string]*decisionRequest, len(batch))
	decisions := make([]*decision, 0, len(batch))
	for _, r := range batch {
		if _, dup := byNode[r.node.Name]; dup {
			// Not expected (the workqueue runs one reconcile per Node at a time): the
			// duplicate comes back after this batch and finds the decision recorded.
			r.done <- decisionResult{requeue: true}
			continue
		}
		byNode[r.node.Name] = r
		decisions = append(decisions, &decision{decisionRequest: r})
	}
	// Reservations go before the results: a requeued Node's next pass plans without them.
	defer func() {
		for _, d := range decisions {
			d.done <- d.result
		}
	}()
	defer c.release(byNode)

	c.claimAll(ctx, decisions)
	c.startAll(ctx, decisions)
	c.recordAll(ctx, decisions)
}

// claimAll plans the batch and claims the planned standby nodes (label state=active,
// resumed-for=<interrupted Node>), each with a resourceVersion precondition. The nodes already
// claimed for the batch's Nodes are read from the API server, in one list: a decision that a
// conflict or a restart interrupted must not claim more. Candidates come from the cache; a claim
// that conflicts (a stale candidate, or another writer took it) plans that Node again from the
// API server, at most three times, then requeues it. Claims that succeeded stay claimed and the
// next plan counts them.
func (c *Controller) claimAll(ctx context.Context, decisions []*decision) {
	pending := decisions
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 3 {
			for _, d := range pending {
				d.finish(decisionResult{requeue: true})
			}
			return
		}
		names := make([]string, 0, len(pending))
		for _, d := range pending {
			names = append(names, d.node.Name)
		}
		claimedFor, err := requirementIn(v1alpha1.LabelResumedFor, names)
		if err != nil {
			finishAll(pending, err)
			return
		}
		claimedList := &corev1.NodeList{}
		if err := c.reader.List(ctx, claimedList, client.MatchingLabelsSelector{Selector: claimedFor}); err != nil {
			finishAll(pending, err)
			return
		}
		var standbyReader client.Reader = c.client
		if attempt > 0 {
			standbyReader = c.reader
		}
		standby := &corev1.NodeList{}
		if err := standbyReader.List(ctx, standby, client.MatchingLabels{v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}); err != nil {
			finishAll(pending, err)
			return
		}

		byName := map[string]*corev1.Node{}
		claimedBy := map[string][]*corev1.Node{}
		for i := range claimedList.Items {
			n := &claimedList.Items[i]
			byName[n.Name] = n
			if nodeutil.State(n) != v1alpha1.NodeStateActive {
				// Handed off (draining) since an earlier decision for the Node — a rebalance
				// recommendation's pre-resume — and cordoned: it holds nothing more.
				continue
			}
			owner := n.Labels[v1alpha1.LabelResumedFor]
			claimedBy[owner] = append(claimedBy[owner], n)
		}
		var candidates []poolNode
		for i := range standby.Items {
			n := &standby.Items[i]
			if _, claimed := byName[n.Name]; claimed || nodeutil.Pool(n) == "" || nodeutil.InstanceID(n) == "" || n.Labels[v1alpha1.LabelResumedFor] != "" {
				continue
			}
			byName[n.Name] = n
			candidates = append(candidates, poolNodeOf(n, c.daemonSetPodsOn(ctx, n.Name)))
		}
		demands := make([]demand, 0, len(pending))
		for _, d := range pending {
			dm := demand{Node: d.node.Name, Items: d.items, DaemonSets: d.daemonSets, Pools: d.pools}
			for _, n := range claimedBy[d.node.Name] {
				dm.Claimed = append(dm.Claimed, poolNodeOf(n, c.daemonSetPodsOn(ctx, n.Name)))
			}
			demands = append(demands, dm)
		}
		plans := c.reservePlans(demands, candidates)

		// Claim first (the durable record, with a resourceVersion precondition so a Node is
		// never claimed twice), then start.
		now := c.clock.Now()
		type claimResult struct {
			node     *corev1.Node
			conflict bool
			err      error
		}
		results := make([][]claimResult, len(pending))
		var wg sync.WaitGroup
		for k, d := range pending {
			d.plan = plans[d.node.Name]
			results[k] = make([]claimResult, len(d.plan.Resume))
			for idx, name := range d.plan.Resume {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := byName[name].DeepCopy()
					before := n.DeepCopy()
					nodeutil.EnsureMaps(n)
					n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateActive)
					n.Labels[v1alpha1.LabelResumedFor] = d.node.Name
					n.Annotations[v1alpha1.AnnotationActivatedAt] = nodeutil.FormatTime(now)
					n.Annotations[v1alpha1.AnnotationInterruptedAt] = d.node.Annotations[v1alpha1.AnnotationInterruptedAt]
					err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
					switch {
					case err == nil:
						results[k][idx] = claimResult{node: n}
					case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
						// Someone changed the candidate (another writer claimed it, or the
						// cached copy was stale): plan again.
						results[k][idx] = claimResult{conflict: true}
					default:
						results[k][idx] = claimResult{err: fmt.Errorf("claim %s: %w", name, err)}
					}
				}()
			}
		}
		wg.Wait()

		var again []*decision
		for k, d := range pending {
			var (
				conflict bool
				errs     []error
			)
			d.toStart = d.toStart[:0]
			d.toStart = append(d.toStart, claimedBy[d.node.Name]...)
			for _, r := range results[k] {
				switch {
				case r.err != nil:
					errs = append(errs, r.err)
				case r.conflict:
					conflict = true
				default:
					d.toStart = append(d.toStart, r.node)
				}
			}
			switch {
			case len(errs) > 0:
				d.finish(decisionResult{err: errors.Join(errs...)})
			case conflict:
				again = append(again, d)
			}
		}
		pending = again
	}
}

func finishAll(ds []*decision, err error) {
	for _, d := range ds {
		d.finish(decisionResult{err: err})
	}
}

// requirementIn selects objects whose label key has one of values.
func requirementIn(key string, values []string) (labels.Selector, error) {
	req, err := labels.NewRequirement(key, selection.In, values)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*req), nil
}

// daemonSetPodsOn are the DaemonSet Pods bound to a pool node, from the cache (a pool node
// holds few Pods). A failed read counts none.
func (c *Controller) daemonSetPodsOn(ctx context.Context, node string) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node}); err != nil {
		return nil
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if nodeutil.IsDaemonSetPod(&p) {
			out = append(out, p)
		}
	}
	return out
}

// startAll starts the instances of every node the batch claimed with one StartInstances call
// (cloud.BatchResumer; one call per instance, in parallel, where the implementation lacks it).
// A node whose instance has no capacity (ICE) is terminated and unclaimed, and its interrupted
// Node requeued to plan again with the remaining standby nodes; other per-instance errors fail
// their Node's decision (retried with backoff). Nodes started by an earlier pass are skipped:
// the activator re-drives them if they do not come up.
func (c *Controller) startAll(ctx context.Context, decisions []*decision) {
	owner := map[string]*decision{}
	nodeOf := map[string]*corev1.Node{}
	var ids []string
	for _, d := range decisions {
		if d.finished {
			continue
		}
		for _, n := range d.toStart {
			id := nodeutil.InstanceID(n)
			if n.Annotations[v1alpha1.AnnotationStartRequestedAt] != "" || id == "" {
				continue
			}
			if _, dup := nodeOf[id]; dup {
				continue
			}
			owner[id], nodeOf[id] = d, n
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	results := cloud.ResumeAll(ctx, c.cloud, ids)
	startedAt := c.clock.Now()

	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = map[*decision][]error{}
		ice  = map[*decision]bool{}
	)
	for _, id := range ids {
		n, d := nodeOf[id], owner[id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ferr, iceErr := afterResume(ctx, c.client, c.cloud, c.recorder, n, results[id])
			if ferr == nil && iceErr == nil {
				if !d.noticeAt.IsZero() {
					metrics.ResumeSeconds.WithLabelValues("start_instances").Observe(startedAt.Sub(d.noticeAt).Seconds())
				}
				before := n.DeepCopy()
				nodeutil.EnsureMaps(n)
				n.Annotations[v1alpha1.AnnotationStartRequestedAt] = nodeutil.FormatTime(startedAt)
				if perr := c.client.Patch(ctx, n, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
					klog.FromContext(ctx).Error(perr, "Recording StartInstances on the node", "node", klog.KObj(n))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if iceErr != nil {
				ice[d] = true
			}
			if ferr != nil {
				errs[d] = append(errs[d], ferr)
			}
		}()
	}
	wg.Wait()
	for _, d := range decisions {
		switch {
		case d.finished:
		case len(errs[d]) > 0:
			d.finish(decisionResult{err: errors.Join(errs[d]...)})
		case ice[d]:
			d.finish(decisionResult{requeue: true})
		}
	}
}

// recordAll records the decisions of the batch's Nodes that got this far (their claimed nodes
// are started), in parallel, each on the copy its plan was made from.
func (c *Controller) recordAll(ctx context.Context, decisions []*decision) {
	var wg sync.WaitGroup
	for _, d := range decisions {
		if d.finished {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.finish(c.record(ctx, d))
		}()
	}
	wg.Wait()
}

// errMarkChanged: the Node was re-marked (an interruption after a rebalance recommendation)
// while its decision was being made for the earlier mark.
var errMarkChanged = errors.New("interruption mark changed during the decision")

// record writes the Node's decision: the names of its lifeboat nodes, or "none". If the Node
// was re-marked since the plan, nothing is written and the Node is requeued: the decision is
// made again for the new mark, counting what this one claimed.
func (c *Controller) record(ctx context.Context, d *decision) decisionResult {
	log := klog.FromContext(ctx).WithValues("node", d.node.Name)
	decisionValue := "none"
	var names []string
	for _, n := range d.toStart {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	if len(names) > 0 {
		decisionValue = strings.Join(names, ",")
	}
	// The decision goes on the copy the plan was made from (precondition: nothing changed it
	// since); on a conflict, on a fresh read.
	fresh := d.node.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fresh == nil {
			fresh = &corev1.Node{}
			if err := c.reader.Get(ctx, types.NamespacedName{Name: d.node.Name}, fresh); err != nil {
				return err
			}
			if !sameMark(fresh, d.node) {
				return errMarkChanged
			}
		}
		defer func() { fresh = nil }()
		before := fresh.DeepCopy()
		nodeutil.EnsureMaps(fresh)
		fresh.Annotations[v1alpha1.AnnotationResumeDecision] = decisionValue
		return c.client.Patch(ctx, fresh, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	switch {
	case apierrors.IsNotFound(err):
		return decisionResult{}
	case errors.Is(err, errMarkChanged):
		log.V(1).Info("Interruption mark changed during the decision; planning again", "planned", decisionValue)
		return decisionResult{requeue: true}
	case err != nil:
		return decisionResult{err: fmt.Errorf("record decision: %w", err)}
	}
	c.decided.Store(d.node.Name, struct{}{})
	// Telemetry after the decision, off the path from notice to StartInstances; it is
	// idempotent per Node, so a repeated pass records nothing twice.
	if c.telemetry != nil {
		if _, err := c.telemetry.Record(ctx, d.node.Name, pooltelemetry.PoolKeyFromLabels(d.node.Labels), d.noticeAt); err != nil {
			log.Error(err, "Recording interruption telemetry")
		}
	}
	switch {
	case len(d.plan.Unplaced) > 0:
		metrics.ResumeDecisions.WithLabelValues("insufficient_standby").Inc()
		c.recorder.Eventf(d.node, nil, corev1.EventTypeWarning, v1alpha1.EventNoStandby, "Resume", "Resumed %s; %d protected Pods fit no standby node (%s): raise the WarmPool size", decisionValue, len(d.plan.Unplaced), strings.Join(d.plan.Unplaced, ", "))
	case len(names) == 0:
		metrics.ResumeDecisions.WithLabelValues("none_needed").Inc()
	default:
		metrics.ResumeDecisions.WithLabelValues("resumed").Inc()
		c.recorder.Eventf(d.node, nil, corev1.EventTypeNormal, v1alpha1.EventResumed, "Resume", "Resumed %s for %d protected Pods", decisionValue, len(d.items))
	}
	log.V(1).Info("Resume decision", "resumed", decisionValue, "pods", len(d.items), "daemonSetPods", len(d.daemonSets), "unplaced", len(d.plan.Unplaced))
	return decisionResult{}
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

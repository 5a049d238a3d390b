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

// Controller decides and carries out resumes for interrupted Nodes.
type Controller struct {
	client    client.Client
	reader    client.Reader
	cloud     cloud.Instances
	clock     clock.Clock
	recorder  events.EventRecorder
	telemetry *telemetry.Store

	trigger chan event.GenericEvent
	// marked holds the API server's answer to this process's own interruption mark, by Node
	// name, until the decision consumes it: the decision is triggered right after the mark,
	// usually before the informer has delivered it, and the answer is newer than the cache.
	marked sync.Map // string → *corev1.Node
	// decided remembers the Nodes this process recorded a decision on. A cached copy may not
	// show that decision yet; for these Nodes the decision re-reads the Node from the API
	// server before acting (the activator may also have reopened the decision since).
	decided sync.Map // string → struct{}
	// reserved are the standby nodes an in-flight decision of this process planned to claim,
	// by the interrupted Node it plans for. Concurrent decisions of a burst plan around each
	// other's picks instead of racing for the same node and losing a round trip to the
	// conflict; the claim's resourceVersion precondition still guards against other writers.
	reserveMu sync.Mutex
	reserved  map[string]string // standby node → interrupted node
}

// New returns the controller. client reads from the informer cache; reader must read from the
// API server directly (the manager's APIReader): it is used where a stale read could resume
// twice — the standby nodes already claimed for an interrupted Node, and a Node whose decision
// this process may just have recorded. Standby candidates come from the cache: a stale candidate
// is rejected by the claim's resourceVersion precondition and the plan is made again.
func New(c client.Client, reader client.Reader, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder, store *telemetry.Store) *Controller {
	return &Controller{client: c, reader: reader, cloud: instances, clock: clk, recorder: recorder, telemetry: store, trigger: make(chan event.GenericEvent, 1024), reserved: map[string]string{}}
}

// reserve plans under the reservation lock: candidates reserved by other decisions are left
// out, and the plan's picks are reserved for interrupted.
func (c *Controller) reserve(interrupted string, items []sizing.Item, claimed, candidates []sizing.Bin) sizing.ResumePlan {
	c.reserveMu.Lock()
	defer c.reserveMu.Unlock()
	free := candidates[:0:0]
	for _, b := range candidates {
		if owner, ok := c.reserved[b.Name]; !ok || owner == interrupted {
			free = append(free, b)
		}
	}
	plan := sizing.PlanResume(items, claimed, free)
	for _, name := range plan.Resume {
		c.reserved[name] = interrupted
	}
	return plan
}

// release drops interrupted's reservations (its decision is over; its claims are in the API).
func (c *Controller) release(interrupted string) {
	c.reserveMu.Lock()
	defer c.reserveMu.Unlock()
	for name, owner := range c.reserved {
		if owner == interrupted {
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
		WithOptions(controller.Options{MaxConcurrentReconciles: 16}).
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
		Complete(reconcile.Func(c.reconcileKarpenterEvent))
}

// HandleMessage is the SQS consumer's handler: it marks the Nodes of the message's instances
// interrupted. Its success (the mark is written) lets the consumer delete the message.
func (c *Controller) HandleMessage(ctx context.Context, msg cloudinterruption.Message) error {
	signal := Classify(msg)
	if signal == Ignore {
		return nil
	}
	if signal == Rebalance && len(c.preResumePools(ctx)) == 0 {
		return nil
	}
	source := "sqs/" + string(msg.Kind)
	// The notice's receipt is what the resume latency is measured from (EventBridge's event
	// time is in lifeboat_cloud_interruption_message_age_seconds).
	received := c.clock.Now()
	var errs []error
	for _, id := range msg.InstanceIDs {
		list := &corev1.NodeList{}
		if err := c.client.List(ctx, list, client.MatchingFields{IndexNodeInstanceID: id}); err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range list.Items {
			if err := c.Mark(ctx, &list.Items[i], source, received); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
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
	if node.Annotations[v1alpha1.AnnotationInterruptedAt] == "" {
		newly := false
		// First attempt on the given (usually cached) copy with a resourceVersion precondition:
		// no extra read on the notice's path. A conflict means the copy was stale: read the
		// Node from the API server and try again.
		n := node.DeepCopy()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if n == nil {
				n = &corev1.Node{}
				if err := c.reader.Get(ctx, types.NamespacedName{Name: node.Name}, n); err != nil {
					return err
				}
			}
			defer func() { n = nil }()
			if n.Annotations[v1alpha1.AnnotationInterruptedAt] != "" {
				return nil
			}
			before := n.DeepCopy()
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[v1alpha1.AnnotationInterruptedAt] = nodeutil.FormatTime(at)
			n.Annotations[v1alpha1.AnnotationInterruptionSource] = source
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
			return nil
		}
		if err != nil {
			return fmt.Errorf("mark node %s interrupted: %w", node.Name, err)
		}
		if newly {
			metrics.Interruptions.WithLabelValues(node.Labels[v1alpha1.LabelInstanceType], node.Labels[v1alpha1.LabelZone]).Inc()
			c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s); resuming standby capacity for its protected Pods", source)
		}
	}
	select {
	case c.trigger <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}}:
	default:
		// The Node watch delivers the marked Node anyway.
	}
	return nil
}

func (c *Controller) preResumePools(ctx context.Context) map[string]bool {
	pools := &v1alpha1.WarmPoolList{}
	if err := c.client.List(ctx, pools); err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, p := range pools.Items {
		if p.Spec.RebalanceRecommendation == v1alpha1.RebalancePreResume {
			out[p.Name] = true
		}
	}
	return out
}

// Reconcile makes the one resume decision of an interrupted Node.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("node", req.Name)
	ctx = klog.NewContext(ctx, log)
	node, err := c.interruptedNode(ctx, req.NamespacedName)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	noticeAt, _ := nodeutil.Time(node.Annotations, v1alpha1.AnnotationInterruptedAt)

	// What needs a place: the protected Pods still bound to the Node.
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	var items []sizing.Item
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[v1alpha1.LabelProtected] != "true" || nodeutil.IsTerminal(p) || nodeutil.IsDaemonSetPod(p) {
			continue
		}
		items = append(items, sizing.Item{Name: p.Namespace + "/" + p.Name, Resources: sizing.PodResources(nodeutil.PodRequests(p))})
	}

	var allowed map[string]bool
	if node.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance {
		allowed = c.preResumePools(ctx)
	}
	defer c.release(node.Name)
	// The first plan uses the cached standby nodes; a claim that conflicts (a stale candidate,
	// or another decision took it) plans again from the API server.
	var (
		plan    sizing.ResumePlan
		toStart []*corev1.Node
	)
	for attempt := 0; ; attempt++ {
		var conflict bool
		plan, toStart, conflict, err = c.claim(ctx, node, items, allowed, attempt > 0)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !conflict {
			break
		}
		if attempt == 2 {
			return reconcile.Result{Requeue: true}, nil
		}
	}

	failed, err := c.start(ctx, node, toStart, noticeAt)
	if err != nil {
		return reconcile.Result{}, err
	}
	if failed {
		return reconcile.Result{Requeue: true}, nil
	}

	decision := "none"
	var names []string
	for _, n := range toStart {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	if len(names) > 0 {
		decision = strings.Join(names, ",")
	}
	// The decision goes on the copy the plan was made from (precondition: nothing changed it
	// since); on a conflict, on a fresh read.
	fresh := node.DeepCopy()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fresh == nil {
			fresh = &corev1.Node{}
			if err := c.reader.Get(ctx, req.NamespacedName, fresh); err != nil {
				return err
			}
		}
		defer func() { fresh = nil }()
		before := fresh.DeepCopy()
		nodeutil.EnsureMaps(fresh)
		fresh.Annotations[v1alpha1.AnnotationResumeDecision] = decision
		return c.client.Patch(ctx, fresh, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("record decision: %w", err)
	}
	c.decided.Store(node.Name, struct{}{})
	// Telemetry after the decision, off the path from notice to StartInstances; it is
	// idempotent per Node, so a repeated pass records nothing twice.
	if c.telemetry != nil {
		if _, err := c.telemetry.Record(ctx, node.Name, pooltelemetry.PoolKeyFromLabels(node.Labels), noticeAt); err != nil {
			log.Error(err, "Recording interruption telemetry")
		}
	}
	switch {
	case len(plan.Unplaced) > 0:
		metrics.ResumeDecisions.WithLabelValues("insufficient_standby").Inc()
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventNoStandby, "Resume", "Resumed %s; %d protected Pods fit no standby node (%s): raise the WarmPool size", decision, len(plan.Unplaced), strings.Join(plan.Unplaced, ", "))
	case len(names) == 0:
		metrics.ResumeDecisions.WithLabelValues("none_needed").Inc()
	default:
		metrics.ResumeDecisions.WithLabelValues("resumed").Inc()
		c.recorder.Eventf(node, nil, corev1.EventTypeNormal, v1alpha1.EventResumed, "Resume", "Resumed %s for %d protected Pods", decision, len(items))
	}
	log.V(1).Info("Resume decision", "resumed", decision, "pods", len(items), "unplaced", len(plan.Unplaced))
	return reconcile.Result{}, nil
}

// interruptedNode returns the Node if it waits for a decision, else nil. It reads the cache
// unless the cache may be behind this process's own writes: the answer to its mark is used when
// the cache does not show the mark yet, and a Node it recorded a decision on is read from the
// API server (the cache may not show the decision yet, or the activator reopened it).
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
	switch {
	case decidedHere:
		node = &corev1.Node{}
		if err := c.reader.Get(ctx, key, node); err != nil {
			if apierrors.IsNotFound(err) {
				c.decided.Delete(key.Name)
			}
			return nil, client.IgnoreNotFound(err)
		}
	case err == nil && interrupted(node):
	default:
		m, ok := c.marked.Load(key.Name)
		if !ok {
			// Not interrupted as far as this process knows; a stale cache gets the Node
			// watch's event later.
			return nil, nil
		}
		node = m.(*corev1.Node).DeepCopy()
	}
	c.marked.Delete(key.Name)
	if !interrupted(node) || nodeutil.Pool(node) != "" {
		return nil, nil
	}
	return node, nil
}

// claim plans the resume of node's protected Pods (items) and claims the planned standby nodes
// (label state=active, resumed-for=node) with a resourceVersion precondition each. Nodes
// already claimed for node are always read from the API server: a decision that a conflict or a
// restart interrupted must not claim more. Candidates come from the cache unless live is set.
// conflict reports a claim that lost to a concurrent change; the nodes claimed before it stay
// claimed and the next plan counts them.
func (c *Controller) claim(ctx context.Context, node *corev1.Node, items []sizing.Item, allowed map[string]bool, live bool) (plan sizing.ResumePlan, toStart []*corev1.Node, conflict bool, err error) {
	claimedList := &corev1.NodeList{}
	if err := c.reader.List(ctx, claimedList, client.MatchingLabels{v1alpha1.LabelResumedFor: node.Name}); err != nil {
		return plan, nil, false, err
	}
	var standbyReader client.Reader = c.client
	if live {
		standbyReader = c.reader
	}
	standby := &corev1.NodeList{}
	if err := standbyReader.List(ctx, standby, client.MatchingLabels{v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}); err != nil {
		return plan, nil, false, err
	}
	byName := map[string]*corev1.Node{}
	var claimed, candidates []sizing.Bin
	for i := range claimedList.Items {
		n := &claimedList.Items[i]
		byName[n.Name] = n
		claimed = append(claimed, sizing.Bin{Name: n.Name, Free: sizing.FromList(n.Status.Allocatable)})
	}
	for i := range standby.Items {
		n := &standby.Items[i]
		if _, mine := byName[n.Name]; mine || nodeutil.Pool(n) == "" || nodeutil.InstanceID(n) == "" || n.Labels[v1alpha1.LabelResumedFor] != "" || allowed != nil && !allowed[nodeutil.Pool(n)] {
			continue
		}
		byName[n.Name] = n
		candidates = append(candidates, sizing.Bin{Name: n.Name, Free: sizing.FromList(n.Status.Allocatable)})
	}
	sort.Slice(candidates, func(i, j int) bool {
		return candidateOrder(node.Name, candidates[i].Name) < candidateOrder(node.Name, candidates[j].Name)
	})
	plan = c.reserve(node.Name, items, claimed, candidates)

	// Claim first (the durable record, with a resourceVersion precondition so a Node is never
	// claimed twice), then start.
	now := c.clock.Now()
	toStart = make([]*corev1.Node, 0, len(plan.Resume)+len(claimed))
	for i := range claimedList.Items {
		toStart = append(toStart, &claimedList.Items[i])
	}
	for _, name := range plan.Resume {
		n := byName[name].DeepCopy()
		before := n.DeepCopy()
		nodeutil.EnsureMaps(n)
		n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateActive)
		n.Labels[v1alpha1.LabelResumedFor] = node.Name
		n.Annotations[v1alpha1.AnnotationActivatedAt] = nodeutil.FormatTime(now)
		n.Annotations[v1alpha1.AnnotationInterruptedAt] = node.Annotations[v1alpha1.AnnotationInterruptedAt]
		if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// Someone changed the candidate (another decision claimed it, or the cached
				// copy was stale): plan again.
				return plan, nil, true, nil
			}
			return plan, nil, false, fmt.Errorf("claim %s: %w", name, err)
		}
		toStart = append(toStart, n)
	}
	return plan, toStart, false, nil
}

// start issues StartInstances for the claimed nodes in parallel. A node whose instance has no
// capacity (ICE) is terminated and unclaimed; failed reports that a new plan is needed.
func (c *Controller) start(ctx context.Context, interrupted *corev1.Node, nodes []*corev1.Node, noticeAt time.Time) (failed bool, err error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for _, n := range nodes {
		if n.Annotations[v1alpha1.AnnotationStartRequestedAt] != "" {
			continue // started by an earlier pass; the activator re-drives it if it does not come up
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ferr, iceErr := ResumeNode(ctx, c.client, c.cloud, c.recorder, n)
			if ferr == nil && iceErr == nil {
				if !noticeAt.IsZero() {
					metrics.ResumeSeconds.WithLabelValues("start_instances").Observe(c.clock.Since(noticeAt).Seconds())
				}
				before := n.DeepCopy()
				nodeutil.EnsureMaps(n)
				n.Annotations[v1alpha1.AnnotationStartRequestedAt] = nodeutil.FormatTime(c.clock.Now())
				if perr := c.client.Patch(ctx, n, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
					klog.FromContext(ctx).Error(perr, "Recording StartInstances on the node", "node", klog.KObj(n))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if iceErr != nil {
				failed = true
			}
			if ferr != nil {
				errs = append(errs, ferr)
			}
		}()
	}
	wg.Wait()
	return failed, errors.Join(errs...)
}

// ResumeNode starts a claimed node's instance. On insufficient capacity (the instance type of a
// hibernated instance cannot change) it terminates the instance and unclaims the Node, and
// returns iceErr so the caller plans again with the remaining standby nodes; the pool launches a
// replacement.
func ResumeNode(ctx context.Context, c client.Client, instances cloud.Instances, recorder events.EventRecorder, n *corev1.Node) (err, iceErr error) {
	id := nodeutil.InstanceID(n)
	rerr := instances.Resume(ctx, id)
	switch {
	case rerr == nil, errors.Is(rerr, cloud.ErrIncorrectState):
		// IncorrectInstanceState: still stopping (retry later) or already running.
		if errors.Is(rerr, cloud.ErrIncorrectState) {
			return rerr, nil
		}
		return nil, nil
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

package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/scaling"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// IndexPodNodeName is the Pod index by spec.nodeName (registered by
// pkg/controllers/indexes.Register; same name).
const IndexPodNodeName = "spec.nodeName"

// Controller runs the bridge: the node reconciler writes the holds and moves StatefulSet Pods,
// the surge reconciler surges Deployments and removes their held Pods.
type Controller struct {
	client   client.Client
	live     client.Reader
	clock    clock.Clock
	recorder events.EventRecorder
	opts     Options

	// seats serializes the node reconciles' seat accounting: the lifeboats are shared by every
	// interrupted node of a burst.
	seats sync.Mutex
	// grants are the holds this process wrote, by Pod, until the cache shows them.
	grantsMu  sync.Mutex
	grants    map[types.UID]string
	grantedAt map[types.UID]time.Time
	// evicted: namespace/name → UID of the StatefulSet Pods this process moved (evicted).
	evicted map[string]types.UID
	// resumes, when set, are the resume decisions in flight: hold writes wait for them
	// (at most yieldToResumes).
	resumes ResumesInFlight
	// Seats, when set, is how the handoff makes seats: a held StatefulSet Pod gets its seat
	// at the hold (NodePlan.Seat). Nil: seats come only from the lifeboat's handoff.
	Seats *handoff.SeatSpec
}

// ResumesInFlight is the interruption controller's view of its decisions on their way to
// StartInstances (interruption.Controller).
type ResumesInFlight interface {
	YieldToResumes(ctx context.Context, max time.Duration)
}

// yieldToResumes bounds how long a node's hold writes wait for resume decisions in flight: a
// burst decides its nodes within seconds, and a resume's StartInstances must not queue behind
// another node's dozen hold writes; the holds have the webhook's pending hold (10 s) to land in.
const yieldToResumes = 250 * time.Millisecond

// YieldTo makes the node reconciles' hold writes wait for the resume decisions in flight.
func (c *Controller) YieldTo(r ResumesInFlight) { c.resumes = r }

// New returns the controller. live reads the API server: the ready counts that decide a
// removal must not lag behind the Pods this controller just deleted.
func New(c client.Client, live client.Reader, clk clock.Clock, rec events.EventRecorder, o Options) *Controller {
	return &Controller{client: c, live: live, clock: clk, recorder: rec, opts: o,
		grants: map[types.UID]string{}, grantedAt: map[types.UID]time.Time{}, evicted: map[string]types.UID{}}
}

// Register adds both reconcilers.
func (c *Controller) Register(mgr ctrl.Manager) error {
	// An interrupted Node is looked at when it is decided and whenever one of its lifeboats
	// changes (turns Ready).
	toInterrupted := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if _, ok := o.GetAnnotations()[v1alpha1.AnnotationResumeDecision]; ok {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		}
		if target := o.GetLabels()[v1alpha1.LabelResumedFor]; target != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: target}}}
		}
		return nil
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("bridge").
		Watches(&corev1.Node{}, toInterrupted).
		// A seat made at a hold turning Ready: its Pod may move straight to it now, not at the
		// next poll (a seat a lifeboat adopted maps to the lifeboat, which the bridge skips).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(handoff.SeatNode), builder.WithPredicates(handoff.SeatTurnedReady)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(reconcile.Func(c.ReconcileNode)); err != nil {
		return err
	}
	surging := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[v1alpha1.AnnotationBridgeSurge]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("bridge-surge").
		For(&appsv1.Deployment{}, builder.WithPredicates(surging)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(c.ReconcileSurge))
}

// ReconcileNode advances the bridge of one interrupted Node.
func (c *Controller) ReconcileNode(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("node", req.Name)
	ctx = klog.NewContext(ctx, logger)
	n := &corev1.Node{}
	if err := c.client.Get(ctx, req.NamespacedName, n); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	decision, decided := n.Annotations[v1alpha1.AnnotationResumeDecision]
	if !decided || n.Labels[v1alpha1.LabelPool] != "" {
		return reconcile.Result{}, nil
	}
	if n.Annotations[v1alpha1.AnnotationInterruptionSource] == policy.SourceRebalance {
		// A rebalance recommendation is not an eviction: nothing to hold. A real interruption
		// of the node re-marks it, and the bridge starts then.
		return reconcile.Result{}, nil
	}
	c.seats.Lock()
	defer c.seats.Unlock()
	s, err := c.observeNode(ctx, n, decision)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan := PlanNode(s, c.opts)
	if c.resumes != nil && len(plan.Hold)+len(plan.Release) > 0 {
		c.resumes.YieldToResumes(ctx, yieldToResumes)
	}
	// The holds and releases are written in parallel: a burst decides many Nodes within
	// seconds, and every Pod the webhook's pending hold stops covering before its hold is
	// written may be evicted (at scale, one write after the other took 3–4 s per Node, and
	// the last Nodes of a 20-node burst lost Pods that way).
	errs := writeAll(plan.Hold, func(a PodAction) error {
		value := nodeutil.FormatTime(a.Until)
		if err := c.setHold(ctx, a.Pod, value); err != nil {
			return err
		}
		c.grant(a.Pod, value)
		metrics.BridgeHolds.WithLabelValues(kindOf(a.Pod)).Inc()
		c.recorder.Eventf(a.Pod, n, corev1.EventTypeNormal, v1alpha1.EventEvictionHeld, "Hold",
			"Eviction held until %s (at the latest) while the replacement starts on a lifeboat: node %s is interrupted", a.Until.UTC().Format("15:04:05"), n.Name)
		return nil
	})
	errs = append(errs, writeAll(plan.Release, func(a PodAction) error {
		if err := c.setHold(ctx, a.Pod, v1alpha1.EvictionHoldReleased); err != nil {
			return err
		}
		metrics.BridgeReleases.WithLabelValues(a.Reason).Inc()
		c.recorder.Eventf(a.Pod, n, corev1.EventTypeWarning, v1alpha1.EventEvictionReleased, "Release",
			"Eviction no longer held (%s): the drain of interrupted node %s proceeds as without Lifeboat", a.Reason, n.Name)
		return nil
	})...)
	// The holds first, then the surge (once a lifeboat is Ready): a crash between the two leaves
	// holds without a surge, which end by their deadline; the next pass surges.
	if err := c.ensureSurges(ctx, n, plan.Surge); err != nil {
		errs = append(errs, err)
	}
	for _, p := range plan.Move {
		// A Pod moved straight to a seat before (its node interrupted since) goes to a lifeboat
		// now: its old record would keep its replacement from the lifeboat's scheduler.
		if err := c.forgetSeat(ctx, p, s.SeatRecords); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.move(ctx, n, p, ""); err != nil {
			errs = append(errs, err)
		}
	}
	recordedFirst := false
	for _, p := range plan.SeatMove {
		recorded, err := c.moveToSeat(ctx, n, p, s.SeatHosts[p.UID], s.Lifeboats)
		if err != nil {
			errs = append(errs, err)
		}
		recordedFirst = recordedFirst || recorded
	}
	if err := c.ensureSeats(ctx, n, plan.Seat); err != nil {
		// Seats only save time: the bridge goes on without them.
		logger.Error(err, "Making the handoff seats of held StatefulSet Pods")
	}
	if onlyConflicts(errs) {
		// Another reconcile (a surge of the same Deployment for another node) wrote first:
		// look again soon, outside the failure backoff, which would grow with every burst.
		logger.V(1).Info("Retrying after a write conflict", "err", errors.Join(errs...))
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if recordedFirst {
		// A straight move's seat was recorded in this pass: the eviction comes in the next one.
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if plan.Busy {
		return reconcile.Result{RequeueAfter: c.opts.Poll}, nil
	}
	return reconcile.Result{}, nil
}

func (c *Controller) observeNode(ctx context.Context, n *corev1.Node, decision string) (NodeState, error) {
	s := NodeState{Now: c.clock.Now(), Decided: true, None: decision == "none" || decision == ""}
	if start, ok := policy.DrainStart(n); ok {
		s.NoticeAt = start
	} else {
		s.NoticeAt = s.Now
	}
	// Every read here is of the informer cache without copies (a burst reconciles its Nodes
	// one at a time under the seats lock, and the cluster's Nodes and protected Pods are many):
	// nothing read is modified; setHold writes on a copy.
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return s, err
	}
	bound := map[string][]*corev1.Pod{}
	var held []*corev1.Pod
	var interruptedNodes []*corev1.Node // what ReclaimedPools reads
	heldUIDs := map[types.UID]bool{}
	for i := range nodes.Items {
		m := &nodes.Items[i]
		_, interrupted := m.Annotations[v1alpha1.AnnotationResumeDecision]
		if _, ok := m.Annotations[v1alpha1.AnnotationBridgeSeats]; ok && nodeutil.Pool(m) != "" {
			s.SeatRecords = append(s.SeatRecords, m)
		}
		boat := nodeutil.Pool(m) != "" && nodeutil.State(m) == v1alpha1.NodeStateActive && m.DeletionTimestamp == nil
		if !interrupted && !boat {
			continue
		}
		if interrupted && nodeutil.Pool(m) == "" {
			interruptedNodes = append(interruptedNodes, m)
		}
		pods, err := c.podsOn(ctx, m.Name)
		if err != nil {
			return s, err
		}
		if boat {
			s.Lifeboats = append(s.Lifeboats, m)
			bound[m.Name] = pods
			continue
		}
		for _, p := range pods {
			if c.heldAt(p, s.Now) {
				held = append(held, p)
				heldUIDs[p.UID] = true
			}
			if m.Name == n.Name && p.Labels[v1alpha1.LabelProtected] == "true" {
				s.Protected = append(s.Protected, c.withGrant(p))
			}
		}
	}
	pending := &corev1.PodList{}
	if err := c.client.List(ctx, pending, client.MatchingLabels{v1alpha1.LabelProtected: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return s, err
	}
	var waiting []*corev1.Pod
	for i := range pending.Items {
		if p := &pending.Items[i]; p.Spec.NodeName == "" && p.DeletionTimestamp == nil && !nodeutil.IsTerminal(p) {
			waiting = append(waiting, p)
		}
	}
	s.Free = FreeSeats(s.Lifeboats, bound, held, waiting)
	stss := map[string]bool{}
	for _, p := range s.Protected {
		if sts := statefulSetOf(p); sts != "" && heldUIDs[p.UID] {
			stss[sts] = true
		}
	}
	s.SettledStatefulSets = map[string]bool{}
	for key := range stss {
		settled, err := c.statefulSetSettled(ctx, key)
		if err != nil {
			return s, err
		}
		s.SettledStatefulSets[key] = settled
	}
	if c.Seats != nil && len(s.Lifeboats) > 0 { // the seat record goes on a lifeboat Node
		s.SeatHosts = map[types.UID]string{}
		reclaimed := handoff.ReclaimedPools(interruptedNodes, s.Now)
		seats, err := handoff.ListSeats(ctx, c.client, c.Seats.Namespace, client.UnsafeDisableDeepCopy)
		if err != nil {
			return s, err
		}
		for _, p := range s.Protected {
			if statefulSetOf(p) == "" || !heldUIDs[p.UID] {
				continue
			}
			host, err := c.usableSeat(ctx, p, waiting, seats, reclaimed)
			if err != nil {
				return s, err
			}
			if host != "" {
				s.SeatHosts[p.UID] = host
			}
		}
	}
	return s, nil
}

// usableSeat is the kubernetes.io/hostname of the node where p's seat, Ready, holds room that
// p's replacement can take (handoff.SeatNodeUsable, not handoff.Contested by a waiting protected
// Pod or another seat) and that is not handoff.AtRisk of the reclaim (reclaimed:
// handoff.ReclaimedPools; a Pod moved to the next node the reclaim takes would move again), ""
// when there is none. Cache only (seats: every seat, as listed from it).
func (c *Controller) usableSeat(ctx context.Context, p *corev1.Pod, waiting, seats []*corev1.Pod, reclaimed map[string]time.Time) (string, error) {
	name := handoff.SeatName(p.Namespace, p.Name)
	i := slices.IndexFunc(seats, func(s *corev1.Pod) bool { return s.Name == name })
	if i < 0 {
		return "", nil
	}
	seat := seats[i]
	// Ready: its node has pulled the Pod's images (the seat's image volumes), so the
	// replacement starts at once.
	if !seat.DeletionTimestamp.IsZero() || seat.Spec.NodeName == "" || !nodeutil.PodReady(seat) || handoff.Contested(p, waiting, seats) {
		return "", nil
	}
	node := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: seat.Spec.NodeName}, node); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if !handoff.SeatNodeUsable(node) || handoff.AtRisk(node, reclaimed) {
		return "", nil
	}
	if host := node.Labels[corev1.LabelHostname]; host != "" {
		return host, nil
	}
	return node.Name, nil
}

// podsOn lists the non-terminal, non-terminating Pods bound to a node (cache, by index; the
// cache's own objects: read only).
// ensureSeats creates the handoff seat of each Pod that has none yet (handoff.Seat, made for
// interrupted node n; the seat's lifeboat adopts it once the Pod is there).
func (c *Controller) ensureSeats(ctx context.Context, n *corev1.Node, pods []*corev1.Pod) error {
	if c.Seats == nil {
		return nil
	}
	var errs []error
	for _, p := range pods {
		if c.wasEvicted(p) {
			continue // moved: the cache is behind; a seat moved straight to is deleted, not made again
		}
		key := types.NamespacedName{Namespace: c.Seats.Namespace, Name: handoff.SeatName(p.Namespace, p.Name)}
		if err := c.client.Get(ctx, key, &corev1.Pod{}); err == nil || !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		seat := handoff.Seat(p, n, *c.Seats)
		if err := c.client.Create(ctx, seat); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("create seat %s for %s: %w", seat.Name, klog.KObj(p), err))
			}
			continue
		}
		klog.FromContext(ctx).V(2).Info("Seat created at the hold", "seat", seat.Name, "pod", klog.KObj(p))
	}
	return errors.Join(errs...)
}

func (c *Controller) podsOn(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.MatchingFields{IndexPodNodeName: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil && !nodeutil.IsTerminal(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// heldAt: the Pod's eviction is held at now — by its annotation, or by a hold this process
// wrote that the cache does not show yet.
func (c *Controller) heldAt(p *corev1.Pod, now time.Time) bool {
	until, released, decided := HoldState(c.withGrant(p))
	return decided && !released && now.Before(until)
}

// withGrant returns p with the hold this process wrote for it when the cached copy lacks it:
// node reconciles run one at a time, and the next one must count the seats the previous one
// granted a moment ago.
func (c *Controller) withGrant(p *corev1.Pod) *corev1.Pod {
	if _, ok := p.Annotations[v1alpha1.AnnotationEvictionHold]; ok {
		return p
	}
	c.grantsMu.Lock()
	value, ok := c.grants[p.UID]
	c.grantsMu.Unlock()
	if !ok {
		return p
	}
	p = p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1alpha1.AnnotationEvictionHold] = value
	return p
}

// grant remembers a hold this process wrote (forgotten after a minute: by then the cache shows it).
func (c *Controller) grant(p *corev1.Pod, value string) {
	c.grantsMu.Lock()
	defer c.grantsMu.Unlock()
	now := c.clock.Now()
	for uid, at := range c.grantedAt {
		if now.Sub(at) > time.Minute {
			delete(c.grants, uid)
			delete(c.grantedAt, uid)
		}
	}
	c.grants[p.UID] = value
	c.grantedAt[p.UID] = now
}

// statefulSetSettled: every replica of the StatefulSet exists, is Ready and is not
// terminating — read from the API server, so a Pod this controller evicted a moment ago counts
// as down.
func (c *Controller) statefulSetSettled(ctx context.Context, key string) (bool, error) {
	ns, name, _ := cutKey(key)
	sts := &appsv1.StatefulSet{}
	if err := c.live.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		return false, err
	}
	pods := &corev1.PodList{}
	if err := c.live.List(ctx, pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return false, err
	}
	var ready int32
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			return false, nil
		}
		if nodeutil.PodReady(p) {
			ready++
		}
	}
	return ready >= ptr.Deref(sts.Spec.Replicas, 1), nil
}

func cutKey(key string) (string, string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// setHold writes the Pod's hold annotation, paired with Karpenter's do-not-disrupt
// (policy.HoldAnnotations; a merge patch: nothing else of the Pod changes).
func (c *Controller) setHold(ctx context.Context, p *corev1.Pod, value string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": policy.HoldAnnotations(p, value)}})
	// On a copy: p may be the informer cache's own object (observeNode reads without copies).
	if err := c.client.Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("write the eviction hold of %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// move lets a held StatefulSet Pod go to its Ready lifeboat — or to seatHost, the node of its
// seat (moveToSeat) — released, then evicted (the Eviction API applies its
// PodDisruptionBudget). When the budget refuses, the hold is put back as it was and the move is
// tried again on a later pass, until the hold's deadline: a refusal must not turn into giving
// up the hold. The budget's view can lag behind a Pod the StatefulSet controller just
// re-created under the same name: such stale entries are removed (clearStaleDisruptions).
func (c *Controller) move(ctx context.Context, n *corev1.Node, p *corev1.Pod, seatHost string) error {
	held := p.Annotations[v1alpha1.AnnotationEvictionHold]
	if err := c.setHold(ctx, p, v1alpha1.EvictionHoldReleased); err != nil {
		return err
	}
	err := c.client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(p.UID)}}})
	switch {
	case err == nil || apierrors.IsConflict(err):
		// A conflict on the UID precondition: the Pod of that name is another one already — the
		// eviction deleted ours and the StatefulSet re-created it while the Eviction API
		// retried (seen against kube-apiserver v1.36).
		c.noteEvicted(p)
		if seatHost != "" {
			klog.FromContext(ctx).V(2).Info("Moved a held StatefulSet Pod straight to its seat", "pod", klog.KObj(p), "seatHost", seatHost, "evictionResult", err)
			metrics.BridgeReleases.WithLabelValues(ReleaseMovedToSeat).Inc()
			c.recorder.Eventf(p, n, corev1.EventTypeNormal, v1alpha1.EventBridgeMove, "Move",
				"Moved straight to its seat's node %s (launched for it at the hold; its images pulled), one replica at a time: node %s is interrupted", seatHost, n.Name)
			return handoff.DeleteSeat(ctx, c.client, c.Seats.Namespace, handoff.SeatName(p.Namespace, p.Name))
		}
		klog.FromContext(ctx).V(2).Info("Moved a held StatefulSet Pod to its lifeboat", "pod", klog.KObj(p), "evictionResult", err)
		metrics.BridgeReleases.WithLabelValues(ReleaseMoved).Inc()
		c.recorder.Eventf(p, n, corev1.EventTypeNormal, v1alpha1.EventBridgeMove, "Move",
			"Moved to a Ready lifeboat, one replica at a time: node %s is interrupted", n.Name)
		return nil
	case apierrors.IsNotFound(err):
		klog.FromContext(ctx).V(2).Info("The StatefulSet Pod to move is gone", "pod", klog.KObj(p))
		c.noteEvicted(p)
		return nil
	case apierrors.IsTooManyRequests(err):
		if err := c.setHold(ctx, p, held); err != nil {
			return err
		}
		budgets, err := c.clearStaleDisruptions(ctx, p)
		klog.FromContext(ctx).V(2).Info("The StatefulSet Pod's PodDisruptionBudget refused the move; holding it again and retrying",
			"pod", klog.KObj(p), "hold", held, "budgets", budgets)
		return err
	default:
		return fmt.Errorf("evict %s/%s to its lifeboat: %w", p.Namespace, p.Name, err)
	}
}

// moveToSeat moves a held StatefulSet Pod straight to the node of its seat (host), in two
// passes. First it records the seat on a lifeboat Node (AnnotationBridgeSeats; the webhook
// reads every pool Node's record and gives the Pod re-created under that name its seat's host,
// lifeboat-scheduler then binds it there) and returns recorded true. A later pass whose cached
// lifeboat Node already carries that record evicts the Pod (move) and deletes the seat so that
// its room is the replacement's. Evicting in the pass that writes the record would race the
// webhook's cache: the StatefulSet re-creates the Pod as soon as the old one is gone, and a
// replacement admitted before the webhook sees the record would go to a lifeboat and move
// twice (the handoff's seat moves wait for their record the same way). Without a lifeboat Node
// to record on, the Pod stays held.
func (c *Controller) moveToSeat(ctx context.Context, n *corev1.Node, p *corev1.Pod, host string, lifeboats []*corev1.Node) (recorded bool, err error) {
	if len(lifeboats) == 0 {
		return false, nil
	}
	boat := slices.MinFunc(lifeboats, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	if recorded, err = c.recordSeat(ctx, boat, p.Namespace+"/"+p.Name, host); err != nil || recorded {
		return recorded, err
	}
	return false, c.move(ctx, n, p, host)
}

// recordSeat adds key → host to the lifeboat Node's AnnotationBridgeSeats (policy.SeatRecord,
// older entries dropped), with an optimistic lock: the cached Node may not show this process's
// last record yet, and a patch from it would drop that entry. written is false when the Node
// carried the entry already.
func (c *Controller) recordSeat(ctx context.Context, boat *corev1.Node, key, host string) (written bool, err error) {
	current, err := policy.ParseSeatRecord(boat.Annotations[v1alpha1.AnnotationBridgeSeats])
	if err != nil {
		current = policy.SeatRecord{} // rewritten whole
	}
	rec, changed := current.With(map[string]string{key: host}, c.clock.Now())
	if !changed {
		return false, nil
	}
	if err := c.writeBridgeSeats(ctx, boat, rec); err != nil {
		return false, fmt.Errorf("record the seat of %s on lifeboat %s: %w", key, boat.Name, err)
	}
	return true, nil
}

// writeBridgeSeats patches boat's AnnotationBridgeSeats to rec under an optimistic lock (boat
// is the cache's object: patched on a copy).
func (c *Controller) writeBridgeSeats(ctx context.Context, boat *corev1.Node, rec policy.SeatRecord) error {
	updated := boat.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[v1alpha1.AnnotationBridgeSeats] = rec.String()
	return c.client.Patch(ctx, updated, client.MergeFromWithOptions(boat, client.MergeFromWithOptimisticLock{}))
}

// forgetSeat removes p's entry from the pool Nodes' AnnotationBridgeSeats records (a straight
// move of an earlier interruption; the webhook reads every pool Node's), optimistic lock as
// recordSeat.
func (c *Controller) forgetSeat(ctx context.Context, p *corev1.Pod, recorded []*corev1.Node) error {
	key := p.Namespace + "/" + p.Name
	for _, boat := range recorded {
		current, err := policy.ParseSeatRecord(boat.Annotations[v1alpha1.AnnotationBridgeSeats])
		if err != nil {
			continue // the webhook skips it too
		}
		rec, had := current.Without(key)
		if !had {
			continue
		}
		if err := c.writeBridgeSeats(ctx, boat, rec); err != nil {
			return fmt.Errorf("forget the seat of %s on lifeboat %s: %w", key, boat.Name, err)
		}
	}
	return nil
}

// conflictRetry is how soon a reconcile that lost a write race looks again.
const conflictRetry = 200 * time.Millisecond

// onlyConflicts: errs is not empty and every error is an optimistic-lock conflict.
func onlyConflicts(errs []error) bool {
	for _, err := range errs {
		if !apierrors.IsConflict(err) {
			return false
		}
	}
	return len(errs) > 0
}

// writeParallelism bounds the concurrent hold writes of one node reconcile.
const writeParallelism = 16

// writeAll runs write for every action, at most writeParallelism at a time, and returns the
// errors.
func writeAll(actions []PodAction, write func(PodAction) error) []error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		slot = make(chan struct{}, writeParallelism)
	)
	for _, a := range actions {
		slot <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slot; wg.Done() }()
			if err := write(a); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

func kindOf(p *corev1.Pod) string {
	if statefulSetOf(p) != "" {
		return "StatefulSet"
	}
	return "Deployment"
}

// ensureSurges adds this node's entry to the bridge surge of every Deployment whose Pods on it
// are held: replicas + those Pods, so their replacements start before they leave.
func (c *Controller) ensureSurges(ctx context.Context, n *corev1.Node, held []*corev1.Pod) error {
	counts := map[types.NamespacedName]int32{}
	for _, p := range held {
		d, err := c.deploymentOf(ctx, p)
		if err != nil {
			return err
		}
		if d.Name != "" {
			counts[d]++
		}
	}
	keys := make([]types.NamespacedName, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		if err := c.addSurge(ctx, k, n.Name, counts[k]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) deploymentOf(ctx context.Context, p *corev1.Pod) (types.NamespacedName, error) {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return types.NamespacedName{}, nil
	}
	rs := &appsv1.ReplicaSet{}
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, rs); err != nil {
		return types.NamespacedName{}, client.IgnoreNotFound(err)
	}
	if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" {
		return types.NamespacedName{Namespace: p.Namespace, Name: d.Name}, nil
	}
	return types.NamespacedName{}, nil
}

// addSurge raises the Deployment's replicas by count for node's held Pods, once per node (the
// entry in the surge annotation is the record), and its HPA's bounds with it.
func (c *Controller) addSurge(ctx context.Context, key types.NamespacedName, node string, count int32) error {
	d := &appsv1.Deployment{}
	if err := c.client.Get(ctx, key, d); err != nil {
		return client.IgnoreNotFound(err)
	}
	s, err := ParseSurge(d.Annotations[v1alpha1.AnnotationBridgeSurge])
	if err != nil {
		return err
	}
	if _, done := s.Nodes[node]; done {
		return nil
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	if len(s.Nodes) == 0 {
		s.Base = replicas
		if raw := d.Annotations[v1alpha1.AnnotationHandoffSurge]; raw != "" {
			var hs handoff.Surge
			if json.Unmarshal([]byte(raw), &hs) == nil {
				s.Base = max(replicas-hs.Surge, 1)
			}
		}
	}
	s.Nodes[node] = count
	before := d.DeepCopy()
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[v1alpha1.AnnotationBridgeSurge] = s.String()
	d.Spec.Replicas = ptr.To(replicas + count)
	if err := c.client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("surge %s for the held Pods on %s: %w", key, node, err)
	}
	c.recorder.Eventf(d, nil, corev1.EventTypeNormal, v1alpha1.EventBridged, "Surge",
		"Surging +%d replicas for the Pods held on interrupted node %s; they leave once their replacements are Ready", count, node)
	return scaling.RaiseHPA(ctx, c.client, d, replicas+count)
}

// ReconcileSurge advances one Deployment's bridge surge.
func (c *Controller) ReconcileSurge(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("deployment", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)
	d := &appsv1.Deployment{}
	if err := c.client.Get(ctx, req.NamespacedName, d); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	raw, ok := d.Annotations[v1alpha1.AnnotationBridgeSurge]
	if !ok {
		return reconcile.Result{}, nil
	}
	s, err := ParseSurge(raw)
	if err != nil {
		// Not ours to guess: drop the record; replicas stay (an HPA or a user sets them).
		logger.Error(err, "Dropping an unreadable bridge surge")
		return reconcile.Result{}, c.finishSurge(ctx, d, Surge{Nodes: map[string]int32{}}, 0)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return reconcile.Result{}, err
	}
	pods, err := c.livePods(ctx, d.Namespace, sel)
	if err != nil {
		return reconcile.Result{}, err
	}
	step := PlanSurge(s, pods)
	if len(step.Gone) == 0 && step.Remove == "" {
		return reconcile.Result{RequeueAfter: c.opts.Poll}, nil
	}
	var back int32
	for _, node := range step.Gone {
		back += s.Nodes[node]
		metrics.BridgeRemoved.WithLabelValues("gone").Add(float64(s.Nodes[node]))
		delete(s.Nodes, node)
	}
	if step.Remove != "" {
		for _, p := range step.RemovePods {
			if err := c.setDeletionCost(ctx, p); err != nil {
				return reconcile.Result{}, err
			}
		}
		back += s.Nodes[step.Remove]
		delete(s.Nodes, step.Remove)
	}
	if err := c.finishSurge(ctx, d, s, back); err != nil {
		if apierrors.IsConflict(err) {
			// The node reconciles surge the same Deployment: the cached copy was behind.
			logger.V(1).Info("Retrying after a write conflict", "err", err)
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, err
	}
	for _, p := range step.RemovePods {
		if err := c.client.Delete(ctx, p, client.Preconditions{UID: ptr.To(p.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return reconcile.Result{}, fmt.Errorf("remove held Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		metrics.BridgeRemoved.WithLabelValues("bridged").Inc()
	}
	if step.Remove != "" {
		c.recorder.Eventf(d, nil, corev1.EventTypeNormal, v1alpha1.EventBridged, "Remove",
			"Replacements Ready: removed the %d Pods held on interrupted node %s, replicas back by the surge", len(step.RemovePods), step.Remove)
	}
	return reconcile.Result{RequeueAfter: c.opts.Poll}, nil
}

func (c *Controller) livePods(ctx context.Context, ns string, sel labels.Selector) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.live.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (c *Controller) setDeletionCost(ctx context.Context, p *corev1.Pod) error {
	if p.Annotations[corev1.PodDeletionCost] == handoff.DeletionCost {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{corev1.PodDeletionCost: handoff.DeletionCost}}})
	if err := c.client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("give %s/%s the lowest deletion cost: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// finishSurge writes the remaining surge record (none: the annotation goes, and the HPA's bounds
// are restored first unless a handoff surge still needs them) and takes back replicas.
func (c *Controller) finishSurge(ctx context.Context, d *appsv1.Deployment, s Surge, back int32) error {
	if len(s.Nodes) == 0 {
		if handoffSurging, _ := scaling.Surging(d); !handoffSurging {
			if err := scaling.RestoreHPA(ctx, c.client, d); err != nil {
				return err
			}
		}
	}
	before := d.DeepCopy()
	if len(s.Nodes) == 0 {
		delete(d.Annotations, v1alpha1.AnnotationBridgeSurge)
	} else {
		d.Annotations[v1alpha1.AnnotationBridgeSurge] = s.String()
	}
	// If something else changed replicas meanwhile (an HPA, a user), take back only the surge.
	cur := ptr.Deref(d.Spec.Replicas, 1)
	d.Spec.Replicas = ptr.To(max(cur-back, min(cur, max(s.Base, 1))))
	if err := c.client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("take back the bridge surge of %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

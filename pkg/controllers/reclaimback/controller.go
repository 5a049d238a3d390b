// Package reclaimback is the reclaim-back controller: it moves Karpenter's On-Demand fallback
// nodes back to Spot once Spot capacity is back, one node at a time, surge first, inside the
// maintenance windows of a ReclaimBackPolicy (docs/RECLAIMBACK.md). It fetches, calls the pure
// decisions of reclaimplan (FindFallback, Gate, SpotStable, DecideMove) and writes; the
// state of a move is on its Node (lifeboat.dev/reclaim-back) and in the surged Deployments
// (lifeboat.dev/handoff-surge), so a restarted controller finishes or undoes it.
package reclaimback

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodepool"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// Options tune the controller. Zero values take the defaults.
type Options struct {
	// Off disables the controller (--reclaim-back=off).
	Off bool
	// Poll is the requeue period while a move is in flight. Default 5s.
	Poll time.Duration
	// Idle is the requeue period while no move can start and nothing says when that changes
	// (the probe, the telemetry). Default 1m.
	Idle time.Duration
	// Region scopes the placement probe (EC2 scores every region without it).
	Region string
	// ProbeTTL is how long a NodePool's placement score is reused: EC2 throttles
	// GetSpotPlacementScores hard, and Node events come often. Default 1m.
	ProbeTTL time.Duration
}

// Controller reconciles ReclaimBackPolicies.
type Controller struct {
	client client.Client
	// events reads Karpenter's InsufficientCapacityError events live (the manager's cache of
	// Events holds SpotInterrupted only).
	events    client.Reader
	scorer    cloud.PlacementScorer
	clock     clock.Clock
	recorder  events.EventRecorder
	namespace string
	opts      Options
	probes    probeCache
}

// probeCache remembers each NodePool's last placement score (a cache: losing it on a restart
// costs one more probe).
type probeCache struct {
	mu      sync.Mutex
	byScope map[string]probeResult
}

type probeResult struct {
	at    time.Time
	score int
	err   error
}

func (p *probeCache) get(key string, now time.Time, ttl time.Duration) (probeResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.byScope[key]
	return r, ok && now.Sub(r.at) < ttl
}

func (p *probeCache) put(key string, r probeResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byScope == nil {
		p.byScope = map[string]probeResult{}
	}
	p.byScope[key] = r
}

// New returns the controller. scorer may be nil: then no move starts (condition Blocked,
// ProbeFailed). namespace holds the interruption telemetry ConfigMap.
func New(c client.Client, scorer cloud.PlacementScorer, clk clock.Clock, recorder events.EventRecorder, namespace string, opts Options) *Controller {
	if opts.Poll <= 0 {
		opts.Poll = 5 * time.Second
	}
	if opts.Idle <= 0 {
		opts.Idle = time.Minute
	}
	if opts.ProbeTTL <= 0 {
		opts.ProbeTTL = time.Minute
	}
	return &Controller{client: c, events: c, scorer: scorer, clock: clk, recorder: recorder, namespace: namespace, opts: opts}
}

// Register adds the controller: policies, and Karpenter's Nodes mapped to every policy. With
// no policy, a Node event lists none from the cache and nothing else runs.
func (c *Controller) Register(mgr ctrl.Manager) error {
	karpenterNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[reclaimplan.LabelNodePool] != "" })
	// Status heartbeats do not change what reclaim-back sees; labels (capacity type, NodePool),
	// the move record, cordons and deletions do.
	changed := predicate.Or(predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return o.Spec.Unschedulable != n.Spec.Unschedulable || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
		},
	})
	c.events = mgr.GetAPIReader()
	return ctrl.NewControllerManagedBy(mgr).
		Named("reclaimback").
		For(&v1alpha1.ReclaimBackPolicy{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(c.allPolicies), builder.WithPredicates(karpenterNode, changed)).
		// One at a time: policies may select the same NodePools, and each move is one policy's.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(c)
}

func (c *Controller) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.ReclaimBackPolicyList{}
	if err := c.client.List(ctx, list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return out
}

// fleet is one look at Karpenter's capacity for a policy.
type fleet struct {
	pools       map[string]*karpv1.NodePool
	selected    map[string]bool
	spotAllowed map[string]bool
	nodes       map[string]*corev1.Node
	byPool      map[string][]*corev1.Node
	infos       []reclaimplan.NodeInfo
	podsOf      map[string][]*corev1.Pod
}

// Reconcile advances the policy's moves in flight, starts new ones when the gate, the Spot
// stability and the probe allow, and writes the status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("reclaimBackPolicy", req.Name)
	ctx = klog.NewContext(ctx, log)
	p := &v1alpha1.ReclaimBackPolicy{}
	if err := c.client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.ReclaimBackFallbackNodes.DeleteLabelValues(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, c.finalize(ctx, p)
	}
	if !controllerutil.ContainsFinalizer(p, v1alpha1.FinalizerReclaimBack) {
		patch := client.MergeFrom(p.DeepCopy())
		controllerutil.AddFinalizer(p, v1alpha1.FinalizerReclaimBack)
		if err := c.client.Patch(ctx, p, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	before := p.DeepCopy()
	now := c.clock.Now()
	sched, err := reclaimplan.ScheduleOf(p.Spec)
	if err != nil {
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPolicyInvalid, Message: err.Error(), ObservedGeneration: p.Generation})
		return reconcile.Result{}, c.writeStatus(ctx, before, p)
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPolicyValid, Message: "acting on the policy", ObservedGeneration: p.Generation})

	f, err := c.look(ctx, p)
	if err != nil {
		return reconcile.Result{}, err
	}
	inFlight, moving, errs := c.advanceAll(ctx, p, f, now)
	c.sweepOrphanSurges(ctx, f)

	var movable []reclaimplan.Candidate
	for _, cand := range reclaimplan.FindFallback(f.infos, f.spotAllowed, f.selected) {
		n := f.nodes[cand.Node]
		if cand.Excluded != "" || moving[cand.Node] || n.Spec.Unschedulable {
			continue // cordoned by someone else: being drained, or kept aside on purpose
		}
		movable = append(movable, cand)
	}
	fallback := len(movable) + len(inFlight)
	metrics.ReclaimBackFallbackNodes.WithLabelValues(p.Name).Set(float64(fallback))
	gate := reclaimplan.Gate{
		Now: now, Schedule: sched, InFlight: len(inFlight), Movable: len(movable),
		MaxInFlight: reclaimplan.MaxInFlight(p.Spec.MaxInFlight, fallback),
	}
	if p.Status.CoolDownUntil != nil {
		gate.CoolDownUntil = p.Status.CoolDownUntil.Time
	}
	res := gate.Decide()
	if res.Slots > 0 {
		started, blocked := c.startMoves(ctx, p, movable, res.Slots, f, now)
		inFlight = append(inFlight, started...)
		if len(started) == 0 {
			res.Reason, res.Message = blocked.Reason, blocked.Message
		}
	}
	if len(inFlight) > 0 && res.Slots > 0 && res.Reason == "" {
		res.Reason, res.Message = v1alpha1.ReasonNotBlocked, fmt.Sprintf("%d node(s) moving", len(inFlight))
	}
	c.setBlocked(p, res)

	p.Status.ObservedGeneration = p.Generation
	p.Status.FallbackNodes = int32(fallback)
	p.Status.InFlight = inFlight
	p.Status.NextWindow = timeOrNil(res.NextWindow)
	c.accrue(p, now)
	if err := c.writeStatus(ctx, before, p); err != nil {
		errs = append(errs, err)
	}
	after := c.opts.Idle
	if len(inFlight) > 0 {
		after = c.opts.Poll
	} else if !res.RetryAt.IsZero() && res.RetryAt.Sub(now) < after {
		after = max(res.RetryAt.Sub(now), time.Second)
	}
	return reconcile.Result{RequeueAfter: after}, errors.Join(errs...)
}

// advanceAll advances the policy's moves in flight, one per node carrying a move record. It
// returns those still in flight, every node with a record (any policy's: none of them is a
// candidate) and the moves' errors.
func (c *Controller) advanceAll(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, f *fleet, now time.Time) ([]v1alpha1.MoveStatus, map[string]bool, []error) {
	var errs []error
	inFlight := []v1alpha1.MoveStatus{}
	moving := map[string]bool{}
	for _, n := range f.nodes {
		m, ok, err := reclaimplan.ParseMove(n.Annotations)
		if ok {
			moving[n.Name] = true
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring the node's move record", "node", klog.KObj(n))
			continue
		}
		if !ok || m.Policy != p.Name {
			continue
		}
		phase, err := c.advance(ctx, p, n, m, f, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("move %s: %w", n.Name, err))
		}
		if phase != "" && phase != reclaimplan.PhaseDone {
			inFlight = append(inFlight, v1alpha1.MoveStatus{Node: n.Name, NodePool: m.NodePool, Phase: string(phase), Started: metav1.NewTime(m.Started)})
		}
	}
	return inFlight, moving, errs
}

// finalize undoes the deleted policy's moves in flight (a finished one is left to Karpenter),
// then lets the policy go.
func (c *Controller) finalize(ctx context.Context, p *v1alpha1.ReclaimBackPolicy) error {
	metrics.ReclaimBackFallbackNodes.DeleteLabelValues(p.Name)
	if !controllerutil.ContainsFinalizer(p, v1alpha1.FinalizerReclaimBack) {
		return nil
	}
	f, err := c.look(ctx, p)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	var errs []error
	for _, n := range f.nodes {
		m, ok, err := reclaimplan.ParseMove(n.Annotations)
		if !ok || err != nil || m.Policy != p.Name || m.Phase == reclaimplan.PhaseDone {
			continue
		}
		if m.Phase != reclaimplan.PhaseAborting {
			m.Reason = reclaimplan.AbortPolicyDeleted
		}
		step := reclaimplan.Step{Action: reclaimplan.ActionAbort, Reason: m.Reason, Message: "the ReclaimBackPolicy is being deleted"}
		if _, err := c.abort(ctx, p, n, m, step, f.pools[m.NodePool], now); err != nil {
			errs = append(errs, fmt.Errorf("undo the move of %s: %w", n.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	patch := client.MergeFrom(p.DeepCopy())
	controllerutil.RemoveFinalizer(p, v1alpha1.FinalizerReclaimBack)
	return client.IgnoreNotFound(c.client.Patch(ctx, p, patch))
}

// ConditionReady is the policy's Ready condition type.
const ConditionReady = "Ready"

func (c *Controller) setBlocked(p *v1alpha1.ReclaimBackPolicy, res reclaimplan.GateResult) {
	cond := metav1.Condition{Type: v1alpha1.ConditionBlocked, Status: metav1.ConditionTrue, Reason: res.Reason, Message: res.Message, ObservedGeneration: p.Generation}
	if res.Reason == v1alpha1.ReasonNotBlocked || res.Reason == "" {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonNotBlocked
		if cond.Message == "" {
			cond.Message = "moves may start"
		}
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
}

func (c *Controller) accrue(p *v1alpha1.ReclaimBackPolicy, now time.Time) {
	prev, _ := strconv.ParseFloat(p.Status.OnDemandNodeHoursReturned, 64)
	since := time.Time{}
	if p.Status.AccountedAt != nil {
		since = p.Status.AccountedAt.Time
	}
	total := reclaimplan.Accrue(prev, p.Status.ReturnedNodes, since, now)
	if total > prev {
		metrics.ReclaimBackNodeHoursReturned.Add(total - prev)
	}
	if p.Status.ReturnedNodes > 0 {
		p.Status.OnDemandNodeHoursReturned = strconv.FormatFloat(total, 'f', 3, 64)
		p.Status.AccountedAt = &metav1.Time{Time: now}
	}
}

func (c *Controller) writeStatus(ctx context.Context, before, p *v1alpha1.ReclaimBackPolicy) error {
	if err := c.client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("status of ReclaimBackPolicy %s: %w", p.Name, client.IgnoreNotFound(err))
	}
	return nil
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

// look fetches Karpenter's NodePools and Nodes and the Pods of its On-Demand Nodes.
func (c *Controller) look(ctx context.Context, p *v1alpha1.ReclaimBackPolicy) (*fleet, error) {
	f := &fleet{pools: map[string]*karpv1.NodePool{}, selected: map[string]bool{}, spotAllowed: map[string]bool{},
		nodes: map[string]*corev1.Node{}, byPool: map[string][]*corev1.Node{}, podsOf: map[string][]*corev1.Pod{}}
	pools := &karpv1.NodePoolList{}
	if err := c.client.List(ctx, pools); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("list NodePools: %w", err)
	}
	for i := range pools.Items {
		np := &pools.Items[i]
		f.pools[np.Name] = np
		f.spotAllowed[np.Name] = nodepool.Assess(np).SpotAllowed
		sel, err := reclaimplan.Selected(p.Spec.NodePools, np.Name, np.Labels)
		if err != nil {
			return nil, err
		}
		f.selected[np.Name] = sel
	}
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes, client.HasLabels{reclaimplan.LabelNodePool}); err != nil {
		return nil, fmt.Errorf("list Karpenter's nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		f.nodes[n.Name] = n
		f.byPool[n.Labels[reclaimplan.LabelNodePool]] = append(f.byPool[n.Labels[reclaimplan.LabelNodePool]], n)
		if n.Labels[v1alpha1.LabelCapacityType] != "on-demand" {
			continue
		}
		pods, err := c.podsOn(ctx, n.Name)
		if err != nil {
			return nil, err
		}
		f.podsOf[n.Name] = pods
		f.infos = append(f.infos, reclaimplan.NodeInfo{Node: n, Pods: pods})
	}
	return f, nil
}

func (c *Controller) podsOn(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.MatchingFields{indexes.PodNodeName: node}); err != nil {
		return nil, fmt.Errorf("list Pods of %s: %w", node, err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// startMoves starts up to slots moves, cheapest first, each after its NodePool passed the
// Spot stability check and the placement probe (one probe per NodePool per pass). blocked says
// why none started.
func (c *Controller) startMoves(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, movable []reclaimplan.Candidate, slots int, f *fleet, now time.Time) (started []v1alpha1.MoveStatus, blocked reclaimplan.GateResult) {
	log := klog.FromContext(ctx)
	verdict := map[string]*reclaimplan.GateResult{} // per NodePool: nil passes
	var sig *spotSignals                            // read once, for the first NodePool that needs them
	for _, cand := range movable {
		if len(started) >= slots {
			break
		}
		v, seen := verdict[cand.NodePool]
		if !seen {
			if sig == nil {
				ice, err := c.iceEvents(ctx)
				sig = &spotSignals{tel: c.telemetry(ctx), ice: ice, iceErr: err}
			}
			v = c.spotBack(ctx, p, cand.NodePool, f, *sig, now)
			verdict[cand.NodePool] = v
		}
		if v != nil {
			blocked = *v
			continue
		}
		n := f.nodes[cand.Node]
		ms, err := c.startMove(ctx, p, n, cand.NodePool, f, now)
		if err != nil {
			log.Error(err, "Starting a reclaim-back move", "node", klog.KObj(n))
			blocked = reclaimplan.GateResult{Reason: v1alpha1.ReasonStartFailed, Message: err.Error()}
			continue
		}
		started = append(started, ms)
	}
	return started, blocked
}

// spotSignals are what a pass knows of Spot's recent trouble: Lifeboat's interruption
// telemetry and Karpenter's InsufficientCapacityError events (or why they could not be read).
type spotSignals struct {
	tel    *telemetry.Telemetry
	ice    []corev1.Event
	iceErr error
}

// iceEvents lists Karpenter's InsufficientCapacityError events, live.
func (c *Controller) iceEvents(ctx context.Context) ([]corev1.Event, error) {
	var l corev1.EventList
	if err := c.events.List(ctx, &l, client.MatchingFields{"reason": reclaimplan.ReasonKarpenterICE}); err != nil {
		return nil, fmt.Errorf("list Karpenter's %s events: %w", reclaimplan.ReasonKarpenterICE, err)
	}
	return l.Items, nil
}

// spotBack checks that Spot is back for a NodePool: no interruption of its Spot types and no
// Karpenter launch of its NodeClaims failing for insufficient capacity for minSpotStability,
// and a placement score ≥ minPlacementScore in every zone it uses. nil passes.
func (c *Controller) spotBack(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, pool string, f *fleet, sig spotSignals, now time.Time) *reclaimplan.GateResult {
	var reqs []corev1.NodeSelectorRequirement
	if np := f.pools[pool]; np != nil {
		for _, r := range np.Spec.Template.Spec.Requirements {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: r.Key, Operator: r.Operator, Values: r.Values})
		}
	}
	instanceTypes, zoneIDs := reclaimplan.ProbeScope(reqs, f.byPool[pool])
	stability := durationOr(p.Spec.MinSpotStability, 30*time.Minute)
	if ok, last := reclaimplan.SpotStable(sig.tel, instanceTypes, now, stability); !ok {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonSpotUnstable,
			Message: fmt.Sprintf("NodePool %s: a Spot interruption of its instance types at %s, less than minSpotStability %s ago", pool, last.UTC().Format(time.RFC3339), stability)}
	}
	if sig.iceErr != nil {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonProbeFailed, Message: sig.iceErr.Error()}
	}
	if last := reclaimplan.LastICE(sig.ice, pool); last.After(now.Add(-stability)) {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonSpotUnstable,
			Message: fmt.Sprintf("NodePool %s: Karpenter found no capacity for one of its NodeClaims (%s) at %s, less than minSpotStability %s ago", pool, reclaimplan.ReasonKarpenterICE, last.UTC().Format(time.RFC3339), stability)}
	}
	if c.scorer == nil {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonProbeFailed, Message: "no Spot placement scorer configured (AWS clients)"}
	}
	if len(instanceTypes) == 0 || len(zoneIDs) == 0 {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonProbeFailed,
			Message: fmt.Sprintf("NodePool %s: cannot probe Spot: instance types %v, zone IDs %v (nodes need the label %s)", pool, instanceTypes, zoneIDs, reclaimplan.LabelZoneID)}
	}
	key := strings.Join(instanceTypes, ",") + "|" + strings.Join(zoneIDs, ",")
	r, fresh := c.probes.get(key, now, c.opts.ProbeTTL)
	if !fresh {
		req := cloud.PlacementRequest{InstanceTypes: instanceTypes, TargetCapacity: 1, SingleAZ: true}
		if c.opts.Region != "" {
			req.Regions = []string{c.opts.Region}
		}
		scores, err := c.scorer.PlacementScores(ctx, req)
		r = probeResult{at: now, score: cloud.MinScore(scores, zoneIDs), err: err}
		c.probes.put(key, r)
	}
	if r.err != nil {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonProbeFailed, Message: fmt.Sprintf("NodePool %s: %v", pool, r.err)}
	}
	minScore := p.Spec.MinPlacementScore
	if minScore == 0 {
		minScore = 7
	}
	if score := r.score; score < int(minScore) {
		return &reclaimplan.GateResult{Reason: v1alpha1.ReasonLowPlacementScore,
			Message: fmt.Sprintf("NodePool %s: Spot placement score %d over zones %v, below minPlacementScore %d", pool, score, zoneIDs, minScore)}
	}
	return nil
}

func (c *Controller) telemetry(ctx context.Context) *telemetry.Telemetry {
	cm := &corev1.ConfigMap{}
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: telemetry.Name}, cm); err != nil {
		return nil // none yet: nothing interrupted
	}
	t, err := telemetry.Parse(cm.Data)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the interruption telemetry; treating Spot as stable")
		return nil
	}
	return t
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// startMove cordons the node and records the move on it (one write, resourceVersion
// precondition): from here on a restarted controller finishes or undoes it.
func (c *Controller) startMove(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, n *corev1.Node, pool string, f *fleet, now time.Time) (v1alpha1.MoveStatus, error) {
	pods := f.podsOf[n.Name]
	rs, err := handoff.ReplicaSetOwners(ctx, c.client, pods)
	if err != nil {
		return v1alpha1.MoveStatus{}, err
	}
	m := reclaimplan.Move{Policy: p.Name, NodePool: pool, Phase: reclaimplan.PhaseSurging, Started: now.UTC().Truncate(time.Second), Owners: reclaimplan.OwnersOf(pods, rs)}
	before := n.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Spec.Unschedulable = true
	n.Annotations[v1alpha1.AnnotationReclaimBack] = m.Encode()
	if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return v1alpha1.MoveStatus{}, fmt.Errorf("cordon %s: %w", n.Name, err)
	}
	metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultTried).Inc()
	msg := fmt.Sprintf("Spot is back for NodePool %s: cordoned the On-Demand fallback node %s; surging the owners of its %d Pod(s) onto Spot", pool, n.Name, len(pods))
	c.event(n, f.pools[pool], corev1.EventTypeNormal, v1alpha1.EventReclaimBackStarted, msg)
	klog.FromContext(ctx).Info("Reclaim-back move started", "node", klog.KObj(n), "nodePool", pool, "owners", len(m.Owners))
	return v1alpha1.MoveStatus{Node: n.Name, NodePool: pool, Phase: string(m.Phase), Started: metav1.NewTime(m.Started)}, nil
}

// event records on the Node and, when known, its NodePool.
func (c *Controller) event(n *corev1.Node, np *karpv1.NodePool, typ, reason, msg string) {
	if np != nil {
		c.recorder.Eventf(n, np, typ, reason, "ReclaimBack", msg)
		c.recorder.Eventf(np, n, typ, reason, "ReclaimBack", msg)
		return
	}
	c.recorder.Eventf(n, nil, typ, reason, "ReclaimBack", msg)
}

// recordResult counts a finished move in the status, once: status.lastMove names it, so a
// restart between this write and the node's is not counted twice.
func (c *Controller) recordResult(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, node string, m reclaimplan.Move, succeeded bool, now time.Time) error {
	if lm := p.Status.LastMove; lm != nil && lm.Node == node && lm.Started.Time.Equal(m.Started) {
		return nil
	}
	before := p.DeepCopy()
	c.accrue(p, now) // count the hours so far at the old number of returned nodes
	result := v1alpha1.MoveSucceeded
	if succeeded {
		p.Status.Succeeded++
		p.Status.ReturnedNodes++
		p.Status.ConsecutiveFailures = 0
		if p.Status.AccountedAt == nil {
			p.Status.AccountedAt = &metav1.Time{Time: now}
		}
		metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultSucceeded).Inc()
	} else {
		result = v1alpha1.MoveAborted
		p.Status.Aborted++
		p.Status.ConsecutiveFailures++
		cd := p.Spec.CoolDown
		wait := reclaimplan.CoolDown(int(p.Status.ConsecutiveFailures), orDefault(cd.Initial.Duration, 10*time.Minute), orDefault(cd.Max.Duration, 4*time.Hour))
		p.Status.CoolDownUntil = &metav1.Time{Time: now.Add(wait)}
		metrics.ReclaimBackMoves.WithLabelValues(metrics.ResultAborted).Inc()
	}
	p.Status.LastMove = &v1alpha1.FinishedMove{Node: node, NodePool: m.NodePool, Started: metav1.NewTime(m.Started), Finished: metav1.NewTime(now), Result: result, Reason: m.Reason}
	return c.writeStatus(ctx, before, p)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

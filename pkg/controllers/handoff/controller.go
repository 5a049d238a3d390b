package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/scaling"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// DeletionCost is the pod-deletion-cost given to lifeboat Pods before a scale-down, so the
// ReplicaSet controller removes them first.
const DeletionCost = "-10000"

// Surge is the AnnotationHandoffSurge document on a Deployment.
type Surge struct {
	Node        string `json:"node"`
	Base        int32  `json:"base"`
	Surge       int32  `json:"surge"`
	ReadyBefore int32  `json:"readyBefore"`
}

// Controller hands off active lifeboat nodes.
type Controller struct {
	client   client.Client
	clock    clock.Clock
	recorder events.EventRecorder
	// Poll is the requeue period during a drain. Default 2s.
	Poll time.Duration
	// Namespace of the seats (seat.go): Lifeboat's. Default lifeboat-system.
	Namespace string
	// SeatImage runs in the seats. Default DefaultSeatImage.
	SeatImage string
	// SeatPrePullOff: seats do not pull the Pods' images (SeatSpec.PrePullImages).
	SeatPrePullOff bool
}

// New returns the controller.
func New(c client.Client, clk clock.Clock, recorder events.EventRecorder) *Controller {
	return &Controller{client: c, clock: clk, recorder: recorder, Poll: 2 * time.Second,
		Namespace: v1alpha1.DefaultNamespace, SeatImage: DefaultSeatImage}
}

// serving are the states of a lifeboat node that is handed off: active, then draining.
var serving = []v1alpha1.NodeState{v1alpha1.NodeStateActive, v1alpha1.NodeStateDraining}

// Register adds the controller.
func (c *Controller) Register(mgr ctrl.Manager) error {
	inStates := predicate.NewPredicateFuncs(func(o client.Object) bool { return nodeutil.InPoolState(o, serving...) })
	return ctrl.NewControllerManagedBy(mgr).Named("handoff").
		For(&corev1.Node{}, builder.WithPredicates(inStates)).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(surgedNode)).
		// A protected Pod gone from a lifeboat: its seat goes now, for its replacement.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podNode), builder.WithPredicates(protectedPodGone)).
		// A seat seen (at start too): its lifeboat's pass deletes it if the lifeboat is gone. A
		// seat turning Ready: the Pod it keeps room for moves now, not at the next poll.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(SeatNode), builder.WithPredicates(predicate.Or(seatCreated, SeatTurnedReady))).
		// An interrupted node gone: the seats made at its holds that no lifeboat adopted go.
		Watches(&corev1.Node{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(interruptedNodeDeleted)).
		// A PodDisruptionBudget allowing a disruption again (the last moved Pod is Ready): the
		// next Pod that leaves for its seat goes now, not at the next poll.
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(c.seatLifeboatsIn), builder.WithPredicates(budgetFreed)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(c)
}

// Reconcile moves one lifeboat node through its handoff.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("node", req.Name)
	ctx = klog.NewContext(ctx, log)
	n := &corev1.Node{}
	if err := c.client.Get(ctx, req.NamespacedName, n); err != nil {
		if apierrors.IsNotFound(err) {
			return c.leftover(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	if nodeutil.Pool(n) == "" {
		// Not a lifeboat: an interrupted node whose held Pods got seats at the hold (the
		// bridge), woken by a seat or a Pod. Its seats are its Pods' lifeboats' to adopt, or
		// go with it.
		return reconcile.Result{}, c.endOrphanSurges(ctx, n.Name)
	}
	if !nodeutil.InPoolState(n, serving...) {
		return c.leftover(ctx, n.Name)
	}
	pool := &v1alpha1.WarmPool{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: nodeutil.Pool(n)}, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := c.clock.Now()
	if err := c.syncSeats(ctx, pool, n); err != nil {
		// Seats only save time: the handoff goes on without them.
		log.Error(err, "Keeping seats for the Pods the handoff will evict")
	}
	if nodeutil.State(n) == v1alpha1.NodeStateActive {
		return c.maybeStart(ctx, pool, n, now)
	}
	return c.drain(ctx, pool, n, now)
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

func (c *Controller) maybeStart(ctx context.Context, pool *v1alpha1.WarmPool, n *corev1.Node, now time.Time) (reconcile.Result, error) {
	if nodeutil.HasTaint(n, v1alpha1.TaintStandby) {
		return reconcile.Result{}, nil // not activated yet
	}
	activated, ok := nodeutil.Time(n.Annotations, v1alpha1.AnnotationActivatedAt)
	if !ok {
		activated = now
	}
	active := durationOr(pool.Spec.ActiveDuration, 5*time.Minute)
	others, err := c.activatedTimes(ctx, n.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	due := HandoffDue(activated, active, others)
	// A held Pod still serves on its interrupted node and is about to move onto a lifeboat (a
	// StatefulSet's Pods move one at a time): handing off now would release its hold ("no
	// lifeboat") and drain the lifeboat it just moved to. Holds end by their deadline, inside
	// the notice, so this wait is bounded whatever the pool's handoff mode.
	if until, err := c.latestHold(ctx, now); err != nil {
		return reconcile.Result{}, err
	} else if now.Before(until) {
		return reconcile.Result{RequeueAfter: min(until.Sub(now), c.Poll)}, nil
	}
	if now.Before(due) {
		// Pods whose seat already holds room leave now; the rest of the node waits for due.
		seating, err := c.moveToSeats(ctx, pool, n, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		if pool.Spec.Handoff != v1alpha1.HandoffWhenReplacementReady {
			if seating {
				return reconcile.Result{RequeueAfter: min(due.Sub(now), c.Poll)}, nil
			}
			return reconcile.Result{RequeueAfter: due.Sub(now)}, nil
		}
		ready, err := c.replacementReady(ctx, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !ready {
			return reconcile.Result{RequeueAfter: min(due.Sub(now), 5*time.Second)}, nil
		}
	}
	before := n.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Spec.Unschedulable = true
	n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateDraining)
	n.Annotations[v1alpha1.AnnotationDrainingSince] = nodeutil.FormatTime(now)
	if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	msg := fmt.Sprintf("Cordoned after %s active; draining onto other capacity, surging first", now.Sub(activated).Round(time.Second))
	if pods, err := podsOn(ctx, c.client, n.Name); err == nil {
		if w := Waiting(GroupPods(pods, nil)); w > 0 {
			deadline := now.Add(durationOr(pool.Spec.HandoffDeadline, 15*time.Minute))
			msg += fmt.Sprintf("; %d Job Pod(s) run to completion here (moving them would restart them and grow their Job's back-off) until the handoff deadline %s", w, deadline.UTC().Format(time.RFC3339))
		}
	}
	c.recorder.Eventf(n, pool, corev1.EventTypeNormal, v1alpha1.EventHandoffStarted, "Handoff", msg)
	return reconcile.Result{RequeueAfter: c.Poll}, nil
}

// HandoffDue is when a lifeboat claimed at activated hands off: activeDuration after the
// latest claim of its burst — every lifeboat claimed from activated to activated +
// activeDuration. A burst's lifeboats hand off together, so a Pod moved off one (a StatefulSet
// Pod, a surge Pod) never lands on another that is itself handed off moments later; the
// simulation measured StatefulSet Pods moved three times in a row as a burst's lifeboats were
// handed off one by one. The wait is at most one more activeDuration. Pure.
func HandoffDue(activated time.Time, activeDuration time.Duration, others []time.Time) time.Time {
	latest := activated
	for _, t := range others {
		if t.After(latest) && !t.After(activated.Add(activeDuration)) {
			latest = t
		}
	}
	return latest.Add(activeDuration)
}

// activatedTimes are the claim times of the other active lifeboat nodes (every pool).
func (c *Controller) activatedTimes(ctx context.Context, self string) ([]time.Time, error) {
	list := &corev1.NodeList{}
	if err := c.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelState: string(v1alpha1.NodeStateActive)}); err != nil {
		return nil, err
	}
	var out []time.Time
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == self || nodeutil.Pool(o) == "" {
			continue
		}
		if t, ok := nodeutil.Time(o.Annotations, v1alpha1.AnnotationActivatedAt); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// latestHold is the latest deadline of the bridge holds active at now (zero when none is).
func (c *Controller) latestHold(ctx context.Context, now time.Time) (time.Time, error) {
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingLabels{v1alpha1.LabelProtected: "true"}); err != nil {
		return time.Time{}, err
	}
	var latest time.Time
	for i := range pods.Items {
		if v := policy.EvictionHold(&pods.Items[i], nil, now, 0); v.Hold && v.Until.After(latest) {
			latest = v.Until
		}
	}
	return latest, nil
}

// waitingProtectedPods are the protected Pods not yet scheduled (and not going).
func (c *Controller) waitingProtectedPods(ctx context.Context) ([]*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingLabels{v1alpha1.LabelProtected: "true"}); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == "" && p.DeletionTimestamp.IsZero() && !nodeutil.IsTerminal(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// replacementReady: no protected Pod is Pending or held by the bridge, every seat is placed,
// and every Karpenter NodeClaim is initialized.
func (c *Controller) replacementReady(ctx context.Context, now time.Time) (bool, error) {
	if until, err := c.latestHold(ctx, now); err != nil || now.Before(until) {
		return false, err
	}
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingLabels{v1alpha1.LabelProtected: "true"}); err != nil {
		return false, err
	}
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodPending {
			return false, nil
		}
	}
	// A seat not yet placed is room the handoff's evictions would wait for.
	seats := &corev1.PodList{}
	if err := c.client.List(ctx, seats, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelSeat: "true"}); err != nil {
		return false, err
	}
	for i := range seats.Items {
		if seats.Items[i].Spec.NodeName == "" {
			return false, nil
		}
	}
	claims := &karpv1.NodeClaimList{}
	if err := c.client.List(ctx, claims); err != nil {
		if meta.IsNoMatchError(err) {
			return true, nil
		}
		return false, err
	}
	for i := range claims.Items {
		if !claims.Items[i].StatusConditions().Get(karpv1.ConditionTypeInitialized).IsTrue() {
			return false, nil
		}
	}
	return true, nil
}

// podsOn lists the Pods a drain must move: not terminal, not DaemonSet, not pre-pull.
func podsOn(ctx context.Context, c client.Client, node string) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if nodeutil.IsTerminal(p) || nodeutil.IsDaemonSetPod(p) || nodeutil.IsPrePullPod(p) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// PodsOn is podsOn for the recycle controller.
func PodsOn(ctx context.Context, c client.Client, node string) ([]*corev1.Pod, error) {
	return podsOn(ctx, c, node)
}

func (c *Controller) drain(ctx context.Context, pool *v1alpha1.WarmPool, n *corev1.Node, now time.Time) (reconcile.Result, error) {
	pods, err := podsOn(ctx, c.client, n.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	since, ok := nodeutil.Time(n.Annotations, v1alpha1.AnnotationDrainingSince)
	if !ok {
		since = now
	}
	rsToDeploy, err := c.replicaSetOwners(ctx, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	groups := GroupPods(pods, rsToDeploy)
	if len(pods) == 0 {
		// Empty: the recycle controller takes it from here. A surge still on record lost its
		// lifeboat Pods another way.
		return reconcile.Result{}, c.endOrphanSurges(ctx, n.Name)
	}
	deadline := since.Add(durationOr(pool.Spec.HandoffDeadline, 15*time.Minute))
	if now.After(deadline) {
		return c.forceDrain(ctx, pool, n, groups)
	}
	var errs []error
	sv, err := c.seatView(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Before any eviction: where each evicted Pod's seat is, so the webhook can send its
	// replacement there (its images are pulled there).
	recorded, err := c.recordSeats(ctx, n, groups, sv, now)
	if err != nil {
		errs = append(errs, err)
	}
	blocked := []string{}
	// Pods with seats leave first: a Deployment's surge Pods (a higher tier, and Pending until
	// Karpenter's capacity comes) would take the room a seat frees before the evicted Pod's
	// replacement. The Deployment's Pods serve here meanwhile; SeatWait bounds the wait.
	elsewhere, err := c.seatedElsewhere(ctx, sv, n.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	seatsFirst := SeatsFirst(groups, elsewhere, now.Sub(since))
	for _, g := range groups {
		switch g.Kind {
		case KindDeployment:
			if seatsFirst {
				continue
			}
			if err := c.surgeStep(ctx, n, g); err != nil {
				errs = append(errs, err)
			}
		case KindWait:
			// Left to finish: the node is cordoned, so nothing new lands here.
		case KindEvict:
			for _, p := range g.Pods {
				if !p.DeletionTimestamp.IsZero() {
					continue
				}
				if NeedsSeat(g, p) && !sv.allowsEviction(p, recorded, now.Sub(since)) {
					continue // it serves here until its seat holds room elsewhere
				}
				// The seat stays until the Pod is gone (syncSeats): its room is not free for
				// other Pods during the grace period, and its replacement takes it.
				err := c.client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
				switch {
				case apierrors.IsTooManyRequests(err):
					// A PDB that only paces (another of its Pods is moving, so it allows no
					// disruption for now) is no alarm; one that allows none at all is.
					if stuck, perr := c.blockedForGood(ctx, p); perr != nil {
						errs = append(errs, perr)
					} else if stuck {
						blocked = append(blocked, p.Namespace+"/"+p.Name)
					}
				case err != nil && !apierrors.IsNotFound(err):
					errs = append(errs, fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err))
				}
			}
		}
	}
	if len(blocked) > 0 {
		msg := fmt.Sprintf("Drain of %s blocked by PodDisruptionBudgets that allow no disruption for %v; it continues until the handoff deadline %s, then deletes them", n.Name, blocked, deadline.UTC().Format(time.RFC3339))
		if c.setDegraded(ctx, pool, v1alpha1.ReasonDrainBlockedByPDB, msg) {
			c.recorder.Eventf(n, pool, corev1.EventTypeWarning, v1alpha1.EventDrainBlockedByPDB, "Drain", msg)
		}
	}
	return reconcile.Result{RequeueAfter: c.Poll}, errors.Join(errs...)
}

func (c *Controller) replicaSetOwners(ctx context.Context, pods []*corev1.Pod) (map[string]string, error) {
	return ReplicaSetOwners(ctx, c.client, pods)
}

// ReplicaSetOwners maps "namespace/replicaset" of the Pods' ReplicaSets to the Deployment that
// controls each ("" for none, or a ReplicaSet gone).
func ReplicaSetOwners(ctx context.Context, c client.Reader, pods []*corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pods {
		for _, o := range p.OwnerReferences {
			if o.Kind != "ReplicaSet" {
				continue
			}
			k := p.Namespace + "/" + o.Name
			if _, done := out[k]; done {
				continue
			}
			rs := &appsv1.ReplicaSet{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: o.Name}, rs); err != nil {
				if apierrors.IsNotFound(err) {
					out[k] = ""
					continue
				}
				return nil, err
			}
			out[k] = ""
			if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == "Deployment" {
				out[k] = ref.Name
			}
		}
	}
	return out, nil
}

// surgeStep advances one Deployment's surge: raise replicas by the lifeboat Pods' count (and an
// HPA's minReplicas, which would otherwise undo it); once the Ready Pods elsewhere reach the
// ready count from before the handoff, give the lifeboat Pods the lowest deletion cost and scale
// back. The surge lives in an annotation so a restart resumes it.
func (c *Controller) surgeStep(ctx context.Context, n *corev1.Node, g Group) error {
	d := &appsv1.Deployment{}
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Name}, d); err != nil {
		return client.IgnoreNotFound(err)
	}
	phase, s, err := SurgeOf(d, n.Name)
	switch {
	case err != nil:
		return err
	case phase == SurgeWait:
		return nil
	case phase == SurgeStart:
		return c.startSurge(ctx, d, n, len(g.Pods))
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	ready, err := c.readyElsewhere(ctx, d.Namespace, sel, n.Name)
	if err != nil {
		return err
	}
	if !SurgeDone(ready, SurgeTarget(s)) {
		// Idempotent: a restart between the surge and the HPA's patch raises it now. (Not
		// once the surge is done: endSurge may already have restored the HPA.)
		return scaling.RaiseHPA(ctx, c.client, d, s.Base+s.Surge)
	}
	for _, p := range g.Pods {
		if p.Annotations[corev1.PodDeletionCost] == DeletionCost {
			continue
		}
		before := p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[corev1.PodDeletionCost] = DeletionCost
		if err := c.client.Patch(ctx, p, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return c.endSurge(ctx, d, s)
}

// startSurge raises d's replicas by the node's Pods (NewSurge), recorded in the Deployment so
// a restart resumes it, and raises an HPA's minReplicas, which would otherwise undo it.
func (c *Controller) startSurge(ctx context.Context, d *appsv1.Deployment, n *corev1.Node, pods int) error {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	readyNow, err := c.readyElsewhere(ctx, d.Namespace, sel, "")
	if err != nil {
		return err
	}
	s := NewSurge(d, n.Name, pods, readyNow)
	raw, _ := json.Marshal(s)
	before := d.DeepCopy()
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[v1alpha1.AnnotationHandoffSurge] = string(raw)
	d.Spec.Replicas = ptr.To(s.Base + s.Surge)
	if err := c.client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("surge %s/%s: %w", d.Namespace, d.Name, err)
	}
	return scaling.RaiseHPA(ctx, c.client, d, s.Base+s.Surge)
}

// endSurge takes the surge back. The HPA goes back first: were the Deployment scaled back while
// the HPA's raised minReplicas still stood, the HPA would scale it up again at its next sync,
// and a crash between the two writes would leave the HPA raised for good (the Deployment's surge
// annotation, the only trace, is gone with the scale-back). In this order a crash leaves the
// surge annotation, and the next pass finishes the scale-back. An HPA whose maxReplicas comes
// back below the surged count scales the Deployment down itself; the ReplicaSet controller
// removes the lifeboat Pods first either way (deletion cost).
func (c *Controller) endSurge(ctx context.Context, d *appsv1.Deployment, s Surge) error {
	if err := c.restoreHPAUnlessBridging(ctx, d); err != nil {
		return err
	}
	before := d.DeepCopy()
	delete(d.Annotations, v1alpha1.AnnotationHandoffSurge)
	// If something else changed replicas meanwhile (an HPA, a user), take back only the surge.
	d.Spec.Replicas = ptr.To(max(ptr.Deref(d.Spec.Replicas, s.Base+s.Surge)-s.Surge, s.Base))
	if err := c.client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("scale back %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

func (c *Controller) readyElsewhere(ctx context.Context, ns string, sel labels.Selector, node string) (int32, error) {
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, err
	}
	var n int32
	for _, p := range list.Items {
		if p.Spec.NodeName != node && p.DeletionTimestamp.IsZero() && nodeutil.PodReady(&p) {
			n++
		}
	}
	return n, nil
}

// restoreHPAUnlessBridging restores d's HPA unless a bridge surge of d still needs it raised
// (the bridge controller restores it when its own surge ends).
func (c *Controller) restoreHPAUnlessBridging(ctx context.Context, d *appsv1.Deployment) error {
	if _, bridging := scaling.Surging(d); bridging {
		return nil
	}
	return scaling.RestoreHPA(ctx, c.client, d)
}

// AnnotationHandoffHPAMax is scaling.AnnotationHPAOriginalMax (kept for callers of this package).
const AnnotationHandoffHPAMax = scaling.AnnotationHPAOriginalMax

// forceDrain runs at the deadline: surges are ended, remaining Pods evicted, or, where a PDB
// forbids it, marked as disrupted and deleted. The DisruptionTarget condition is what the
// Eviction API would have set: a Job's podFailurePolicy can then tell a disruption from a
// failure (a plain DELETE would count against its backoffLimit).
func (c *Controller) forceDrain(ctx context.Context, pool *v1alpha1.WarmPool, n *corev1.Node, groups []Group) (reconcile.Result, error) {
	var errs []error
	forced, jobs := 0, 0
	for _, g := range groups {
		if g.Kind == KindDeployment {
			d := &appsv1.Deployment{}
			if err := c.client.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Name}, d); err == nil {
				var s Surge
				if raw := d.Annotations[v1alpha1.AnnotationHandoffSurge]; raw != "" && json.Unmarshal([]byte(raw), &s) == nil && s.Node == n.Name {
					if err := c.endSurge(ctx, d, s); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		for _, p := range g.Pods {
			if !p.DeletionTimestamp.IsZero() {
				continue
			}
			if g.Kind == KindWait {
				jobs++
			} else {
				forced++
			}
			if err := c.removePod(ctx, p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	deadline := durationOr(pool.Spec.HandoffDeadline, 15*time.Minute)
	if forced > 0 {
		msg := fmt.Sprintf("Handoff deadline %s passed on %s: removed %d remaining Pods regardless of their PodDisruptionBudgets", deadline, n.Name, forced)
		c.setDegraded(ctx, pool, v1alpha1.ReasonHandoffDeadline, msg)
		c.recorder.Eventf(n, pool, corev1.EventTypeWarning, v1alpha1.EventHandoffDeadline, "Drain", msg)
	}
	if jobs > 0 {
		c.recorder.Eventf(n, pool, corev1.EventTypeNormal, v1alpha1.EventHandoffDeadline, "Drain",
			"Handoff deadline %s passed on %s: evicted %d Job Pods still running; their Jobs re-create them elsewhere (from their last checkpoint)", deadline, n.Name, jobs)
	}
	return reconcile.Result{RequeueAfter: c.Poll}, errors.Join(errs...)
}

// removePod evicts p; when a PDB refuses, it sets the DisruptionTarget condition and deletes p.
func (c *Controller) removePod(ctx context.Context, p *corev1.Pod) error {
	err := c.client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	if !apierrors.IsTooManyRequests(err) {
		return fmt.Errorf("evict %s/%s at the handoff deadline: %w", p.Namespace, p.Name, err)
	}
	cond := corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonDeadline,
		Message:            "lifeboat: the handoff deadline of the lifeboat node passed",
		LastTransitionTime: metav1.NewTime(c.clock.Now()),
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err := c.client.Status().Patch(ctx, p, client.RawPatch(types.StrategicMergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("mark %s/%s disrupted: %w", p.Namespace, p.Name, err)
	}
	if err := c.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s/%s at the handoff deadline: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// ReasonDeadline is the reason of the DisruptionTarget condition on Pods deleted at the handoff
// deadline (the Eviction API's is EvictionByEvictionAPI).
const ReasonDeadline = "TerminationByLifeboatHandoffDeadline"

// setDegraded sets the pool's Degraded condition; it reports whether it changed.
func (c *Controller) setDegraded(ctx context.Context, pool *v1alpha1.WarmPool, reason, msg string) bool {
	if cur := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionDegraded); cur != nil && cur.Status == metav1.ConditionTrue && cur.Reason == reason {
		return false
	}
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: pool.Generation})
	if err := c.client.Status().Update(ctx, pool); err != nil {
		klog.FromContext(ctx).Error(err, "Setting the Degraded condition")
		return false
	}
	return true
}

// ObserveHandoff records a finished handoff (called by recycle).
func ObserveHandoff(n *corev1.Node, now time.Time, outcome string) {
	if since, ok := nodeutil.Time(n.Annotations, v1alpha1.AnnotationDrainingSince); ok {
		metrics.HandoffSeconds.WithLabelValues(outcome).Observe(now.Sub(since).Seconds())
	}
}

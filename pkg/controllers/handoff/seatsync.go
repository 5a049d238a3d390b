package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// syncSeats keeps one seat per Pod of the lifeboat node n that the handoff will evict, and
// deletes the others (fetch, PlanSeats, write).
func (c *Controller) syncSeats(ctx context.Context, pool *v1alpha1.WarmPool, n *corev1.Node) error {
	pods, err := podsOn(ctx, c.client, n.Name)
	if err != nil {
		return err
	}
	rsToDeploy, err := c.replicaSetOwners(ctx, pods)
	if err != nil {
		return err
	}
	existing, err := c.listSeats(ctx)
	if err != nil {
		return err
	}
	nodes, err := c.seatNodes(ctx, existing)
	if err != nil {
		return err
	}
	plan := PlanSeats(n, GroupPods(pods, rsToDeploy), existing, usableNodes(nodes), SeatSpec{Namespace: c.Namespace, Image: c.SeatImage, PrePullImages: !c.SeatPrePullOff, Pool: pool})
	var errs []error
	for _, s := range plan.Create {
		if err := c.client.Create(ctx, s); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("create seat %s for %s: %w", s.Name, s.Annotations[v1alpha1.AnnotationSeatFor], err))
			}
			continue
		}
		klog.FromContext(ctx).V(2).Info("Seat created", "seat", s.Name, "for", s.Annotations[v1alpha1.AnnotationSeatFor])
	}
	for _, s := range plan.Adopt {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations":     map[string]string{v1alpha1.AnnotationSeatNode: n.Name},
			"ownerReferences": s.OwnerReferences,
		}})
		if err != nil {
			return err
		}
		old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
		if err := c.client.Patch(ctx, old, client.RawPatch(types.MergePatchType, patch)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("adopt seat %s for %s: %w", s.Name, s.Annotations[v1alpha1.AnnotationSeatFor], err))
			}
			continue
		}
		klog.FromContext(ctx).V(2).Info("Seat adopted", "seat", s.Name, "for", s.Annotations[v1alpha1.AnnotationSeatFor], "seatNode", s.Spec.NodeName)
	}
	for _, name := range plan.Delete {
		if err := c.deleteSeat(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leftover clears what a node that is gone — a lifeboat, or an interrupted node whose held
// Pods got seats — or a lifeboat no longer active or draining left behind: its handoff surges,
// and its seats (nothing else deletes them: the WarmPool owns them, or nothing does) but those
// whose Pod is on its way to a lifeboat that will adopt them (SeatAwaitsAdoption): Karpenter
// deletes an interrupted node as soon as its last Pod left — the bridge's move of a
// StatefulSet Pod to its lifeboat, a second before the lifeboat adopts the seat. Looks again
// after Poll while such a seat waits.
func (c *Controller) leftover(ctx context.Context, node string) (reconcile.Result, error) {
	seats, err := c.listSeats(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var errs []error
	waiting := false
	for _, s := range seats {
		if s.Annotations[v1alpha1.AnnotationSeatNode] != node || !s.DeletionTimestamp.IsZero() {
			continue
		}
		p, at, err := c.seatPod(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if SeatAwaitsAdoption(p, at, c.clock.Now()) {
			waiting = true
			continue
		}
		errs = append(errs, c.deleteSeat(ctx, s.Name))
	}
	errs = append(errs, c.endOrphanSurges(ctx, node))
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if waiting {
		return reconcile.Result{RequeueAfter: c.Poll}, nil
	}
	return reconcile.Result{}, nil
}

// seatedElsewhere says whether a Pod that needs a seat is still on a lifeboat other than node
// (active or draining, the Pod not deleted): a seat of another lifeboat's whose Pod is there.
func (c *Controller) seatedElsewhere(ctx context.Context, sv *seatState, node string) (bool, error) {
	for _, s := range sv.seats {
		if s.Annotations[v1alpha1.AnnotationSeatNode] == node || !s.DeletionTimestamp.IsZero() {
			continue
		}
		p, at, err := c.seatPod(ctx, s)
		if err != nil {
			return false, err
		}
		if p != nil && at != nil && p.Spec.NodeName == s.Annotations[v1alpha1.AnnotationSeatNode] &&
			p.DeletionTimestamp.IsZero() && nodeutil.InPoolState(at, serving...) {
			return true, nil
		}
	}
	return false, nil
}

// seatPod is the Pod seat s keeps room for (nil: gone) and the Node it is bound to (nil: not
// bound, or gone).
func (c *Controller) seatPod(ctx context.Context, s *corev1.Pod) (*corev1.Pod, *corev1.Node, error) {
	ns, name, ok := strings.Cut(s.Annotations[v1alpha1.AnnotationSeatFor], "/")
	if !ok {
		return nil, nil, nil
	}
	p := &corev1.Pod{}
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	if p.Spec.NodeName == "" {
		return p, nil, nil
	}
	n := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, n); err != nil {
		return p, nil, client.IgnoreNotFound(err)
	}
	return p, n, nil
}

// SeatAdoptWait bounds how long a seat whose node is gone waits for its Pod, re-created and
// not yet bound, to reach a lifeboat.
const SeatAdoptWait = 30 * time.Second

// SeatAwaitsAdoption says whether a seat whose node left must stay for its Pod p (nil: gone),
// bound to node at (nil: none): p runs on an active or draining lifeboat (whose pass adopts the
// seat), or was re-created less than SeatAdoptWait ago and is not bound yet. Pure.
func SeatAwaitsAdoption(p *corev1.Pod, at *corev1.Node, now time.Time) bool {
	if p == nil || !p.DeletionTimestamp.IsZero() || nodeutil.IsTerminal(p) {
		return false
	}
	if p.Spec.NodeName == "" {
		return now.Sub(p.CreationTimestamp.Time) < SeatAdoptWait
	}
	return at != nil && nodeutil.InPoolState(at, serving...)
}

func (c *Controller) deleteSeat(ctx context.Context, name string) error {
	return DeleteSeat(ctx, c.client, c.Namespace, name)
}

// DeleteSeat deletes the seat namespace/name at once (no grace: it runs nothing); a seat
// already gone is no error.
func DeleteSeat(ctx context.Context, c client.Client, namespace, name string) error {
	s := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Delete(ctx, s, &client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete seat %s: %w", name, err)
	}
	return nil
}

// listSeats lists every seat (all lifeboats').
func (c *Controller) listSeats(ctx context.Context) ([]*corev1.Pod, error) {
	return ListSeats(ctx, c.client, c.Namespace)
}

// ListSeats lists the seats in namespace (Lifeboat's), with opts added to the list's options.
func ListSeats(ctx context.Context, r client.Reader, namespace string, opts ...client.ListOption) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.List(ctx, list, append([]client.ListOption{client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelSeat: "true"}}, opts...)...); err != nil {
		return nil, err
	}
	seats := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		seats = append(seats, &list.Items[i])
	}
	return seats, nil
}

// seatNodes are the Nodes the seats are placed on, by name (a Node gone is left out).
func (c *Controller) seatNodes(ctx context.Context, seats []*corev1.Pod) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	for _, s := range seats {
		if s.Spec.NodeName == "" || out[s.Spec.NodeName] != nil {
			continue
		}
		node := &corev1.Node{}
		if err := c.client.Get(ctx, types.NamespacedName{Name: s.Spec.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		out[s.Spec.NodeName] = node
	}
	return out, nil
}

// usableNodes: node name → SeatNodeUsable.
func usableNodes(nodes map[string]*corev1.Node) map[string]bool {
	out := make(map[string]bool, len(nodes))
	for name, n := range nodes {
		out[name] = SeatNodeUsable(n)
	}
	return out
}

// seatState is what decides whether a Pod may leave for its seat: every seat (by name), the
// Nodes they are placed on and which of those can take a Pod, and the protected Pods waiting to
// be scheduled.
type seatState struct {
	seats   []*corev1.Pod
	byName  map[string]*corev1.Pod
	nodes   map[string]*corev1.Node
	usable  map[string]bool
	waiting []*corev1.Pod
}

func (c *Controller) seatView(ctx context.Context) (*seatState, error) {
	seats, err := c.listSeats(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := c.seatNodes(ctx, seats)
	if err != nil {
		return nil, err
	}
	waiting, err := c.waitingProtectedPods(ctx)
	if err != nil {
		return nil, err
	}
	sv := &seatState{seats: seats, byName: map[string]*corev1.Pod{}, nodes: nodes, usable: usableNodes(nodes), waiting: waiting}
	for _, s := range seats {
		sv.byName[s.Name] = s
	}
	return sv, nil
}

// allowsEviction: SeatAllowsEviction for Pod p of a lifeboat draining for draining, whose
// seat record held recorded ("namespace/name" of the Pods whose seat host it named when the
// pass began: recordSeats).
func (sv *seatState) allowsEviction(p *corev1.Pod, recorded map[string]bool, draining time.Duration) bool {
	seat := sv.byName[SeatName(p.Namespace, p.Name)]
	return SeatAllowsEviction(seat, seat != nil && sv.usable[seat.Spec.NodeName], recorded[p.Namespace+"/"+p.Name], Contested(p, sv.waiting, sv.seats), draining)
}

// moveToSeats moves, while lifeboat n is still active, each Pod that needs a seat, has a
// controller to re-create it, and whose seat already holds usable room no waiting Pod would
// take first: it is evicted (its PDB applies) and its replacement goes to the seat's node,
// images pulled, instead of waiting for the handoff — the room is there, and the lifeboat's
// remaining time is better spent on Pods that have none yet. It returns whether the node
// still has Pods waiting for their seats (poll until then), and never moves a Pod while a
// bridge hold is active (the bridge's moves onto lifeboats share the same PDBs and come first).
func (c *Controller) moveToSeats(ctx context.Context, pool *v1alpha1.WarmPool, n *corev1.Node, now time.Time) (bool, error) {
	pods, err := podsOn(ctx, c.client, n.Name)
	if err != nil {
		return false, err
	}
	rsToDeploy, err := c.replicaSetOwners(ctx, pods)
	if err != nil {
		return false, err
	}
	groups := GroupPods(pods, rsToDeploy)
	var movable []*corev1.Pod
	for _, g := range groups {
		for _, p := range g.Pods {
			if NeedsSeat(g, p) && metav1.GetControllerOf(p) != nil {
				movable = append(movable, p)
			}
		}
	}
	if len(movable) == 0 {
		return false, nil
	}
	if until, err := c.latestHold(ctx, now); err != nil || now.Before(until) {
		return true, err
	}
	sv, err := c.seatView(ctx)
	if err != nil {
		return true, err
	}
	var errs []error
	recorded, err := c.recordSeats(ctx, n, groups, sv, now)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range movable {
		if !sv.allowsEviction(p, recorded, 0) {
			continue
		}
		err := c.client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case err == nil:
			seat := sv.byName[SeatName(p.Namespace, p.Name)]
			klog.FromContext(ctx).V(2).Info("Moved a Pod to its seat", "pod", klog.KObj(p), "seatNode", seat.Spec.NodeName)
			c.recorder.Eventf(p, pool, corev1.EventTypeNormal, v1alpha1.EventSeatMove, "Move",
				"Moved off lifeboat %s to the room its seat kept on %s (images pulled there), ahead of the handoff", n.Name, seat.Spec.NodeName)
		case apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
			// Its PDB paces the moves (or it is gone): the next pass tries again.
		default:
			errs = append(errs, fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return true, errors.Join(errs...)
}

// recordSeats writes, on lifeboat node n, where the seat of each Pod the handoff will evict
// holds usable room (AnnotationSeats; fetch, SeatHosts, write only when it changes). It
// returns the Pods ("namespace/name") whose seat host n's record named already — those the
// webhook can send to their seat now; the others wait for the pass that sees this write (the
// Node's update starts it).
func (c *Controller) recordSeats(ctx context.Context, n *corev1.Node, groups []Group, sv *seatState, now time.Time) (map[string]bool, error) {
	seats := sv.seats
	hosts := map[string]string{}
	for name, node := range sv.nodes {
		if SeatNodeUsable(node) {
			hosts[name] = node.Labels[corev1.LabelHostname]
			if hosts[name] == "" {
				hosts[name] = name
			}
		}
	}
	current, err := policy.ParseSeatRecord(n.Annotations[v1alpha1.AnnotationSeats])
	if err != nil {
		current = policy.SeatRecord{} // rewritten whole below
	}
	want := SeatHosts(n.Name, groups, seats, hosts)
	recorded := map[string]bool{}
	for key, host := range want {
		recorded[key] = current.Host(key, now) == host
	}
	rec, changed := current.With(want, now)
	if !changed {
		return recorded, nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationSeats: rec.String()}}})
	if err != nil {
		return recorded, err
	}
	if err := c.client.Patch(ctx, n, client.RawPatch(types.MergePatchType, body)); err != nil {
		return recorded, fmt.Errorf("record the seats of %s: %w", n.Name, err)
	}
	return recorded, nil
}

// SeatHosts maps "namespace/name" of each Pod of lifeboat node that NeedsSeat to the hostname
// of the node its placed seat is on (hosts: node name → kubernetes.io/hostname, for the usable
// seat nodes only). Pods whose seat is not placed, or placed on a node not in hosts, are left
// out. Pure.
func SeatHosts(node string, groups []Group, seats []*corev1.Pod, hosts map[string]string) map[string]string {
	byName := map[string]*corev1.Pod{}
	for _, s := range seats {
		if s.Annotations[v1alpha1.AnnotationSeatNode] == node && s.DeletionTimestamp.IsZero() && s.Spec.NodeName != "" {
			byName[s.Name] = s
		}
	}
	out := map[string]string{}
	for _, g := range groups {
		for _, p := range g.Pods {
			s := byName[SeatName(p.Namespace, p.Name)]
			if !NeedsSeat(g, p) || s == nil {
				continue
			}
			if host := hosts[s.Spec.NodeName]; host != "" {
				out[p.Namespace+"/"+p.Name] = host
			}
		}
	}
	return out
}

// podNode maps a Pod to its Node: the handoff of a lifeboat reacts to its Pods leaving.
func podNode(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.NodeName}}}
}

// seatLifeboatsIn maps a PodDisruptionBudget to the lifeboats of the seats kept for Pods of its
// namespace (the cache's seats).
func (c *Controller) seatLifeboatsIn(ctx context.Context, o client.Object) []reconcile.Request {
	seats, err := c.listSeats(ctx)
	if err != nil {
		return nil // the poll still comes
	}
	var out []reconcile.Request
	seen := map[string]bool{}
	for _, s := range seats {
		ns, _, _ := strings.Cut(s.Annotations[v1alpha1.AnnotationSeatFor], "/")
		node := s.Annotations[v1alpha1.AnnotationSeatNode]
		if ns == o.GetNamespace() && node != "" && !seen[node] {
			seen[node] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
		}
	}
	return out
}

// budgetFreed passes a PodDisruptionBudget whose status turns from allowing no disruption to
// allowing one.
var budgetFreed = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*policyv1.PodDisruptionBudget)
		pdb, ok2 := e.ObjectNew.(*policyv1.PodDisruptionBudget)
		return ok1 && ok2 && old.Status.DisruptionsAllowed == 0 && pdb.Status.DisruptionsAllowed > 0
	},
}

// seatCreated passes a seat's create event: every seat at the controller's start (the
// informer's first list), so that a lifeboat deleted while the controller was down still has
// its seats deleted.
var seatCreated = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return e.Object.GetLabels()[v1alpha1.LabelSeat] == "true" },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// SeatTurnedReady passes a seat's update that turns it Ready: its node has pulled the images of
// the Pod it keeps room for, so that Pod may move now (SeatAllowsEviction) rather than at the
// next poll.
var SeatTurnedReady = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Pod)
		p, ok2 := e.ObjectNew.(*corev1.Pod)
		return ok1 && ok2 && p.Labels[v1alpha1.LabelSeat] == "true" && nodeutil.PodReady(p) && !nodeutil.PodReady(old)
	},
}

// SeatNode maps a seat to the node recorded on it: the lifeboat whose handoff keeps it, or the
// interrupted node at whose hold the bridge made it.
func SeatNode(_ context.Context, o client.Object) []reconcile.Request {
	if node := o.GetAnnotations()[v1alpha1.AnnotationSeatNode]; node != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
	}
	return nil
}

// interruptedNodeDeleted passes the deletion of a node the interruption controller decided
// (not a lifeboat): the bridge may have made seats at its holds.
var interruptedNodeDeleted = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc: func(e event.DeleteEvent) bool {
		_, decided := e.Object.GetAnnotations()[v1alpha1.AnnotationResumeDecision]
		return decided && e.Object.GetLabels()[v1alpha1.LabelPool] == ""
	},
}

// protectedPodGone passes a protected Pod bound to a node turning terminal (a kubelet puts a
// deleted Pod in a terminal phase once its containers stopped, just before the object goes and
// its StatefulSet makes the replacement) or deleted: if the node is a draining lifeboat, the
// Pod's seat is freed for the replacement at once, not at the next poll.
var protectedPodGone = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Pod)
		p, ok2 := e.ObjectNew.(*corev1.Pod)
		return ok1 && ok2 && boundProtected(p) && nodeutil.IsTerminal(p) && !nodeutil.IsTerminal(old)
	},
	DeleteFunc: func(e event.DeleteEvent) bool {
		p, ok := e.Object.(*corev1.Pod)
		return ok && boundProtected(p)
	},
}

func boundProtected(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Labels[v1alpha1.LabelProtected] == "true"
}

package reclaimback

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/scaling"
)

// SurgedBy marks the handoff-surge records this controller writes, so that a surge whose node
// vanished mid-move is found and taken back (sweepOrphanSurges). The handoff reads the record
// as its own shape and ignores the field: it waits while another node's surge is on.
const SurgedBy = "reclaim-back"

// surgeRecord is handoff.Surge plus its writer.
type surgeRecord struct {
	handoff.Surge
	By string `json:"by,omitempty"`
}

// advance takes one step of a move in flight (DecideMove) and returns its phase after the
// step, "" once the move is over and the record gone.
func (c *Controller) advance(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, n *corev1.Node, m reclaimplan.Move, f *fleet, now time.Time) (reclaimplan.Phase, error) {
	log := klog.FromContext(ctx).WithValues("node", klog.KObj(n), "phase", m.Phase)
	ctx = klog.NewContext(ctx, log)
	o, err := c.observe(ctx, n, m, f, now, durationOr(p.Spec.MoveTimeout, 15*time.Minute))
	if err != nil {
		return m.Phase, err
	}
	step := reclaimplan.DecideMove(o)
	np := f.pools[m.NodePool]
	switch step.Action {
	case reclaimplan.ActionWait:
		if m.Phase == reclaimplan.PhaseSurging {
			// Idempotent: a restart between a surge and its HPA's patch raises the HPA now.
			return m.Phase, c.raiseHPAs(ctx, m, o)
		}
		return m.Phase, nil
	case reclaimplan.ActionSurge:
		return m.Phase, c.surge(ctx, n, m, o)
	case reclaimplan.ActionDrain:
		if m.Phase == reclaimplan.PhaseSurging {
			// Record the phase first: a restart must never surge again a Deployment whose surge
			// this step takes back.
			m.Phase = reclaimplan.PhaseDraining
			if err := c.setMove(ctx, n, m); err != nil {
				return reclaimplan.PhaseSurging, err
			}
			log.Info("Replacements Ready on Spot; taking the surges back", "owners", len(m.Owners))
		}
		return m.Phase, c.endSurges(ctx, n, m, true)
	case reclaimplan.ActionEvict:
		return m.Phase, c.evict(ctx, n, step.Evict)
	case reclaimplan.ActionDeleteNodeClaim:
		if err := c.deleteNodeClaim(ctx, n); err != nil {
			return m.Phase, err
		}
		if err := c.recordResult(ctx, p, n.Name, m, true, now); err != nil {
			return m.Phase, err
		}
		m.Phase = reclaimplan.PhaseDone
		if err := c.setMove(ctx, n, m); err != nil {
			return reclaimplan.PhaseDone, err
		}
		c.event(n, np, corev1.EventTypeNormal, v1alpha1.EventReclaimBackSucceeded,
			fmt.Sprintf("Moved the On-Demand fallback node %s back to Spot in %s: its Pods run on Spot; NodeClaim deleted", n.Name, now.Sub(m.Started).Round(time.Second)))
		log.Info("Reclaim-back move succeeded", "took", now.Sub(m.Started).Round(time.Second))
		return reclaimplan.PhaseDone, nil
	case reclaimplan.ActionAbort:
		return c.abort(ctx, p, n, m, step, np, now)
	}
	return m.Phase, fmt.Errorf("unknown step %q", step.Action)
}

func (c *Controller) setMove(ctx context.Context, n *corev1.Node, m reclaimplan.Move) error {
	before := n.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Annotations[v1alpha1.AnnotationReclaimBack] = m.Encode()
	if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record phase %s on %s: %w", m.Phase, n.Name, err)
	}
	return nil
}

// observe fetches what DecideMove looks at.
func (c *Controller) observe(ctx context.Context, n *corev1.Node, m reclaimplan.Move, f *fleet, now time.Time, timeout time.Duration) (reclaimplan.Observed, error) {
	o := reclaimplan.Observed{Now: now, Move: m, Timeout: timeout, Deployments: map[string]reclaimplan.DeploymentState{}}
	since := m.Started.Truncate(time.Second) // creationTimestamp has whole seconds
	onNode := map[string]*corev1.Pod{}
	for _, pod := range f.podsOf[n.Name] {
		if nodeutil.IsTerminal(pod) || nodeutil.IsDaemonSetPod(pod) {
			continue
		}
		o.Remaining++
		onNode[pod.Namespace+"/"+pod.Name] = pod
	}
	offSpot := func(pods []corev1.Pod) {
		for i := range pods {
			pod := &pods[i]
			if pod.Spec.NodeName == "" || pod.Spec.NodeName == n.Name || !pod.DeletionTimestamp.IsZero() || pod.CreationTimestamp.Time.Before(since) {
				continue
			}
			if capacity, err := c.capacityType(ctx, f, pod.Spec.NodeName); err == nil && capacity != "spot" {
				o.OffSpot = append(o.OffSpot, pod.Namespace+"/"+pod.Name)
			}
		}
	}
	for _, ow := range m.Owners {
		switch ow.Kind {
		case reclaimplan.KindDeployment:
			d := &appsv1.Deployment{}
			if err := c.client.Get(ctx, types.NamespacedName{Namespace: ow.Namespace, Name: ow.Name}, d); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return o, err
			}
			phase, s, err := handoff.SurgeOf(d, n.Name)
			if err != nil {
				return o, err
			}
			pods, err := c.podsOf(ctx, d.Namespace, d.Spec.Selector)
			if err != nil {
				return o, err
			}
			st := reclaimplan.DeploymentState{Surged: phase == handoff.SurgeRunning, Busy: phase == handoff.SurgeWait, Target: handoff.SurgeTarget(s)}
			for i := range pods {
				if pods[i].Spec.NodeName != n.Name && pods[i].DeletionTimestamp.IsZero() && nodeutil.PodReady(&pods[i]) {
					st.ReadyElsewhere++
				}
			}
			o.Deployments[ow.Key()] = st
			offSpot(pods)
			// After the scale-back, an old Pod the ReplicaSet kept (it removed a Pod that was not
			// Ready elsewhere instead) is evicted once the Deployment has settled.
			if m.Phase == reclaimplan.PhaseDraining && !st.Surged && settled(d) {
				for i := range pods {
					if pods[i].Spec.NodeName == n.Name && pods[i].DeletionTimestamp.IsZero() && !nodeutil.IsTerminal(&pods[i]) {
						o.Evictable = append(o.Evictable, pods[i].Namespace+"/"+pods[i].Name)
					}
				}
			}
		case reclaimplan.KindStatefulSet:
			ss := &appsv1.StatefulSet{}
			if err := c.client.Get(ctx, types.NamespacedName{Namespace: ow.Namespace, Name: ow.Name}, ss); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return o, err
			}
			pods, err := c.podsOf(ctx, ss.Namespace, ss.Spec.Selector)
			if err != nil {
				return o, err
			}
			offSpot(pods)
			want := ptr.Deref(ss.Spec.Replicas, 1)
			ready := int32(0)
			for i := range pods {
				if pods[i].DeletionTimestamp.IsZero() && nodeutil.PodReady(&pods[i]) {
					ready++
				}
			}
			if ready < want {
				o.Replacing = true
			}
			for i := range pods {
				if pods[i].Spec.NodeName == n.Name && pods[i].DeletionTimestamp.IsZero() && !nodeutil.IsTerminal(&pods[i]) {
					o.Evictable = append(o.Evictable, pods[i].Namespace+"/"+pods[i].Name)
				}
			}
		case reclaimplan.KindPod:
			if pod, ok := onNode[ow.Namespace+"/"+ow.Name]; ok && pod.DeletionTimestamp.IsZero() {
				o.Evictable = append(o.Evictable, ow.Namespace+"/"+ow.Name)
			}
		}
	}
	return o, nil
}

// settled: the Deployment controller has acted on the latest spec and runs no extra Pods.
func settled(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == ptr.Deref(d.Spec.Replicas, 1)
}

func (c *Controller) capacityType(ctx context.Context, f *fleet, node string) (string, error) {
	if n, ok := f.nodes[node]; ok {
		return n.Labels[v1alpha1.LabelCapacityType], nil
	}
	n := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
		return "", err
	}
	return n.Labels[v1alpha1.LabelCapacityType], nil
}

func (c *Controller) podsOf(ctx context.Context, ns string, selector *metav1.LabelSelector) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		sel = labels.Nothing()
	}
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// surge raises each Deployment of the move that is not surged yet by its Pods on the node
// (handoff.NewSurge; the record is written with the replica change), and the HPA's bounds.
func (c *Controller) surge(ctx context.Context, n *corev1.Node, m reclaimplan.Move, o reclaimplan.Observed) error {
	var errs []error
	for _, ow := range m.Owners {
		st, ok := o.Deployments[ow.Key()]
		if ow.Kind != reclaimplan.KindDeployment || !ok || st.Surged || st.Busy {
			continue
		}
		d := &appsv1.Deployment{}
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: ow.Namespace, Name: ow.Name}, d); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		pods, err := c.podsOf(ctx, d.Namespace, d.Spec.Selector)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var readyNow int32
		for i := range pods {
			if pods[i].DeletionTimestamp.IsZero() && nodeutil.PodReady(&pods[i]) {
				readyNow++
			}
		}
		s := surgeRecord{Surge: handoff.NewSurge(d, n.Name, int(ow.Pods), readyNow), By: SurgedBy}
		raw, _ := json.Marshal(s)
		before := d.DeepCopy()
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationHandoffSurge] = string(raw)
		d.Spec.Replicas = ptr.To(s.Base + s.Surge.Surge)
		if err := c.client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			errs = append(errs, fmt.Errorf("surge %s/%s: %w", d.Namespace, d.Name, err))
			continue
		}
		if err := scaling.RaiseHPA(ctx, c.client, d, s.Base+s.Surge.Surge); err != nil {
			errs = append(errs, err)
		}
		klog.FromContext(ctx).V(2).Info("Surged", "deployment", klog.KObj(d), "replicas", s.Base+s.Surge.Surge)
	}
	return errors.Join(errs...)
}

func (c *Controller) raiseHPAs(ctx context.Context, m reclaimplan.Move, o reclaimplan.Observed) error {
	var errs []error
	for _, ow := range m.Owners {
		if st, ok := o.Deployments[ow.Key()]; ow.Kind != reclaimplan.KindDeployment || !ok || !st.Surged {
			continue
		}
		d := &appsv1.Deployment{}
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: ow.Namespace, Name: ow.Name}, d); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		errs = append(errs, scaling.RaiseHPA(ctx, c.client, d, ptr.Deref(d.Spec.Replicas, 1)))
	}
	return errors.Join(errs...)
}

// endSurges takes back this node's surges. leaving: the move succeeded, so the node's Pods
// get the lowest deletion cost (the ReplicaSet removes them first); otherwise the Pods created
// since the move started do (an abort keeps the old Pods where they are).
func (c *Controller) endSurges(ctx context.Context, n *corev1.Node, m reclaimplan.Move, leaving bool) error {
	var errs []error
	since := m.Started.Truncate(time.Second)
	for _, ow := range m.Owners {
		if ow.Kind != reclaimplan.KindDeployment {
			continue
		}
		d := &appsv1.Deployment{}
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: ow.Namespace, Name: ow.Name}, d); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		phase, s, err := handoff.SurgeOf(d, n.Name)
		if err != nil || phase != handoff.SurgeRunning {
			errs = append(errs, err)
			continue
		}
		pods, err := c.podsOf(ctx, d.Namespace, d.Spec.Selector)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range pods {
			pod := &pods[i]
			first := pod.Spec.NodeName == n.Name
			if !leaving {
				first = pod.Spec.NodeName != n.Name && !pod.CreationTimestamp.Time.Before(since)
			}
			if !first || !pod.DeletionTimestamp.IsZero() || pod.Annotations[corev1.PodDeletionCost] == handoff.DeletionCost {
				continue
			}
			before := pod.DeepCopy()
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[corev1.PodDeletionCost] = handoff.DeletionCost
			if err := c.client.Patch(ctx, pod, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		}
		if err := endSurge(ctx, c.client, d, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// endSurge is the handoff's: the HPA goes back first (unless the bridge still surges d), then
// the replicas and the record in one write.
func endSurge(ctx context.Context, c client.Client, d *appsv1.Deployment, s handoff.Surge) error {
	if _, bridging := scaling.Surging(d); !bridging {
		if err := scaling.RestoreHPA(ctx, c, d); err != nil {
			return err
		}
	}
	before := d.DeepCopy()
	delete(d.Annotations, v1alpha1.AnnotationHandoffSurge)
	d.Spec.Replicas = ptr.To(max(ptr.Deref(d.Spec.Replicas, s.Base+s.Surge)-s.Surge, s.Base))
	if err := c.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("scale back %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// evict asks the Eviction API, so the PodDisruptionBudget decides; a refusal (429) waits for
// the next pass.
func (c *Controller) evict(ctx context.Context, n *corev1.Node, key string) error {
	ns, name, _ := cutKey(key)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	err := c.client.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Evicted", "pod", key)
		return nil
	case apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
		return nil
	}
	return fmt.Errorf("evict %s from %s: %w", key, n.Name, err)
}

func cutKey(key string) (ns, name string, ok bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// deleteNodeClaim deletes the node's NodeClaim: Karpenter drains what is left (DaemonSets) and
// terminates the instance. Without a NodeClaim, the Node itself is deleted (Karpenter's
// termination finalizer does the rest).
func (c *Controller) deleteNodeClaim(ctx context.Context, n *corev1.Node) error {
	claims := &karpv1.NodeClaimList{}
	if err := c.client.List(ctx, claims); err != nil {
		return fmt.Errorf("list NodeClaims: %w", err)
	}
	for i := range claims.Items {
		cl := &claims.Items[i]
		if cl.Status.NodeName != n.Name && (cl.Status.ProviderID == "" || cl.Status.ProviderID != n.Spec.ProviderID) {
			continue
		}
		if err := c.client.Delete(ctx, cl); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete NodeClaim %s of %s: %w", cl.Name, n.Name, err)
		}
		return nil
	}
	if err := c.client.Delete(ctx, n); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete node %s (no NodeClaim): %w", n.Name, err)
	}
	return nil
}

// abort undoes a move: the phase first (a restart keeps undoing), the surges back with the new
// Pods removed first, the failure counted and the cool-down set, then the node uncordoned and
// its record removed.
func (c *Controller) abort(ctx context.Context, p *v1alpha1.ReclaimBackPolicy, n *corev1.Node, m reclaimplan.Move, step reclaimplan.Step, np *karpv1.NodePool, now time.Time) (reclaimplan.Phase, error) {
	if m.Phase != reclaimplan.PhaseAborting {
		m.Phase, m.Reason = reclaimplan.PhaseAborting, step.Reason
		if err := c.setMove(ctx, n, m); err != nil {
			return reclaimplan.PhaseSurging, err
		}
		klog.FromContext(ctx).Info("Aborting the reclaim-back move", "reason", step.Reason, "detail", step.Message)
	}
	if err := c.endSurges(ctx, n, m, false); err != nil {
		return m.Phase, err
	}
	if err := c.recordResult(ctx, p, n.Name, m, false, now); err != nil {
		return m.Phase, err
	}
	before := n.DeepCopy()
	delete(n.Annotations, v1alpha1.AnnotationReclaimBack)
	n.Spec.Unschedulable = false
	if err := c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return m.Phase, fmt.Errorf("uncordon %s: %w", n.Name, err)
	}
	msg := fmt.Sprintf("Aborted moving %s to Spot (%s", n.Name, m.Reason)
	if step.Message != "" {
		msg += ": " + step.Message
	}
	msg += "); uncordoned, surges taken back"
	if p.Status.CoolDownUntil != nil {
		msg += fmt.Sprintf("; cooling down until %s (failure %d in a row)", p.Status.CoolDownUntil.UTC().Format(time.RFC3339), p.Status.ConsecutiveFailures)
	}
	c.event(n, np, corev1.EventTypeWarning, v1alpha1.EventReclaimBackAborted, msg)
	return "", nil
}

// sweepOrphanSurges takes back this controller's surges whose node has no move any more (it
// vanished mid-move: an interruption, a manual delete).
func (c *Controller) sweepOrphanSurges(ctx context.Context, f *fleet) {
	list := &appsv1.DeploymentList{}
	if err := c.client.List(ctx, list); err != nil {
		return
	}
	for i := range list.Items {
		d := &list.Items[i]
		raw := d.Annotations[v1alpha1.AnnotationHandoffSurge]
		if raw == "" {
			continue
		}
		var s surgeRecord
		if json.Unmarshal([]byte(raw), &s) != nil || s.By != SurgedBy {
			continue
		}
		if n, ok := f.nodes[s.Node]; ok {
			if _, moving := n.Annotations[v1alpha1.AnnotationReclaimBack]; moving {
				continue
			}
		} else if err := c.client.Get(ctx, types.NamespacedName{Name: s.Node}, &corev1.Node{}); !apierrors.IsNotFound(err) {
			continue
		}
		if err := endSurge(ctx, c.client, d, s.Surge); err != nil {
			klog.FromContext(ctx).Error(err, "Taking back the surge of a vanished move", "deployment", klog.KObj(d), "node", s.Node)
			continue
		}
		klog.FromContext(ctx).Info("Took back the surge of a move whose node is gone", "deployment", klog.KObj(d), "node", s.Node)
	}
}

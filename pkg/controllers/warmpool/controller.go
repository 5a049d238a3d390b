// Package warmpool converges each WarmPool to its size of hibernated standby nodes: launch →
// wait for the Node → pre-pull images (proved present by node.status.images) → hibernate →
// standby; replace what failed, aged or vanished. The decision is the pure Decide; this file
// fetches its inputs and carries it out.
package warmpool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// Options tune the controller. Zero values take the defaults.
type Options struct {
	// Namespace of the pre-pull Pods. Default lifeboat-system.
	Namespace string
	// BootTimeout: launch → Node registered. Default 10m.
	BootTimeout time.Duration
	// HibernateRetry: re-send a hibernation that did not take. Default 2m.
	HibernateRetry time.Duration
	// Resync: steady-state re-list period (notices instances that vanished). Default 1m.
	Resync time.Duration
	// Busy: requeue period while the pool converges. Default 5s.
	Busy time.Duration
	// Prices feed status.cost and the cost metrics; a WarmPool's spec.pricing overrides them.
	// Unset EBS and Spot prices take cost's defaults.
	Prices cost.Prices
}

func (o *Options) defaults() {
	if o.Namespace == "" {
		o.Namespace = v1alpha1.DefaultNamespace
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 10 * time.Minute
	}
	if o.HibernateRetry == 0 {
		o.HibernateRetry = 2 * time.Minute
	}
	if o.Resync == 0 {
		o.Resync = time.Minute
	}
	if o.Busy == 0 {
		o.Busy = 5 * time.Second
	}
	if o.Prices.EBSGiBMonth == 0 {
		o.Prices.EBSGiBMonth = cost.DefaultEBSGiBMonth
	}
	if o.Prices.SpotFraction == 0 {
		o.Prices.SpotFraction = cost.DefaultSpotFraction
	}
}

// Controller reconciles WarmPools.
type Controller struct {
	client   client.Client
	cloud    cloud.Instances
	clock    clock.Clock
	recorder events.EventRecorder
	opts     Options
}

// New returns the controller.
func New(c client.Client, instances cloud.Instances, clk clock.Clock, recorder events.EventRecorder, opts Options) *Controller {
	opts.defaults()
	return &Controller{client: c, cloud: instances, clock: clk, recorder: recorder, opts: opts}
}

// Register adds the controller to the manager: WarmPools, and their Nodes mapped to the pool.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("warmpool").
		For(&v1alpha1.WarmPool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if pool := o.GetLabels()[v1alpha1.LabelPool]; pool != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
			}
			return nil
		})).
		Complete(c)
}

// Reconcile converges one WarmPool: observe it (fetch), Decide, apply the plan (write).
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("warmpool", req.Name)
	ctx = klog.NewContext(ctx, log)
	pool := &v1alpha1.WarmPool{}
	if err := c.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, pool)
	}
	if err := c.ensureFinalizer(ctx, pool); err != nil {
		return reconcile.Result{}, err
	}
	obs, err := c.observe(ctx, pool)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan := Decide(obs.Observed)
	if err := c.apply(ctx, pool, obs, plan); err != nil {
		return reconcile.Result{}, err
	}
	if plan.Warming > 0 || plan.StandbyCount < int32(obs.Desired) || len(plan.Terminate) > 0 {
		return reconcile.Result{RequeueAfter: c.opts.Busy}, nil
	}
	return reconcile.Result{RequeueAfter: c.opts.Resync}, nil
}

// ensureFinalizer adds the WarmPool finalizer (so its instances are terminated on deletion).
func (c *Controller) ensureFinalizer(ctx context.Context, pool *v1alpha1.WarmPool) error {
	if controllerutil.ContainsFinalizer(pool, v1alpha1.FinalizerWarmPool) {
		return nil
	}
	patch := client.MergeFrom(pool.DeepCopy())
	controllerutil.AddFinalizer(pool, v1alpha1.FinalizerWarmPool)
	if err := c.client.Patch(ctx, pool, patch); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// observation is what Reconcile fetched: Decide's input and the note on how the size was
// resolved (for status).
type observation struct {
	Observed
	SizeNote string
}

// observe fetches a pool's inputs: its EC2 instances, its Nodes, the resolved images and size,
// and the resume ledger's claimed instances.
func (c *Controller) observe(ctx context.Context, pool *v1alpha1.WarmPool) (observation, error) {
	instances, err := c.cloud.List(ctx, pool.Name)
	if err != nil {
		return observation{}, err
	}
	nodeList := &corev1.NodeList{}
	if err := c.client.List(ctx, nodeList, client.MatchingLabels{v1alpha1.LabelPool: pool.Name}); err != nil {
		return observation{}, err
	}
	nodes := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		if id := nodeutil.InstanceID(&nodeList.Items[i]); id != "" {
			nodes[id] = &nodeList.Items[i]
		}
	}
	images, protected, err := c.images(ctx, pool)
	if err != nil {
		return observation{}, err
	}
	desired, sizeNote := c.desired(ctx, pool, protected, nodeList.Items)

	claimed, err := c.claimedInstances(ctx)
	if err != nil {
		return observation{}, err
	}
	return observation{
		Observed: Observed{
			Desired: desired, Slots: pool.Status.Slots, Instances: instances, Nodes: nodes, Images: images,
			PrePullTimeout: durationOr(pool.Spec.PrePull.Timeout, 10*time.Minute),
			MaxStandbyAge:  durationOr(pool.Spec.MaxStandbyAge, 720*time.Hour),
			BootTimeout:    c.opts.BootTimeout, HibernateRetry: c.opts.HibernateRetry, Now: c.clock.Now(),
			KeepClaimed: pool.Spec.AfterUse == v1alpha1.AfterUseRehibernate,
			Claimed:     claimed,
		},
		SizeNote: sizeNote,
	}, nil
}

// apply carries out a plan: the slot table first, then the cloud and Node actions, then
// metrics and status. Errors of the actions and of status are joined.
func (c *Controller) apply(ctx context.Context, pool *v1alpha1.WarmPool, obs observation, plan Plan) error {
	// The slot table first: a launch's generation must be durable before RunInstances, so a
	// retry after a crash reuses its client token and never launches a second instance.
	if plan.SlotsChanged {
		pool.Status.Slots = plan.Slots
		if err := c.client.Status().Update(ctx, pool); err != nil {
			return fmt.Errorf("record slots before acting: %w", err)
		}
	}
	errs, degraded := c.act(ctx, pool, obs, plan)

	est := estimate(pool, obs.Desired, obs.Instances, c.opts.Prices)
	c.recordMetrics(pool, plan, est)
	if err := c.updateStatus(ctx, pool, plan, obs.Desired, obs.Images, obs.SizeNote, degraded, est); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// act performs the plan's actions in order: terminate, launch, label warming, pre-pull (and
// clean up pre-pull Pods no longer needed), hibernate, label standby. It goes on past errors
// and returns them with the reason the pool is degraded ("" if it is not).
func (c *Controller) act(ctx context.Context, pool *v1alpha1.WarmPool, obs observation, plan Plan) (errs []error, degraded string) {
	for _, t := range plan.Terminate {
		if t.Degraded {
			degraded = t.Reason
		}
		if err := c.terminate(ctx, pool, t); err != nil {
			errs = append(errs, err)
		}
	}
	launchErrs := c.launch(ctx, pool, plan.Launch)
	if len(launchErrs) > 0 {
		degraded = "launch failed: " + errors.Join(launchErrs...).Error()
		errs = append(errs, launchErrs...)
	}
	for _, name := range plan.Warm {
		if err := c.markWarming(ctx, pool, name, obs.Now); err != nil {
			errs = append(errs, err)
		}
	}
	keepPrePull := map[string]bool{}
	for _, name := range plan.PrePull {
		keepPrePull[name] = true
		if err := c.ensurePrePull(ctx, pool, name, obs.Images); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.cleanupPrePull(ctx, pool, keepPrePull); err != nil {
		errs = append(errs, err)
	}
	for id, name := range plan.Hibernate {
		if err := c.hibernate(ctx, pool, id, name, obs.Now); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range plan.Standby {
		if err := c.markStandby(ctx, pool, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errs, degraded
}

// claimedInstances are the instances in the resume ledger (claimed for an interruption, their
// Nodes not labelled yet), from the cache.
func (c *Controller) claimedInstances(ctx context.Context) (map[string]bool, error) {
	cm := &corev1.ConfigMap{}
	if err := c.client.Get(ctx, ledger.Key(c.opts.Namespace), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the resume ledger: %w", err)
	}
	return ledger.InstanceIDs(cm), nil
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// images resolves spec.prePull; it also returns the protected Pods it listed (size "auto"
// reuses them).
func (c *Controller) images(ctx context.Context, pool *v1alpha1.WarmPool) ([]string, []corev1.Pod, error) {
	var protected []corev1.Pod
	needPods := pool.Spec.PrePull.Policy == v1alpha1.PrePullAuto || pool.Spec.PrePull.Policy == "" || pool.Spec.Size.Type == intstr.String
	if needPods {
		list := &corev1.PodList{}
		if err := c.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelProtected: "true"}); err != nil {
			return nil, nil, err
		}
		for _, p := range list.Items {
			if !nodeutil.IsTerminal(&p) {
				protected = append(protected, p)
			}
		}
	}
	switch pool.Spec.PrePull.Policy {
	case v1alpha1.PrePullList:
		return NormalizeImages(pool.Spec.PrePull.Images), protected, nil
	case v1alpha1.PrePullNone:
		return nil, protected, nil
	default:
		return AutoImages(protected), protected, nil
	}
}

// desired resolves spec.size; "auto" covers the largest Spot capacity pool's protected Pods with
// nodes shaped like the pool's (the first pool Node's allocatable; one node until one exists).
func (c *Controller) desired(ctx context.Context, pool *v1alpha1.WarmPool, protected []corev1.Pod, poolNodes []corev1.Node) (int, string) {
	if pool.Spec.Size.Type == intstr.Int {
		return pool.Spec.Size.IntValue(), ""
	}
	maxSize := int(pool.Spec.MaxAutoSize)
	if maxSize == 0 {
		maxSize = 10
	}
	nodeList := &corev1.NodeList{}
	if err := c.client.List(ctx, nodeList); err != nil {
		klog.FromContext(ctx).Error(err, "Listing nodes for size auto")
	}
	nodeByName := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		nodeByName[nodeList.Items[i].Name] = &nodeList.Items[i]
	}
	byPool := map[string][]sizing.Item{}
	for i := range protected {
		p := &protected[i]
		n := nodeByName[p.Spec.NodeName]
		if n == nil || n.Labels[v1alpha1.LabelCapacityType] != "spot" || nodeutil.Pool(n) != "" {
			continue
		}
		key := telemetry.PoolKeyFromLabels(n.Labels)
		byPool[key] = append(byPool[key], sizing.Item{Name: p.Namespace + "/" + p.Name, Resources: sizing.PodResources(nodeutil.PodRequests(p))})
	}
	var shape sizing.Resources
	for i := range poolNodes {
		if s := sizing.FromList(poolNodes[i].Status.Allocatable); s.MilliCPU > 0 {
			shape = s
			break
		}
	}
	if shape.MilliCPU == 0 {
		if len(byPool) == 0 {
			return 0, "size auto: no protected Pods on Spot nodes"
		}
		return 1, "size auto: one node until the pool's node shape is known"
	}
	n, key := sizing.AutoSize(byPool, shape, maxSize)
	return n, fmt.Sprintf("size auto: %d node(s) cover the protected Pods of capacity pool %s", n, key)
}

func (c *Controller) launchRequest(pool *v1alpha1.WarmPool, l Launch) cloud.LaunchRequest {
	return cloud.LaunchRequest{
		Pool: pool.Name, Slot: int(l.Slot), Generation: int(l.Generation),
		InstanceTypes: pool.Spec.InstanceTypes, SubnetIDs: pool.Spec.SubnetIDs,
		LaunchTemplateID: pool.Spec.LaunchTemplateID, ImageID: pool.Spec.ImageID,
		InstanceProfile: pool.Spec.InstanceProfile, SecurityGroupIDs: pool.Spec.SecurityGroupIDs,
		UserData: pool.Spec.UserData, RootVolumeGiB: pool.Spec.RootVolumeGiB, Tags: pool.Spec.Tags,
	}
}

// launch runs the planned launches in parallel. A launch answered with an instance that is
// already gone (the token's earlier instance was terminated) moves the slot to a new generation;
// the next reconcile launches it.
func (c *Controller) launch(ctx context.Context, pool *v1alpha1.WarmPool, launches []Launch) []error {
	if len(launches) == 0 {
		return nil
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		gone []int32
		ids  = map[int32]string{}
	)
	for _, l := range launches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := c.cloud.Launch(ctx, c.launchRequest(pool, l))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && inst == nil {
				errs = append(errs, fmt.Errorf("launch slot %d generation %d: %w", l.Slot, l.Generation, err))
				return
			}
			if inst.State == cloud.StateShuttingDown || inst.State == cloud.StateTerminated {
				gone = append(gone, l.Slot)
				return
			}
			ids[l.Slot] = inst.ID
			if inst.Slot == int(l.Slot) && inst.Generation == int(l.Generation) && inst.State == cloud.StatePending {
				c.recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1alpha1.EventLaunched, "Launch", "Launched %s (%s in %s) for slot %d generation %d", inst.ID, inst.InstanceType, inst.Zone, l.Slot, l.Generation)
			}
		}()
	}
	wg.Wait()
	changed := false
	for i := range pool.Status.Slots {
		s := &pool.Status.Slots[i]
		if id, ok := ids[s.Slot]; ok && s.InstanceID != id {
			s.InstanceID, changed = id, true
		}
		for _, g := range gone {
			if s.Slot == g {
				s.Generation++
				s.InstanceID = ""
				changed = true
			}
		}
	}
	if changed {
		if err := c.client.Status().Update(ctx, pool); err != nil {
			errs = append(errs, fmt.Errorf("record launched instances: %w", err))
		}
	}
	return errs
}

func (c *Controller) terminate(ctx context.Context, pool *v1alpha1.WarmPool, t Terminate) error {
	if t.Node != "" {
		// The cache may lag an interruption claim: re-read the Node and never terminate a node
		// that was just claimed to resume.
		n := &corev1.Node{}
		err := c.client.Get(ctx, types.NamespacedName{Name: t.Node}, n)
		if err == nil && (nodeutil.State(n) == v1alpha1.NodeStateActive || nodeutil.State(n) == v1alpha1.NodeStateDraining) {
			return nil
		}
	}
	if err := c.cloud.Terminate(ctx, t.InstanceID); err != nil {
		return err
	}
	typ, reason := corev1.EventTypeNormal, v1alpha1.EventReplaced
	if t.Degraded {
		typ = corev1.EventTypeWarning
	}
	if t.Reason == "hibernation degraded to a plain stop (memory lost; resuming would be a cold boot)" {
		reason = v1alpha1.EventHibernationDegraded
	}
	c.recorder.Eventf(pool, nil, typ, reason, "Terminate", "Terminated %s: %s", t.InstanceID, t.Reason)
	return nil
}

// patchNode applies mutate to the Node with an optimistic lock, retrying on conflicts (the
// kubelet, or KWOK, updates Nodes all the time).
func (c *Controller) patchNode(ctx context.Context, name string, mutate func(*corev1.Node)) (*corev1.Node, error) {
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		before := n.DeepCopy()
		mutate(n)
		out = n
		if equality.Semantic.DeepEqual(before, n) {
			return nil
		}
		return c.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", name, err)
	}
	return out, nil
}

// EnsurePoolTaints adds the lifeboat taint (always) and, if standby, the standby taint.
func EnsurePoolTaints(n *corev1.Node, pool string, standby bool) {
	want := []corev1.Taint{{Key: v1alpha1.TaintLifeboat, Value: pool, Effect: corev1.TaintEffectNoSchedule}}
	if standby {
		want = append(want, corev1.Taint{Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule})
	}
	for _, w := range want {
		if !nodeutil.HasTaint(n, w.Key) {
			n.Spec.Taints = append(n.Spec.Taints, w)
		}
	}
}

func (c *Controller) markWarming(ctx context.Context, pool *v1alpha1.WarmPool, name string, now time.Time) error {
	_, err := c.patchNode(ctx, name, func(n *corev1.Node) {
		if s := nodeutil.State(n); s == v1alpha1.NodeStateActive || s == v1alpha1.NodeStateDraining {
			return
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range pool.Spec.NodeLabels {
			n.Labels[k] = v
		}
		n.Labels[v1alpha1.LabelPool] = pool.Name
		n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateWarming)
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if n.Annotations[v1alpha1.AnnotationWarmingSince] == "" {
			n.Annotations[v1alpha1.AnnotationWarmingSince] = nodeutil.FormatTime(now)
		}
		if id := nodeutil.InstanceID(n); id != "" {
			n.Annotations[v1alpha1.AnnotationInstanceID] = id
		}
		EnsurePoolTaints(n, pool.Name, true)
	})
	return client.IgnoreNotFound(err)
}

func (c *Controller) markStandby(ctx context.Context, pool *v1alpha1.WarmPool, name string) error {
	n, err := c.patchNode(ctx, name, func(n *corev1.Node) {
		if s := nodeutil.State(n); s == v1alpha1.NodeStateActive || s == v1alpha1.NodeStateDraining {
			return
		}
		n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateStandby)
		EnsurePoolTaints(n, pool.Name, true)
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	c.recorder.Eventf(n, pool, corev1.EventTypeNormal, v1alpha1.EventStandby, "Hibernate", "Hibernated with images present; in standby of pool %s", pool.Name)
	return nil
}

func (c *Controller) hibernate(ctx context.Context, pool *v1alpha1.WarmPool, id, name string, now time.Time) error {
	err := c.cloud.Hibernate(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrHibernationUnsupported):
		c.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.EventHibernationDegraded, "Hibernate", "Instance %s cannot hibernate (%v); replacing it", id, err)
		return c.cloud.Terminate(ctx, id)
	case errors.Is(err, cloud.ErrIncorrectState):
		return nil // stopping already, or not yet running: the next pass sees where it is
	case err != nil:
		return err
	}
	_, err = c.patchNode(ctx, name, func(n *corev1.Node) {
		nodeutil.EnsureMaps(n)
		n.Annotations[v1alpha1.AnnotationHibernateRequestedAt] = nodeutil.FormatTime(now)
	})
	if err := c.deletePrePull(ctx, name); err != nil {
		return err
	}
	c.recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1alpha1.EventHibernating, "Hibernate", "Hibernating %s (node %s): images present", id, name)
	return client.IgnoreNotFound(err)
}

// PrePullPodName is the name of a Node's pre-pull Pod.
func PrePullPodName(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "lifeboat-prepull-" + hex.EncodeToString(sum[:])[:16]
}

// ensurePrePull creates the Node's pre-pull Pod: one container per image, bound to the Node,
// tolerating every taint. Its containers need not succeed: the kubelet pulls an image before it
// starts the container, and node.status.images is the proof Lifeboat waits for.
func (c *Controller) ensurePrePull(ctx context.Context, pool *v1alpha1.WarmPool, node string, images []string) error {
	name := PrePullPodName(node)
	existing := &corev1.Pod{}
	err := c.client.Get(ctx, types.NamespacedName{Namespace: c.opts.Namespace, Name: name}, existing)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c.opts.Namespace,
			Labels:      map[string]string{v1alpha1.LabelPrePull: "true", v1alpha1.LabelPool: pool.Name},
			Annotations: map[string]string{"lifeboat.dev/node": node},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			// Lifeboat's namespace enforces Pod Security "restricted". The image is pulled before
			// the kubelet checks these, so an image that insists on root still lands in the cache.
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			ActiveDeadlineSeconds: ptr.To(int64(durationOr(pool.Spec.PrePull.Timeout, 10*time.Minute) / time.Second)),
		},
	}
	for i, img := range images {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("pull-%d", i), Image: img, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/bin/true"},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("4Mi"),
			}},
		})
	}
	if err := c.client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create pre-pull pod for %s: %w", node, err)
	}
	return nil
}

func (c *Controller) deletePrePull(ctx context.Context, node string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.opts.Namespace, Name: PrePullPodName(node)}}
	return client.IgnoreNotFound(c.client.Delete(ctx, pod))
}

func (c *Controller) cleanupPrePull(ctx context.Context, pool *v1alpha1.WarmPool, keep map[string]bool) error {
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.InNamespace(c.opts.Namespace), client.MatchingLabels{v1alpha1.LabelPrePull: "true", v1alpha1.LabelPool: pool.Name}); err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if !keep[p.Spec.NodeName] && p.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(c.client.Delete(ctx, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Controller) recordMetrics(pool *v1alpha1.WarmPool, plan Plan, est cost.Estimate) {
	metrics.PoolNodes.WithLabelValues(pool.Name, string(v1alpha1.NodeStateWarming)).Set(float64(plan.Warming))
	metrics.PoolNodes.WithLabelValues(pool.Name, string(v1alpha1.NodeStateStandby)).Set(float64(plan.StandbyCount))
	metrics.PoolNodes.WithLabelValues(pool.Name, string(v1alpha1.NodeStateActive)).Set(float64(plan.Active))
	metrics.PoolNodes.WithLabelValues(pool.Name, string(v1alpha1.NodeStateDraining)).Set(float64(plan.Draining))
	metrics.PoolCostDollars.WithLabelValues(pool.Name, "ebs").Set(est.HourlyVolumes)
	metrics.PoolCostDollars.WithLabelValues(pool.Name, "compute").Set(est.HourlyCompute)
	metrics.PoolMonthlyCostDollars.WithLabelValues(pool.Name, "warm_pool").Set(est.WarmPoolMonthly)
	if est.ComputeKnown {
		metrics.PoolMonthlyCostDollars.WithLabelValues(pool.Name, "overprovisioning").Set(est.OverprovisioningMonthly)
	} else {
		metrics.PoolMonthlyCostDollars.DeleteLabelValues(pool.Name, "overprovisioning")
	}
}

func (c *Controller) updateStatus(ctx context.Context, pool *v1alpha1.WarmPool, plan Plan, desired int, images []string, sizeNote, degraded string, est cost.Estimate) error {
	before := pool.Status.DeepCopy()
	st := &pool.Status
	st.Cost = costStatus(est)
	st.ObservedGeneration = pool.Generation
	st.Desired = int32(desired)
	st.Warming, st.Standby, st.Active, st.Draining = plan.Warming, plan.StandbyCount, plan.Active, plan.Draining
	st.Images = images
	if plan.StandbyCount >= int32(desired) {
		msg := fmt.Sprintf("%d of %d standby nodes hibernated", plan.StandbyCount, desired)
		if sizeNote != "" {
			msg += "; " + sizeNote
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStandbyReady, Message: msg, ObservedGeneration: pool.Generation})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWarming,
			Message: fmt.Sprintf("%d of %d standby nodes hibernated, %d warming", plan.StandbyCount, desired, plan.Warming), ObservedGeneration: pool.Generation})
	}
	if degraded != "" {
		reason := v1alpha1.ReasonLaunchFailed
		if plan.Launch == nil {
			reason = v1alpha1.ReasonHibernationDegraded
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: degraded, ObservedGeneration: pool.Generation})
	} else if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded); c == nil || (c.Reason == v1alpha1.ReasonLaunchFailed || c.Reason == v1alpha1.ReasonHibernationDegraded) && plan.StandbyCount >= int32(desired) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected, Message: "", ObservedGeneration: pool.Generation})
	}
	sort.Slice(st.Slots, func(i, j int) bool { return st.Slots[i].Slot < st.Slots[j].Slot })
	if equality.Semantic.DeepEqual(before, st) {
		return nil
	}
	if err := c.client.Status().Update(ctx, pool); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// finalize terminates every instance of a deleted pool, then lets the WarmPool go.
func (c *Controller) finalize(ctx context.Context, pool *v1alpha1.WarmPool) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, v1alpha1.FinalizerWarmPool) {
		return reconcile.Result{}, nil
	}
	instances, err := c.cloud.List(ctx, pool.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, in := range instances {
		if in.State == cloud.StateShuttingDown || in.State == cloud.StateTerminated {
			continue
		}
		if err := c.cloud.Terminate(ctx, in.ID); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFrom(pool.DeepCopy())
	controllerutil.RemoveFinalizer(pool, v1alpha1.FinalizerWarmPool)
	return reconcile.Result{}, client.IgnoreNotFound(c.client.Patch(ctx, pool, patch))
}

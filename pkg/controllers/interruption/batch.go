package interruption

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
	pooltelemetry "github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// maxBookkeepingDelay bounds how long a batch's Node writes wait for other batches to reach
// StartInstances.
const maxBookkeepingDelay = 250 * time.Millisecond

// criticalSection counts the decision batches between their first read and StartInstances.
type criticalSection struct {
	mu    sync.Mutex
	n     int
	quiet chan struct{} // closed when n drops to 0
}

func (c *criticalSection) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.quiet = make(chan struct{})
	}
	c.n++
}

func (c *criticalSection) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.quiet)
	}
}

// waitIdle waits until no batch is in the section, at most max.
func (c *criticalSection) waitIdle(ctx context.Context, max time.Duration) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	quiet := c.quiet
	c.mu.Unlock()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-quiet:
	case <-t.C:
	case <-ctx.Done():
	}
}

// poolNodeSelector selects every pool Node (label lifeboat.dev/pool present).
var poolNodeSelector = func() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.LabelPool, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*req)
}()

// decision is one interrupted Node's progress through a batch.
type decision struct {
	*decisionRequest
	plan sizing.ResumePlan
	// toStart are the pool nodes claimed for the Node (earlier claims included).
	toStart []*corev1.Node
	// ledgered are the claims of toStart that only the ledger records so far; the batch
	// labels their Nodes after StartInstances.
	ledgered map[string]ledger.Claim
	// fresh: claimed by this batch, so certainly not started yet.
	fresh map[string]bool
	// started: when StartInstances returned for the node's instance (or, for an earlier claim,
	// when the batch found it already starting).
	started map[string]time.Time
	// unclaimed: nodes whose claim was withdrawn (no capacity to resume): not labelled.
	unclaimed map[string]bool
	result    decisionResult
	// finished: the result is set; the Node takes no further part in the decision (its
	// ledgered claims are still labelled).
	finished bool
}

func (d *decision) finish(res decisionResult) {
	d.result, d.finished = res, true
}

// decideBatch makes the decisions of a batch of interrupted Nodes: plan them together, record
// the claims in the WarmPools' ledgers (one write per pool), start every claimed instance with
// one StartInstances call, then label the claimed Nodes, record the decisions (with the marks of
// queue notices) and clear the ledger entries. Each request's done channel receives its result.
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
		decisions = append(decisions, &decision{decisionRequest: r, ledgered: map[string]ledger.Claim{}, fresh: map[string]bool{}, started: map[string]time.Time{}, unclaimed: map[string]bool{}})
	}
	// Reservations go before the results: a requeued Node's next pass plans without them.
	defer func() {
		for _, d := range decisions {
			d.done <- d.result
		}
	}()
	defer c.release(byNode)

	holder := fmt.Sprintf("%s/%d", c.id, c.batchSeq.Add(1))
	c.inflight.Store(holder, struct{}{})
	defer c.inflight.Delete(holder)

	c.critical.enter()
	c.claimAll(ctx, holder, decisions)
	c.startAll(ctx, decisions)
	c.critical.leave()
	// The rest is bookkeeping the ledger already covers: it yields to the batches still on
	// their way to StartInstances (a burst split over receives), whose single write would
	// otherwise queue behind this batch's Node writes.
	c.critical.waitIdle(ctx, maxBookkeepingDelay)
	labelled := c.labelAll(ctx, decisions)
	c.recordAll(ctx, decisions)
	// The entries whose Nodes are labelled are done with; reconcileLedger removes them once
	// the cache shows the labels. The others it finishes itself.
	for node := range labelled {
		c.finished.Store(finishedKey(holder, node), struct{}{})
	}
}

// claimAll plans the batch and records its claims in the resume ledger: one write, with the
// ledger's resourceVersion as precondition. The first plan reads the ledger
// and the pool's Nodes from the informer cache: the precondition makes the write succeed only
// if the cached ledger was the current one, and an entry leaves the ledger only once this
// process's cache shows its Node's claim labels (reconcileLedger), so every claim shows in the
// cached ledger or in the cached labels. A write that conflicts (another claim, the warm-pool
// or a cache behind) plans its Nodes again from the API server — the ledger, then the pool's
// Nodes — at most three times, then requeues them. The claims already made for the batch's
// Nodes count in their plans, so a decision that a conflict or a restart interrupted never
// claims more.
func (c *Controller) claimAll(ctx context.Context, holder string, decisions []*decision) {
	pending := decisions
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 3 {
			for _, d := range pending {
				d.finish(decisionResult{requeue: true})
			}
			return
		}
		inBatch := make(map[string]bool, len(pending))
		for _, d := range pending {
			inBatch[d.node.Name] = true
		}
		// From the cache first; on a re-plan from the API server, the ledger first, then the
		// pool's Nodes: a claim leaves the ledger only after its Node is labelled, so every
		// claim shows in one read or the other.
		var from client.Reader = c.client
		if attempt > 0 {
			from = c.reader
		}
		lv, err := c.readLedger(ctx, from)
		if err != nil {
			finishAll(pending, err)
			return
		}
		poolNodes := &corev1.NodeList{}
		// Without deep copies from the cache (read only here; every write works on a copy).
		if err := from.List(ctx, poolNodes, client.MatchingLabelsSelector{Selector: poolNodeSelector}, client.UnsafeDisableDeepCopy); err != nil {
			finishAll(pending, fmt.Errorf("list the pool nodes: %w", err))
			return
		}

		byName := map[string]*corev1.Node{}
		claimedBy := map[string][]*corev1.Node{}
		standbyByName := map[string]*corev1.Node{}
		var standby []*corev1.Node
		for i := range poolNodes.Items {
			n := &poolNodes.Items[i]
			owner := n.Labels[v1alpha1.LabelResumedFor]
			switch {
			case owner != "" && inBatch[owner]:
				byName[n.Name] = n
				if nodeutil.State(n) == v1alpha1.NodeStateActive {
					claimedBy[owner] = append(claimedBy[owner], n)
				}
				// (Handed off — draining — since an earlier decision for the Node, a
				// rebalance recommendation's pre-resume, and cordoned: it holds nothing more.)
			case nodeutil.State(n) == v1alpha1.NodeStateStandby:
				standbyByName[n.Name] = n
				standby = append(standby, n)
			}
		}
		// Claims only the ledger records yet (this batch's earlier attempts, or a batch a
		// crash interrupted) count as the Node's claims.
		ledgered := map[string]ledger.Claim{}
		for name, cl := range lv.byNode {
			if !inBatch[cl.For] {
				continue
			}
			if _, labelled := byName[name]; labelled {
				continue
			}
			n := standbyByName[name]
			if n == nil {
				continue // gone, or relabelled: the claim is void (reconcileLedger drops it)
			}
			byName[name] = n
			claimedBy[cl.For] = append(claimedBy[cl.For], n)
			ledgered[name] = cl
		}
		var candidates []poolNode
		for _, n := range standby {
			if _, claimed := byName[n.Name]; claimed {
				continue
			}
			if _, inLedger := lv.byNode[n.Name]; inLedger {
				continue
			}
			if nodeutil.Pool(n) == "" || nodeutil.InstanceID(n) == "" || n.Labels[v1alpha1.LabelResumedFor] != "" {
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

		// The claims go to the ledger first (the durable record: a node is in at most one
		// entry, guaranteed by the ledger's resourceVersion), then the instances are started.
		now := nodeutil.FormatTime(c.clock.Now())
		var claims []ledger.Claim
		entryOf := map[string]ledger.Claim{}
		for _, d := range pending {
			d.plan = plans[d.node.Name]
			for _, name := range d.plan.Resume {
				cl := ledger.Claim{
					Node: name, InstanceID: nodeutil.InstanceID(byName[name]), For: d.node.Name,
					InterruptedAt: d.node.Annotations[v1alpha1.AnnotationInterruptedAt],
					Source:        d.node.Annotations[v1alpha1.AnnotationInterruptionSource],
					ClaimedAt:     now, Holder: holder,
				}
				claims = append(claims, cl)
				entryOf[name] = cl
			}
		}
		var writeErr error
		if len(claims) > 0 {
			writeErr = c.appendClaims(ctx, lv, claims)
		}

		var again []*decision
		for _, d := range pending {
			d.toStart = append(d.toStart[:0], claimedBy[d.node.Name]...)
			clear(d.ledgered)
			clear(d.fresh)
			for _, n := range claimedBy[d.node.Name] {
				if cl, ok := ledgered[n.Name]; ok {
					d.ledgered[n.Name] = cl
					if cl.Holder == holder {
						d.fresh[n.Name] = true
					}
				}
			}
			var (
				conflict bool
				errs     []error
			)
			for _, name := range d.plan.Resume {
				switch {
				case writeErr == nil:
					d.toStart = append(d.toStart, byName[name])
					d.ledgered[name] = entryOf[name]
					d.fresh[name] = true
				case apierrors.IsConflict(writeErr) || apierrors.IsNotFound(writeErr):
					// The ledger changed since the read (another claim): plan again.
					conflict = true
				default:
					errs = append(errs, fmt.Errorf("claim %s in the resume ledger: %w", name, writeErr))
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

// daemonSetPodsOn are the DaemonSet Pods bound to a pool node, from the cache (a pool node
// holds few Pods). A failed read counts none.
func (c *Controller) daemonSetPodsOn(ctx context.Context, node string) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.MatchingFields{IndexPodNodeName: node}, client.UnsafeDisableDeepCopy); err != nil {
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
// A claim from an earlier pass that has no StartInstances time is looked up first: a crash may
// have come after its StartInstances. A node whose instance has no capacity (ICE) is terminated
// and unclaimed, and its interrupted Node requeued to plan again with the remaining standby
// nodes; other per-instance errors fail their Node's decision (retried with backoff).
func (c *Controller) startAll(ctx context.Context, decisions []*decision) {
	owner := map[string]*decision{}
	nodeOf := map[string]*corev1.Node{}
	var ids []string
	errs := map[*decision][]error{}
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
			if !d.fresh[n.Name] {
				inst, err := c.cloud.Get(ctx, id)
				switch {
				case errors.Is(err, cloud.ErrNotFound):
					continue // gone: garbage collection removes the Node
				case err != nil:
					errs[d] = append(errs[d], fmt.Errorf("look up %s before resuming it: %w", id, err))
					continue
				case inst.State == cloud.StatePending || inst.State == cloud.StateRunning:
					d.started[n.Name] = c.clock.Now()
					continue
				}
			}
			owner[id], nodeOf[id] = d, n
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var results map[string]error
	if len(ids) > 0 {
		results = cloud.ResumeAll(ctx, c.cloud, ids)
	}
	startedAt := c.clock.Now()

	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		ice = map[*decision]bool{}
	)
	for _, id := range ids {
		n, d := nodeOf[id], owner[id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ferr, iceErr := afterResume(ctx, c.client, c.cloud, c.recorder, n.DeepCopy(), results[id])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case iceErr != nil:
				ice[d] = true
				d.unclaimed[n.Name] = true
			case ferr == nil:
				d.started[n.Name] = startedAt
				if !d.noticeAt.IsZero() {
					metrics.ResumeSeconds.WithLabelValues("start_instances").Observe(startedAt.Sub(d.noticeAt).Seconds())
				}
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

// labelAll writes the batch's claims on their Nodes, in parallel: the claims only the ledger
// records get their labels (state active, resumed-for) with the StartInstances time if started;
// earlier claims started now get the StartInstances time. Every decision's ledgered claims are
// labelled, finished or not: a claim whose start failed stays claimed and its Node's next pass
// starts it. It returns the nodes whose ledger entries are done with.
func (c *Controller) labelAll(ctx context.Context, decisions []*decision) map[string]bool {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		done = map[string]bool{}
	)
	log := klog.FromContext(ctx)
	for _, d := range decisions {
		for _, n := range d.toStart {
			name := n.Name
			cl, inLedger := d.ledgered[name]
			started := d.started[name]
			switch {
			case d.unclaimed[name]:
				mu.Lock()
				done[name] = true
				mu.Unlock()
			case inLedger:
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := c.labelClaim(ctx, n.DeepCopy(), cl, cl.ClaimedAt, started)
					if err != nil && !apierrors.IsNotFound(err) {
						// The entry stays: reconcileLedger labels it once this batch is over.
						log.Error(err, "Labelling a claimed node", "node", name)
						return
					}
					mu.Lock()
					done[name] = true
					mu.Unlock()
				}()
			case !started.IsZero():
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := n.DeepCopy()
					before := m.DeepCopy()
					nodeutil.EnsureMaps(m)
					m.Annotations[v1alpha1.AnnotationStartRequestedAt] = nodeutil.FormatTime(started)
					if err := c.client.Patch(ctx, m, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
						log.Error(err, "Recording StartInstances on the node", "node", name)
					}
				}()
			}
		}
	}
	wg.Wait()
	return done
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

// record writes the Node's decision: the names of its lifeboat nodes, or "none" — with the mark
// of a queue notice whose mark is not written yet, in the same write. If the Node was re-marked
// since the plan, nothing is written and the Node is requeued: the decision is made again for
// the new mark, counting what this one claimed.
func (c *Controller) record(ctx context.Context, d *decision) decisionResult {
	log := klog.FromContext(ctx).WithValues("node", d.node.Name)
	decisionValue := "none"
	var names []string
	for _, n := range d.toStart {
		if !d.unclaimed[n.Name] {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		decisionValue = strings.Join(names, ",")
	}
	var err error
	if d.notice != nil {
		err = c.recordWithMark(ctx, d, decisionValue)
	} else {
		err = c.recordDecision(ctx, d, decisionValue)
	}
	switch {
	case apierrors.IsNotFound(err):
		c.resolveNotice(d.node.Name, d.notice, nil)
		return decisionResult{}
	case errors.Is(err, errMarkChanged):
		log.V(1).Info("Interruption mark changed during the decision; planning again", "planned", decisionValue)
		return decisionResult{requeue: true}
	case err != nil:
		return decisionResult{err: fmt.Errorf("record decision: %w", err)}
	}
	c.decided.Store(d.node.Name, struct{}{})
	c.resolveNotice(d.node.Name, d.notice, nil)
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

// recordDecision writes the decision on the copy the plan was made from (precondition: nothing
// changed it since); on a conflict, on a fresh read with the same mark.
func (c *Controller) recordDecision(ctx context.Context, d *decision, value string) error {
	fresh := d.node.DeepCopy()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
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
		fresh.Annotations[v1alpha1.AnnotationResumeDecision] = value
		return c.client.Patch(ctx, fresh, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// recordWithMark writes a queue notice's mark and the decision in one write, on the copy the
// Node was read as (precondition); on a conflict, on a fresh read: still unmarked → mark and
// decision; marked meanwhile by another source and undecided → the decision (it covers the
// Node's interruption whatever the source); decided meanwhile → errMarkChanged.
func (c *Controller) recordWithMark(ctx context.Context, d *decision, value string) error {
	base := d.unmarked.DeepCopy()
	// The source the plan was made for (the virtual mark's).
	source := d.node.Annotations[v1alpha1.AnnotationInterruptionSource]
	var (
		wroteMark bool
		remarked  bool
	)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if base == nil {
			base = &corev1.Node{}
			if err := c.reader.Get(ctx, types.NamespacedName{Name: d.node.Name}, base); err != nil {
				return err
			}
		}
		defer func() { base = nil }()
		var after *corev1.Node
		wroteMark = needsMark(base, source)
		switch {
		case wroteMark:
			remarked = base.Annotations[v1alpha1.AnnotationInterruptedAt] != ""
			after = withMark(base, source, d.notice.at)
		case base.Annotations[v1alpha1.AnnotationResumeDecision] == "":
			after = base.DeepCopy()
		default:
			return errMarkChanged
		}
		nodeutil.EnsureMaps(after)
		after.Annotations[v1alpha1.AnnotationResumeDecision] = value
		return c.client.Patch(ctx, after, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return err
	}
	if wroteMark {
		c.noteMark(d.node, source, remarked)
	}
	if c.sourceOf(d.notice) != source {
		// A real interruption arrived for the Node while a rebalance recommendation's decision
		// was made: that decision stands for the recommendation, and the interruption is
		// planned again over every pool (from its mark).
		return errMarkChanged
	}
	return nil
}

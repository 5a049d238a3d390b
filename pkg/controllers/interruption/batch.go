package interruption

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/activation"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/resumeplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// maxBookkeepingDelay bounds how long a batch's Node writes wait for other batches to reach
// StartInstances.
const maxBookkeepingDelay = 250 * time.Millisecond

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
		decisions = append(decisions, &decision{decisionRequest: r, started: map[string]time.Time{}, unclaimed: map[string]bool{}})
	}
	// Reservations go before the results: a requeued Node's next pass plans without them.
	defer func() {
		for _, d := range decisions {
			d.done <- d.result
		}
	}()
	defer c.reservations.release(byNode)

	holder := c.holders.begin()
	defer c.holders.end(holder)

	c.beforeStart.enter()
	c.claimAll(ctx, holder, decisions)
	c.startAll(ctx, decisions)
	c.beforeStart.leave()
	// The rest is bookkeeping the ledger already covers: it yields to the batches still on
	// their way to StartInstances (a burst split over receives), whose single write would
	// otherwise queue behind this batch's Node writes.
	c.beforeStart.waitIdle(ctx, maxBookkeepingDelay)
	labelled := c.labelAll(ctx, decisions)
	c.recordAll(ctx, decisions)
	// The entries whose Nodes are labelled are done with; reconcileLedger removes them once
	// the cache shows the labels. The others it finishes itself.
	for node := range labelled {
		c.holders.finish(holder, node)
	}
}

// claimAll plans the batch and records its claims in the resume ledger: one write, with the
// ledger's resourceVersion as precondition. The first plan reads the ledger and the pool's
// Nodes from the informer cache: the precondition makes the write succeed only if the cached
// ledger was the current one, and an entry leaves the ledger only once this process's cache
// shows its Node's claim labels (reconcileLedger), so every claim shows in the cached ledger or
// in the cached labels. A write that conflicts (another claim, the warm-pool or a cache behind)
// plans its Nodes again from the API server — the ledger, then the pool's Nodes — at most three
// times, then requeues them. The claims already made for the batch's Nodes count in their
// plans, so a decision that a conflict or a restart interrupted never claims more.
func (c *Controller) claimAll(ctx context.Context, holder string, decisions []*decision) {
	pending := decisions
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 3 {
			for _, d := range pending {
				d.finish(decisionResult{requeue: true})
			}
			return
		}
		// From the cache first; on a re-plan from the API server, the ledger first, then the
		// pool's Nodes: a claim leaves the ledger only after its Node is labelled, so every
		// claim shows in one read or the other.
		var from client.Reader = c.client
		if attempt > 0 {
			from = c.reader
		}
		pending = c.claimOnce(ctx, from, holder, pending)
	}
}

// claimOnce is one attempt of claimAll: read, plan, write the claims; it returns the decisions
// to plan again (the write conflicted).
func (c *Controller) claimOnce(ctx context.Context, from client.Reader, holder string, pending []*decision) []*decision {
	inBatch := make(map[string]bool, len(pending))
	interrupted := make([]*corev1.Node, 0, len(pending))
	for _, d := range pending {
		inBatch[d.node.Name] = true
		interrupted = append(interrupted, d.node)
	}
	lv, err := c.ledger.Read(ctx, from)
	if err != nil {
		finishAll(pending, err)
		return nil
	}
	poolNodes := &corev1.NodeList{}
	// Without deep copies from the cache (read only here; every write works on a copy).
	if err := from.List(ctx, poolNodes, client.MatchingLabelsSelector{Selector: poolNodeSelector}, client.UnsafeDisableDeepCopy); err != nil {
		finishAll(pending, fmt.Errorf("list the pool nodes: %w", err))
		return nil
	}
	inv := takeInventory(poolNodes.Items, lv.ByNode, inBatch)
	candidates := make([]resumeplan.PoolNode, 0, len(inv.candidates))
	for _, n := range inv.candidates {
		candidates = append(candidates, resumeplan.PoolNodeOf(n, c.daemonSetPodsOn(ctx, n.Name)))
	}
	demands := make([]resumeplan.Demand, 0, len(pending))
	for _, d := range pending {
		dm := resumeplan.Demand{Node: d.node.Name, Items: d.items, DaemonSets: d.daemonSets, Pools: d.pools}
		for _, n := range inv.claimedBy[d.node.Name] {
			dm.Claimed = append(dm.Claimed, resumeplan.PoolNodeOf(n, c.daemonSetPodsOn(ctx, n.Name)))
		}
		demands = append(demands, dm)
	}
	plans := c.reservations.plan(demands, candidates)

	// The claims go to the ledger first (the durable record: a node is in at most one entry,
	// guaranteed by the ledger's resourceVersion), then the instances are started.
	claims := claimsFor(interrupted, plans, inv.byName, holder, nodeutil.FormatTime(c.clock.Now()))
	var writeErr error
	if len(claims) > 0 {
		writeErr = c.ledger.Append(ctx, lv, claims)
	}
	written := make(map[string]ledger.Claim, len(claims))
	for _, cl := range claims {
		written[cl.Node] = cl
	}
	var again []*decision
	for _, d := range pending {
		d.plan = plans[d.node.Name]
		o := settleClaims(d.node.Name, d.plan, inv, written, holder, writeErr)
		d.toStart, d.ledgered, d.fresh = o.toStart, o.ledgered, o.fresh
		switch {
		case o.err != nil:
			d.finish(decisionResult{err: o.err})
		case o.replan:
			again = append(again, d)
		}
	}
	return again
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
	if err := c.client.List(ctx, pods, client.MatchingFields{indexes.PodNodeName: node}, client.UnsafeDisableDeepCopy); err != nil {
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
			out, ferr := activation.AfterStart(ctx, c.client, c.cloud, c.recorder, n.DeepCopy(), results[id])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case out == activation.NoCapacity:
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

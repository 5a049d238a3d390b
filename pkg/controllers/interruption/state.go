package interruption

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/resumeplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// The controller's memory. None of it is the record (that is the Nodes and the ledger, so a
// restart converges without it): it saves round trips and keeps this process's batches from
// tripping over each other and over its own cache.

// reservations are the standby nodes the in-flight batches of this process planned to claim,
// by the interrupted Node each plans for. Batches that overlap in time plan around each other's
// picks instead of racing for the same node and losing a round trip to the conflict; the
// ledger's resourceVersion precondition still guards against other writers.
type reservations struct {
	mu sync.Mutex
	// forNode is the interrupted Node each reserved standby node is planned for.
	forNode map[string]string
}

// plan plans a batch under the reservation lock: candidates reserved by Nodes of other batches
// are left out, and the plans' picks are reserved for their Nodes.
func (r *reservations) plan(demands []resumeplan.Demand, candidates []resumeplan.PoolNode) map[string]sizing.ResumePlan {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forNode == nil {
		r.forNode = map[string]string{}
	}
	inBatch := make(map[string]bool, len(demands))
	for _, d := range demands {
		inBatch[d.Node] = true
	}
	free := candidates[:0:0]
	for _, n := range candidates {
		if owner, ok := r.forNode[n.Name]; !ok || inBatch[owner] {
			free = append(free, n)
		}
	}
	plans := resumeplan.Plan(demands, free)
	for node, plan := range plans {
		for _, name := range plan.Resume {
			r.forNode[name] = node
		}
	}
	return plans
}

// release drops the reservations of the batch's Nodes (their decisions are over; their claims
// are in the API).
func (r *reservations) release(nodes map[string]*decisionRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, owner := range r.forNode {
		if _, ok := nodes[owner]; ok {
			delete(r.forNode, name)
		}
	}
}

// recentDecisions are the Nodes this process recorded a decision on that the cache may not
// show yet: their decision re-reads the Node from the API server before acting (the activator
// may also have reopened the decision since).
type recentDecisions struct {
	nodes sync.Map // string → struct{}
}

func (r *recentDecisions) add(name string)  { r.nodes.Store(name, struct{}{}) }
func (r *recentDecisions) drop(name string) { r.nodes.Delete(name) }
func (r *recentDecisions) has(name string) bool {
	_, ok := r.nodes.Load(name)
	return ok
}

// ledgerHolders names this process's decision batches in the ledger entries they write
// (holder = process/sequence) and tracks, for reconcileLedger, which batches are running (it
// leaves their entries alone) and which entries are finished — their Nodes labelled, their
// decisions recorded or retried from the mark — until they leave the ledger.
type ledgerHolders struct {
	process  string
	seq      atomic.Uint64
	running  sync.Map // holder → struct{}
	finished sync.Map // holder|node → struct{}
}

func newLedgerHolders() *ledgerHolders {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &ledgerHolders{process: hex.EncodeToString(b)}
}

// begin names a new batch, running until end.
func (h *ledgerHolders) begin() string {
	holder := fmt.Sprintf("%s/%d", h.process, h.seq.Add(1))
	h.run(holder)
	return holder
}

func (h *ledgerHolders) run(holder string) { h.running.Store(holder, struct{}{}) }
func (h *ledgerHolders) end(holder string) { h.running.Delete(holder) }
func (h *ledgerHolders) isRunning(holder string) bool {
	_, ok := h.running.Load(holder)
	return ok
}

func finishedKey(holder, node string) string { return holder + "|" + node }

func (h *ledgerHolders) finish(holder, node string) {
	h.finished.Store(finishedKey(holder, node), struct{}{})
}
func (h *ledgerHolders) forget(holder, node string) { h.finished.Delete(finishedKey(holder, node)) }
func (h *ledgerHolders) isFinished(holder, node string) bool {
	_, ok := h.finished.Load(finishedKey(holder, node))
	return ok
}

// batchesBeforeStart counts the decision batches between their first read and StartInstances:
// the bookkeeping of a batch past StartInstances yields to them (see decideBatch).
type batchesBeforeStart struct {
	clock clock.Clock
	mu    sync.Mutex
	n     int
	quiet chan struct{} // closed when n drops to 0
}

func (c *batchesBeforeStart) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.quiet = make(chan struct{})
	}
	c.n++
}

func (c *batchesBeforeStart) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.quiet)
	}
}

// waitIdle waits until no batch is before StartInstances, at most max.
func (c *batchesBeforeStart) waitIdle(ctx context.Context, max time.Duration) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	quiet := c.quiet
	c.mu.Unlock()
	t := c.clock.NewTimer(max)
	defer t.Stop()
	select {
	case <-quiet:
	case <-t.C():
	case <-ctx.Done():
	}
}

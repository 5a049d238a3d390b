package interruption

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/resumeplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// decisionRequest is one interrupted Node waiting for its resume decision in a batch.
type decisionRequest struct {
	ctx        context.Context
	node       *corev1.Node
	items      []sizing.Item
	daemonSets []resumeplan.DaemonSetPod
	// pools limits the pools resumed from (a rebalance recommendation: the PreResume pools);
	// nil allows every pool.
	pools    map[string]bool
	noticeAt time.Time
	// notice: the Node's mark is not written yet (node carries it in memory; unmarked is the
	// copy as read): the decision's record writes it.
	notice   *marks.Notice
	unmarked *corev1.Node
	done     chan decisionResult
}

type decisionResult struct {
	requeue bool
	err     error
}

// batcher groups the decisions of a burst so that they are planned together, claimed in
// parallel and started with one StartInstances call (Karpenter batches its provisioning the
// same way, with an idle and a maximum window). A batch closes
//   - when every Node a notice batch announced (await) has arrived or was withdrawn
//     (stopAwaiting): the SQS receive batch is one unit, so it is one batch however long its
//     marks take, and a single notice is decided at once, without a window. An announcement
//     lapses after awaitFor, in case its Node never comes;
//   - otherwise (the Node watch, Karpenter's events) when no request arrived for idle, or max
//     after the first;
//   - in any case at maxNodes requests.
//
// Windows are scheduling, not decision logic: their clock (real in production) may differ from
// the decisions' (a unit test steps the decisions' fake clock and lets the windows run).
type batcher struct {
	clock               clock.Clock
	idle, max, awaitFor time.Duration
	maxNodes            int
	run                 func(batch []*decisionRequest)

	mu      sync.Mutex
	pending []*decisionRequest
	// awaited are Nodes a notice batch announced, with the time the announcement lapses.
	awaited map[string]time.Time
	// sawAwaited: the open window holds a request that was awaited.
	sawAwaited  bool
	open        bool
	first, last time.Time
	kick        chan struct{}
	holds       atomic.Uint64
}

func newBatcher(clk clock.Clock, idle, max, awaitFor time.Duration, maxNodes int, run func([]*decisionRequest)) *batcher {
	return &batcher{clock: clk, idle: idle, max: max, awaitFor: awaitFor, maxNodes: maxNodes, run: run, awaited: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// await announces Nodes whose decisions are about to be requested (a notice batch is handing
// them over); the batch waits for them, at most awaitFor.
func (b *batcher) await(names []string) {
	if len(names) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until := b.clock.Now().Add(b.awaitFor)
	for _, n := range names {
		b.awaited[n] = until
	}
}

// holdOpen keeps the open batch (or the next one, if none is open) from closing until release,
// at most awaitFor: an announcement under a name no Node can have, only ever withdrawn.
func (b *batcher) holdOpen() (release func()) {
	key := fmt.Sprintf("\x00hold/%d", b.holds.Add(1))
	b.await([]string{key})
	return func() { b.stopAwaiting(key) }
}

// stopAwaiting withdraws an announcement: the Node will not be requested (its mark failed, it
// was marked before, or its reconcile found nothing to decide).
func (b *batcher) stopAwaiting(name string) {
	b.mu.Lock()
	_, ok := b.awaited[name]
	delete(b.awaited, name)
	b.mu.Unlock()
	if ok {
		b.wake()
	}
}

// join queues r for the next batch; r.done receives its result.
func (b *batcher) join(r *decisionRequest) {
	b.mu.Lock()
	now := b.clock.Now()
	if _, ok := b.awaited[r.node.Name]; ok {
		delete(b.awaited, r.node.Name)
		b.sawAwaited = true
	}
	b.pending = append(b.pending, r)
	b.last = now
	if !b.open {
		b.open, b.first = true, now
		go b.window()
	}
	b.mu.Unlock()
	b.wake()
}

func (b *batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// window waits until the open batch is complete, then runs it.
func (b *batcher) window() {
	for {
		b.mu.Lock()
		now := b.clock.Now()
		for n, until := range b.awaited {
			if !now.Before(until) {
				delete(b.awaited, n)
			}
		}
		var wait time.Duration
		switch {
		case len(b.pending) >= b.maxNodes:
		case len(b.awaited) > 0:
			wait = time.Duration(1<<63 - 1)
			for _, until := range b.awaited {
				wait = min(wait, until.Sub(now))
			}
		case b.sawAwaited:
		default:
			wait = min(b.last.Add(b.idle).Sub(now), b.first.Add(b.max).Sub(now))
		}
		if wait <= 0 {
			batch := b.pending
			b.pending, b.open, b.sawAwaited = nil, false, false
			b.mu.Unlock()
			b.run(batch)
			return
		}
		b.mu.Unlock()
		t := b.clock.NewTimer(wait)
		select {
		case <-b.kick:
		case <-t.C():
		}
		t.Stop()
	}
}

package interruption

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// decisionRequest is one interrupted Node waiting for its resume decision in a batch.
type decisionRequest struct {
	ctx        context.Context
	node       *corev1.Node
	items      []sizing.Item
	daemonSets []daemonSetPod
	// pools limits the pools resumed from (a rebalance recommendation: the PreResume pools);
	// nil allows every pool.
	pools    map[string]bool
	noticeAt time.Time
	// notice: the Node's mark is not written yet (node carries it in memory; unmarked is the
	// copy as read): the decision's record writes it.
	notice   *notice
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
//   - when every Node a notice batch announced (expect) has arrived or was forgotten: the SQS
//     receive batch is one unit, so it is one batch however long its marks take, and a single
//     notice is decided at once, without a window. An announcement lapses after expectFor, in
//     case its Node never comes;
//   - otherwise (the Node watch, Karpenter's events) when no request arrived for idle, or max
//     after the first;
//   - in any case at maxNodes requests.
//
// Windows are wall-clock scheduling, not decision logic: they use the real time.
type batcher struct {
	idle, max, expectFor time.Duration
	maxNodes             int
	run                  func(batch []*decisionRequest)

	mu      sync.Mutex
	pending []*decisionRequest
	// expected are Nodes being marked by a notice batch, with the time the expectation lapses.
	expected map[string]time.Time
	// sawExpected: the open window holds a request that was expected.
	sawExpected bool
	open        bool
	first, last time.Time
	kick        chan struct{}
	holds       atomic.Uint64
}

func newBatcher(idle, max, expectFor time.Duration, maxNodes int, run func([]*decisionRequest)) *batcher {
	return &batcher{idle: idle, max: max, expectFor: expectFor, maxNodes: maxNodes, run: run, expected: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// expect announces Nodes whose decisions are about to be requested (a notice batch is marking
// them); the batch waits for them, at most expectFor.
func (b *batcher) expect(names []string) {
	if len(names) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until := time.Now().Add(b.expectFor)
	for _, n := range names {
		b.expected[n] = until
	}
}

// hold keeps the open batch (or the next one, if none is open) from closing until release, at
// most expectFor: an expectation under a name no Node can have, only ever forgotten.
func (b *batcher) hold() (release func()) {
	key := fmt.Sprintf("\x00hold/%d", b.holds.Add(1))
	b.expect([]string{key})
	return func() { b.forget(key) }
}

// forget withdraws an expectation: the Node will not be requested (its mark failed, it was
// marked before, or its reconcile found nothing to decide).
func (b *batcher) forget(name string) {
	b.mu.Lock()
	_, ok := b.expected[name]
	delete(b.expected, name)
	b.mu.Unlock()
	if ok {
		b.wake()
	}
}

// add queues r for the next batch; r.done receives its result.
func (b *batcher) add(r *decisionRequest) {
	b.mu.Lock()
	now := time.Now()
	if _, ok := b.expected[r.node.Name]; ok {
		delete(b.expected, r.node.Name)
		b.sawExpected = true
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
		now := time.Now()
		for n, until := range b.expected {
			if !now.Before(until) {
				delete(b.expected, n)
			}
		}
		var wait time.Duration
		switch {
		case len(b.pending) >= b.maxNodes:
		case len(b.expected) > 0:
			wait = time.Duration(1<<63 - 1)
			for _, until := range b.expected {
				wait = min(wait, until.Sub(now))
			}
		case b.sawExpected:
		default:
			wait = min(b.last.Add(b.idle).Sub(now), b.first.Add(b.max).Sub(now))
		}
		if wait <= 0 {
			batch := b.pending
			b.pending, b.open, b.sawExpected = nil, false, false
			b.mu.Unlock()
			b.run(batch)
			return
		}
		b.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-b.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

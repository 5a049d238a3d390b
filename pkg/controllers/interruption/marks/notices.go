package marks

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// noticeWait bounds how long a notice batch waits for its decisions before it leaves its
// messages to be delivered again (a decision that keeps failing is retried from its mark).
const noticeWait = 30 * time.Second

// Notice is an interruption notice from the queue whose Node carries no mark yet. Its mark is
// written with the decision, in one write, after StartInstances: the claims in the WarmPool
// ledger are the durable record before it, and the queue message is deleted only once the mark
// is written (Wait returns), so a crash before that delivers the message again.
type Notice struct {
	// At is when the notice was received.
	At     time.Time
	source string // guarded by the Notices' mutex: see Notices.Source
	done   chan struct{}
	err    error
}

// Notices are the queue notices waiting for their decision (and with it their mark), by Node
// name.
type Notices struct {
	mu      sync.Mutex
	pending map[string]*Notice
}

// NewNotices returns an empty set of pending notices.
func NewNotices() *Notices { return &Notices{pending: map[string]*Notice{}} }

// Add records a pending notice for the Node, or returns the one already pending (a real
// interruption overrides a pending rebalance recommendation's source; the earliest receipt
// stays).
func (s *Notices) Add(name, source string, at time.Time) *Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.pending[name]; ok {
		if n.source == SourceRebalance && source != SourceRebalance {
			n.source = source
		}
		return n
	}
	n := &Notice{source: source, At: at, done: make(chan struct{})}
	s.pending[name] = n
	return n
}

// Source is the notice's source now (a pending rebalance recommendation's notice becomes the
// interruption's when one arrives).
func (s *Notices) Source(n *Notice) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return n.source
}

// Pending returns the Node's pending notice, if any.
func (s *Notices) Pending(name string) *Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[name]
}

// Resolve ends the Node's pending notice n with err (nil: its mark is durable). A nil n, or a
// notice no longer pending, is left alone.
func (s *Notices) Resolve(name string, n *Notice, err error) {
	if n == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[name] != n {
		return
	}
	delete(s.pending, name)
	n.err = err
	close(n.done)
}

// Wait waits for the notice to be resolved.
func (n *Notice) Wait(ctx context.Context) error {
	t := time.NewTimer(noticeWait)
	defer t.Stop()
	select {
	case <-n.done:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no resume decision within %s; the notice is handled again when the queue delivers it again", noticeWait)
	}
}

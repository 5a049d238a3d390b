package interruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// noticeWait bounds how long a notice batch waits for its decisions before it leaves its
// messages to be delivered again (a decision that keeps failing is retried from its mark).
const noticeWait = 30 * time.Second

// notice is an interruption notice from the queue whose Node carries no mark yet. Its mark is
// written with the decision, in one write, after StartInstances: the claims in the WarmPool
// ledger are the durable record before it, and the queue message is deleted only once the mark
// is written (done), so a crash before that delivers the message again.
type notice struct {
	source string
	at     time.Time
	done   chan struct{}
	err    error
}

// addNotice records a pending notice for the Node, or returns the one already pending (a real
// interruption overrides a pending rebalance recommendation's source; the earliest receipt
// stays).
func (c *Controller) addNotice(name, source string, at time.Time) *notice {
	c.noticeMu.Lock()
	defer c.noticeMu.Unlock()
	if n, ok := c.notices[name]; ok {
		if n.source == SourceRebalance && source != SourceRebalance {
			n.source = source
		}
		return n
	}
	n := &notice{source: source, at: at, done: make(chan struct{})}
	c.notices[name] = n
	return n
}

// sourceOf is the notice's source now (a pending rebalance recommendation's notice becomes the
// interruption's when one arrives).
func (c *Controller) sourceOf(n *notice) string {
	c.noticeMu.Lock()
	defer c.noticeMu.Unlock()
	return n.source
}

// pendingNotice returns the Node's pending notice, if any.
func (c *Controller) pendingNotice(name string) *notice {
	c.noticeMu.Lock()
	defer c.noticeMu.Unlock()
	return c.notices[name]
}

// resolveNotice ends the Node's pending notice n with err (nil: its mark is durable).
func (c *Controller) resolveNotice(name string, n *notice, err error) {
	if n == nil {
		return
	}
	c.noticeMu.Lock()
	defer c.noticeMu.Unlock()
	if c.notices[name] != n {
		return
	}
	delete(c.notices, name)
	n.err = err
	close(n.done)
}

// wait waits for the notice to be resolved.
func (n *notice) wait(ctx context.Context) error {
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

// withMark returns a copy of node carrying the notice's mark (as mark would write it).
func withMark(node *corev1.Node, source string, at time.Time) *corev1.Node {
	n := node.DeepCopy()
	nodeutil.EnsureMaps(n)
	n.Annotations[v1alpha1.AnnotationInterruptedAt] = nodeutil.FormatTime(at)
	n.Annotations[v1alpha1.AnnotationInterruptionSource] = source
	delete(n.Annotations, v1alpha1.AnnotationResumeDecision)
	if !nodeutil.HasTaint(n, v1alpha1.TaintInterrupted) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

package marks

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Writer writes interruption marks, counts them (lifeboat_interruptions_total) and records their
// events.
type Writer struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	// answers holds the API server's answer to this process's own marks, by Node name, until
	// the decision takes it (Answer, Forget): the decision is triggered right after the mark,
	// usually before the informer has delivered it, and the answer is newer than the cache.
	answers sync.Map // string → *corev1.Node
}

// NewWriter returns a Writer. c writes (and is the cache a first attempt trusts); reader reads
// the API server after a conflict.
func NewWriter(c client.Client, reader client.Reader, recorder events.EventRecorder) *Writer {
	return &Writer{client: c, reader: reader, recorder: recorder}
}

// Answer returns the API server's answer to this process's last mark of the Node, if the
// decision has not taken it yet.
func (w *Writer) Answer(name string) (*corev1.Node, bool) {
	n, ok := w.answers.Load(name)
	if !ok {
		return nil, false
	}
	return n.(*corev1.Node), true
}

// Forget drops the answer to this process's mark of the Node (the decision has taken it, or
// has no use for it).
func (w *Writer) Forget(name string) { w.answers.Delete(name) }

// Write writes the interruption mark if the notice needs one (Needed); newly reports that this
// call wrote it. Re-marking a Node a rebalance recommendation marked also removes its decision,
// in the same write, so that the decision is made again: the nodes still claimed for the Node
// count in that plan, so an active pre-resumed node means nothing more is resumed. A Node that
// is gone is not an error.
func (w *Writer) Write(ctx context.Context, node *corev1.Node, source string, at time.Time) (newly bool, err error) {
	if nodeutil.Pool(node) != "" || !Needed(node, source) {
		return false, nil
	}
	var remarked bool
	// First attempt on the given (usually cached) copy with a resourceVersion precondition:
	// no extra read on the notice's path. A conflict means the copy was stale: read the
	// Node from the API server and try again.
	n := node.DeepCopy()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if n == nil {
			n = &corev1.Node{}
			if err := w.reader.Get(ctx, types.NamespacedName{Name: node.Name}, n); err != nil {
				return err
			}
		}
		defer func() { n = nil }()
		if !Needed(n, source) {
			return nil
		}
		before := n.DeepCopy()
		remarked = n.Annotations[v1alpha1.AnnotationInterruptedAt] != ""
		apply(n, source, at)
		if err := w.client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		w.answers.Store(n.Name, n.DeepCopy())
		newly = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark node %s interrupted: %w", node.Name, err)
	}
	if newly {
		w.Report(node, source, remarked)
	}
	return newly, nil
}

// Report counts a newly written mark (lifeboat_interruptions_total, once per Node: a re-mark
// after a rebalance recommendation was counted at the recommendation) and records its event.
// Write reports its own marks; a caller that writes a mark in another write (with the decision)
// reports it itself.
func (w *Writer) Report(node *corev1.Node, source string, remarked bool) {
	if remarked {
		w.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s) after a rebalance recommendation; planning its resume again over every pool", source)
		return
	}
	metrics.Interruptions.WithLabelValues(node.Labels[v1alpha1.LabelInstanceType], node.Labels[v1alpha1.LabelZone]).Inc()
	w.recorder.Eventf(node, nil, corev1.EventTypeWarning, v1alpha1.EventInterrupted, "Interrupt", "Interruption notice (%s); resuming standby capacity for its protected Pods", source)
}

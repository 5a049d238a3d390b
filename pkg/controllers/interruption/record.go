package interruption

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/metrics"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	pooltelemetry "github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

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
		c.notices.Resolve(d.node.Name, d.notice, nil)
		return decisionResult{}
	case errors.Is(err, errMarkChanged):
		log.V(1).Info("Interruption mark changed during the decision; planning again", "planned", decisionValue)
		return decisionResult{requeue: true}
	case err != nil:
		return decisionResult{err: fmt.Errorf("record decision: %w", err)}
	}
	c.recentDecisions.add(d.node.Name)
	c.notices.Resolve(d.node.Name, d.notice, nil)
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
		c.recorder.Eventf(d.node, nil, corev1.EventTypeWarning, v1alpha1.EventNoStandby, "Resume", "Resumed %s; %d protected Pods fit no standby node (%s): the room left on the burst's other lifeboats takes what fits; raise the WarmPool size to cover the rest", decisionValue, len(d.plan.Unplaced), strings.Join(d.plan.Unplaced, ", "))
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
			if !marks.Same(fresh, d.node) {
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
		wroteMark = marks.Needed(base, source)
		switch {
		case wroteMark:
			remarked = base.Annotations[v1alpha1.AnnotationInterruptedAt] != ""
			after = marks.Marked(base, source, d.notice.At)
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
		c.marks.Report(d.node, source, remarked)
	}
	if c.notices.Source(d.notice) != source {
		// A real interruption arrived for the Node while a rebalance recommendation's decision
		// was made: that decision stands for the recommendation, and the interruption is
		// planned again over every pool (from its mark).
		return errMarkChanged
	}
	return nil
}

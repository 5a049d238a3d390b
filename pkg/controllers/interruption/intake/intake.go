// Package intake turns interruption signals into decision requests: the notices of Lifeboat's
// SQS queue (a receive batch at a time) and Karpenter's SpotInterrupted events. A Node of a
// durable notice is not marked first: its notice stays pending (marks.Notices) and its mark is
// written with its decision, after StartInstances; the queue message is deleted once it is.
package intake

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// maxConcurrentEventMarks bounds the Karpenter SpotInterrupted events handled at once.
const maxConcurrentEventMarks = 32

// Decisions is the decision side the intake hands Nodes to (the interruption controller).
type Decisions interface {
	// AwaitDecisions announces Nodes whose decisions are about to be requested: the open
	// decision batch waits for them (for a bounded time).
	AwaitDecisions(names []string)
	// StopAwaiting withdraws the announcement of a Node that will not be requested.
	StopAwaiting(name string)
	// RequestDecision triggers the Node's decision; false if the trigger is full.
	RequestDecision(name string) bool
	// HoldBatchOpen keeps the open decision batch from closing until release (bounded).
	HoldBatchOpen() (release func())
}

// Intake receives the interruption notices and requests the decisions of their Nodes.
type Intake struct {
	client    client.Client
	clock     clock.Clock
	marks     *marks.Writer
	notices   *marks.Notices
	decisions Decisions
}

// New returns the intake. c reads from the informer cache.
func New(c client.Client, clk clock.Clock, w *marks.Writer, notices *marks.Notices, decisions Decisions) *Intake {
	return &Intake{client: c, clock: clk, marks: w, notices: notices, decisions: decisions}
}

// Register adds the reconciler of Karpenter's SpotInterrupted events.
func (in *Intake) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("interruption-karpenter-events").
		For(&corev1.Event{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			e, ok := o.(*corev1.Event)
			return ok && e.Reason == KarpenterReasonSpotInterrupted
		}))).
		// A reclaim brings a burst of events (one per NodeClaim and one per Node): marked one at
		// a time, the last Node of a 20-node burst would wait for 19 marks (seconds on a busy
		// API server). Marks of one Node from its two events are safe in parallel: the mark's
		// resourceVersion precondition lets one write it, the other finds it marked.
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentEventMarks}).
		Complete(in)
}

// HandleMessage handles one notice: HandleBatch of one message.
func (in *Intake) HandleMessage(ctx context.Context, msg interruptionqueue.Message) error {
	return in.HandleBatch(ctx, []interruptionqueue.Message{msg})[0]
}

// HoldBatchOpen is the SQS consumer's HoldBatchOpen: it holds the decision batch open while the
// consumer looks for the rest of a burst that the queue returned in part. The rest's Nodes,
// announced before the release, join the batch: one ledger write and one StartInstances call
// for the burst, not two of each one after the other.
func (in *Intake) HoldBatchOpen() (release func()) { return in.decisions.HoldBatchOpen() }

// target is a Node that notices of a receive batch name.
type target struct {
	node   *corev1.Node
	source string
	// msgs are the indexes of the batch's messages that name it.
	msgs []int
}

// HandleBatch is the SQS consumer's handler for a receive batch: it announces the Nodes of the
// messages' instances to the decision batcher and requests their decisions, so that they are
// made as one batch at once. A Node not marked yet is not marked first: its mark is written
// with its decision, after StartInstances (the claims' ledger entry is the durable record
// before it; see marks.Notice). A message's error is nil once the marks of all its Nodes are
// written: the consumer then deletes it; until then a crash delivers it again.
func (in *Intake) HandleBatch(ctx context.Context, msgs []interruptionqueue.Message) []error {
	errs := make([]error, len(msgs))
	// The notices' receipt is what the resume latency is measured from (EventBridge's event
	// time is in lifeboat_cloud_interruption_message_age_seconds).
	received := in.clock.Now()
	targets, order := in.targetsOf(ctx, msgs, errs)
	var expected []string
	for _, name := range order {
		if t := targets[name]; marks.Needed(t.node, t.source) {
			expected = append(expected, name)
		}
	}
	in.decisions.AwaitDecisions(expected)
	// The batch is taken in: a HoldBatchOpen hold on the open batch may end.
	interruptionqueue.BatchTakenIn(ctx)
	waits := map[string]*marks.Notice{}
	for _, name := range order {
		t := targets[name]
		// A fallback mark's error reaches the message through its notice.
		if n, _ := in.notice(ctx, t.node, t.source, received); n != nil {
			waits[name] = n
		}
	}
	for _, name := range order {
		n, ok := waits[name]
		if !ok {
			continue
		}
		if err := n.Wait(ctx); err != nil {
			for _, i := range targets[name].msgs {
				errs[i] = errors.Join(errs[i], fmt.Errorf("node %s: %w", name, err))
			}
		}
	}
	return errs
}

// targetsOf finds the Nodes the batch's messages name (pool nodes aside), in order of first
// mention; a read that fails is the message's error in errs. A rebalance recommendation names
// its Node only if some pool pre-resumes for it (and is left for redelivery if the pools
// cannot be read).
func (in *Intake) targetsOf(ctx context.Context, msgs []interruptionqueue.Message, errs []error) (map[string]*target, []string) {
	var (
		targets      = map[string]*target{}
		order        []string
		preResume    map[string]bool
		preResumeErr error
		loaded       bool
	)
	for i, msg := range msgs {
		signal := Classify(msg)
		if signal == Ignore {
			continue
		}
		if signal == Rebalance {
			if !loaded {
				preResume, preResumeErr = PreResumePools(ctx, in.client)
				loaded = true
			}
			if preResumeErr != nil {
				// Not deleted: the recommendation is handled again once the pools can be read.
				errs[i] = preResumeErr
				continue
			}
			if len(preResume) == 0 {
				continue
			}
		}
		source := "sqs/" + string(msg.Kind)
		for _, id := range msg.InstanceIDs {
			list := &corev1.NodeList{}
			// Read only (the mark works on a copy): no deep copy from the cache.
			if err := in.client.List(ctx, list, client.MatchingFields{indexes.NodeInstanceID: id}, client.UnsafeDisableDeepCopy); err != nil {
				errs[i] = errors.Join(errs[i], err)
				continue
			}
			for k := range list.Items {
				n := &list.Items[k]
				if nodeutil.Pool(n) != "" {
					continue // Lifeboat's own hibernations and resumes
				}
				t, ok := targets[n.Name]
				if !ok {
					t = &target{node: n, source: source}
					targets[n.Name] = t
					order = append(order, n.Name)
				} else if t.source == marks.SourceRebalance && signal == Interrupt {
					// The same batch says the instance is going away: that is the signal.
					t.source = source
				}
				t.msgs = append(t.msgs, i)
			}
		}
	}
	return targets, order
}

// Reconcile handles one of Karpenter's SpotInterrupted events: the decision of the Node it
// names (directly, or through its NodeClaim).
func (in *Intake) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ev := &corev1.Event{}
	if err := in.client.Get(ctx, req.NamespacedName, ev); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	nodeName := ""
	switch ev.InvolvedObject.Kind {
	case "Node":
		nodeName = ev.InvolvedObject.Name
	case "NodeClaim":
		nc := &karpv1.NodeClaim{}
		if err := in.client.Get(ctx, types.NamespacedName{Name: ev.InvolvedObject.Name}, nc); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		nodeName = nc.Status.NodeName
	}
	if nodeName == "" {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := in.client.Get(ctx, types.NamespacedName{Name: nodeName}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	_, err := in.notice(ctx, node, marks.SourceKarpenterEvent, in.clock.Now())
	return reconcile.Result{}, err
}

// notice asks for the decision of a Node a durable notice names (a queue message is deleted
// only once the notice is resolved; Karpenter's Event stays in the API server, and a restart
// lists it again): its mark is written with the decision, after StartInstances. It returns the
// Node's pending notice, or nil if the Node needs no mark (a pool node, or marked already: the
// decision follows from the mark). If the decision cannot be requested now, the Node is marked
// instead (the Node watch brings the decision) and the notice resolved with the mark's error.
func (in *Intake) notice(ctx context.Context, node *corev1.Node, source string, at time.Time) (*marks.Notice, error) {
	if nodeutil.Pool(node) != "" {
		return nil, nil
	}
	if !marks.Needed(node, source) {
		// If the trigger is full, the Node watch delivers the marked Node anyway.
		in.decisions.RequestDecision(node.Name)
		return nil, nil
	}
	n := in.notices.Add(node.Name, source, at)
	if in.decisions.RequestDecision(node.Name) {
		return n, nil
	}
	in.decisions.StopAwaiting(node.Name)
	_, err := in.marks.Write(ctx, node, source, at)
	in.notices.Resolve(node.Name, n, err)
	return n, err
}

// Mark records the interruption on the Node (taint lifeboat.dev/interrupted, annotations) once,
// counts it in the telemetry, and triggers the decision. Pool nodes are never marked.
func (in *Intake) Mark(ctx context.Context, node *corev1.Node, source string, at time.Time) error {
	if nodeutil.Pool(node) != "" {
		return nil
	}
	if _, err := in.marks.Write(ctx, node, source, at); err != nil {
		return err
	}
	in.decisions.RequestDecision(node.Name)
	return nil
}

// PreResumePools are the pools with rebalanceRecommendation PreResume. An error is returned, not
// an empty or nil set: nil means "every pool" to the plan, and empty ignores the recommendation.
func PreResumePools(ctx context.Context, c client.Reader) (map[string]bool, error) {
	pools := &v1alpha1.WarmPoolList{}
	if err := c.List(ctx, pools); err != nil {
		return nil, fmt.Errorf("list WarmPools for their rebalance policy: %w", err)
	}
	out := map[string]bool{}
	for _, p := range pools.Items {
		if p.Spec.RebalanceRecommendation == v1alpha1.RebalancePreResume {
			out[p.Name] = true
		}
	}
	return out, nil
}

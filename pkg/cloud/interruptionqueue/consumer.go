package interruptionqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/metricdef"
)

// Outcomes of a message, the "outcome" label of MessagesTotal.
const (
	OutcomeHandled    = "handled"
	OutcomeFailed     = "failed"
	OutcomeUnparsable = "unparsable"
)

var (
	MessagesTotal = metricdef.CounterVec("lifeboat_cloud_interruption_messages_total", "Interruption queue messages by kind and outcome (handled and deleted, handler failed and left for redelivery, unparsable and deleted).", "kind", "outcome")
	MessageAge    = metricdef.HistogramVec("lifeboat_cloud_interruption_message_age_seconds", "Time from the event (EventBridge time) to the start of its handling.", []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}, "kind")
)

// Handler acts on one message; NoOp messages are deleted without calling it. An error leaves the message in the queue: it becomes visible
// again after the visibility timeout and is redelivered. The messages of one receive batch are
// handled concurrently (Consumer.Workers): a Handler must be safe for concurrent use, and
// duplicates of one message (SQS delivers at least once) may be handled at the same time.
type Handler func(ctx context.Context, msg Message) error

// BatchHandler acts on the actionable messages of one receive batch at once (unparsable and
// NoOp messages are deleted without calling it) and returns one error per message, in order: a
// message whose error is nil is deleted, the others are left for redelivery (a nil slice: all
// handled). A correlated reclaim delivers many notices in one receive; handing them over as one
// unit lets the handler do per burst what would otherwise be done per notice (one decision, one
// StartInstances call). The slice may hold duplicates of one message (SQS delivers at least
// once).
type BatchHandler func(ctx context.Context, msgs []Message) []error

// Consumer long-polls an SQS queue and hands each parsed message to a Handler.
type Consumer struct {
	SQS      cloud.SQSAPI
	QueueURL string
	// WaitTime is the long-poll duration, whole seconds from 1 to 20 (SQS's limit). Default 20s.
	WaitTime time.Duration
	// VisibilityTimeout hides a received message from other receives until it is deleted or
	// the timeout passes; a failed handling is retried after it. Default 30s.
	VisibilityTimeout time.Duration
	// MaxMessages per receive, 1–10. Default 10.
	MaxMessages int32
	// ErrorBackoff is the first pause after a failed receive; it doubles up to 30s. Default 1s.
	ErrorBackoff time.Duration
	// Workers bounds how many messages of one receive batch Run's per-message Handler handles
	// at once (RunBatches hands the batch over whole). A correlated reclaim delivers many
	// notices in one batch, and handling them one after another would delay the last notice of
	// the batch by every handling before it. Each message is still deleted only after its own
	// handling succeeded. Default: MaxMessages (a batch is handled fully in parallel); 1
	// handles in order.
	Workers int
	// InFlightBatches bounds how many receive batches are handled at once: the next receive
	// does not wait for a batch's handling (a resume decision waits for StartInstances, which
	// EC2 throttling can stretch to seconds, and a burst spread over several receives must not
	// queue behind it). Default 4; 1 receives again only once a batch is handled and deleted.
	InFlightBatches int
	// HoldBatchOpen, if set, keeps the handler's batch open while the consumer looks for the
	// rest of a burst. SQS's long poll returns as soon as a message is there, so notices sent
	// together often come in two receives. When a receive returns fewer than MaxMessages, the
	// consumer calls HoldBatchOpen, hands the batch over, polls once more without waiting (in
	// parallel with the handling) and hands over what that returns; it calls the release
	// HoldBatchOpen returned once the follow-up batch's handler has taken it in (BatchTakenIn),
	// or at once if the poll found nothing.
	// A handler that batches its work (the interruption controller) holds its batch open until
	// the release, so that a burst split over two receives is still decided as one batch. Nil:
	// no follow-up poll.
	HoldBatchOpen func() (release func())
	Clock         clock.Clock
}

type takenInKey struct{}

// WithBatchTakenIn returns ctx carrying takenIn, which BatchTakenIn calls.
func WithBatchTakenIn(ctx context.Context, takenIn func()) context.Context {
	return context.WithValue(ctx, takenInKey{}, takenIn)
}

// BatchTakenIn tells the consumer that a BatchHandler has taken in its batch (registered the
// work it will wait for): see Consumer.HoldBatchOpen. A handler that never calls it is taken to
// have done so when it returns.
func BatchTakenIn(ctx context.Context) {
	if f, ok := ctx.Value(takenInKey{}).(func()); ok {
		f()
	}
}

// Run receives and handles messages until ctx is done; it returns nil then. A handled or
// unparsable message is deleted; a message whose handling failed is left for redelivery. The
// messages of a receive batch are handled concurrently, at most Workers at a time.
func (c *Consumer) Run(ctx context.Context, handle Handler) error {
	c.defaults()
	return c.RunBatches(ctx, func(ctx context.Context, msgs []Message) []error {
		return c.handleEach(ctx, msgs, handle)
	})
}

// RunBatches is Run with each receive batch handed to handle as one unit. Up to
// InFlightBatches batches are handled at once; on return every batch in flight has finished.
func (c *Consumer) RunBatches(ctx context.Context, handle BatchHandler) error {
	if c.SQS == nil || c.QueueURL == "" {
		return errors.New("interruption consumer: SQS client and queue URL are required")
	}
	c.defaults()
	log := klog.FromContext(ctx).WithValues("queue", c.QueueURL)
	backoff := c.ErrorBackoff
	var (
		inFlight sync.WaitGroup
		slots    = make(chan struct{}, c.InFlightBatches)
	)
	defer inFlight.Wait()
	for ctx.Err() == nil {
		// A slot before the receive: never hold more messages than can be handled now (the
		// others stay available to the queue's other consumers).
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msgs, err := c.receive(ctx, c.WaitTime)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				break
			}
			log.Error(err, "Receiving interruption messages failed; retrying", "backoff", backoff)
			select {
			case <-ctx.Done():
			case <-c.Clock.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = c.ErrorBackoff
		if c.HoldBatchOpen == nil || len(msgs) == 0 || len(msgs) >= int(c.MaxMessages) {
			c.dispatch(ctx, msgs, handle, slots, &inFlight)
			continue
		}
		c.gather(ctx, msgs, handle, slots, &inFlight)
	}
	return nil
}

// dispatch handles a receive batch in the background; it holds a slot, released when done.
func (c *Consumer) dispatch(ctx context.Context, msgs []sqstypes.Message, handle BatchHandler, slots chan struct{}, inFlight *sync.WaitGroup) {
	inFlight.Add(1)
	go func() {
		defer func() { <-slots; inFlight.Done() }()
		c.processBatch(ctx, msgs, handle)
	}()
}

// gather hands over a receive batch that may be the first part of a burst and looks for the
// rest at once (see HoldBatchOpen). The follow-up poll needs a free slot: with every slot busy, the
// next long poll gets the rest.
func (c *Consumer) gather(ctx context.Context, first []sqstypes.Message, handle BatchHandler, slots chan struct{}, inFlight *sync.WaitGroup) {
	release := c.HoldBatchOpen()
	c.dispatch(ctx, first, handle, slots, inFlight)
	select {
	case slots <- struct{}{}:
	default:
		release()
		return
	}
	more, err := c.receive(ctx, 0)
	if err != nil || len(more) == 0 {
		<-slots
		release()
		if err != nil && ctx.Err() == nil {
			// Not an error for the messages in hand: the next long poll tries again.
			klog.FromContext(ctx).V(1).Info("Follow-up receive failed", "err", err)
		}
		return
	}
	var once sync.Once
	c.dispatch(WithBatchTakenIn(ctx, func() { once.Do(release) }), more, handle, slots, inFlight)
}

// handleEach runs a per-message Handler over a batch with at most Workers messages in flight.
func (c *Consumer) handleEach(ctx context.Context, msgs []Message, handle Handler) []error {
	errs := make([]error, len(msgs))
	if c.Workers <= 1 || len(msgs) <= 1 {
		for i, m := range msgs {
			errs[i] = handle(ctx, m)
		}
		return errs
	}
	slots := make(chan struct{}, c.Workers)
	var wg sync.WaitGroup
	for i, m := range msgs {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = handle(ctx, m)
		}()
	}
	wg.Wait()
	return errs
}

// processBatch parses a receive batch, deletes what needs no handling, hands the rest to handle
// as one unit and deletes each handled message; it returns when every message is deleted or
// left for redelivery.
func (c *Consumer) processBatch(ctx context.Context, raw []sqstypes.Message, handle BatchHandler) {
	var (
		wg      sync.WaitGroup
		msgs    []Message
		sources []sqstypes.Message
	)
	deleteAsync := func(m sqstypes.Message) {
		wg.Add(1)
		go func() { defer wg.Done(); c.delete(ctx, m) }()
	}
	for _, m := range raw {
		log := klog.FromContext(ctx).WithValues("messageID", aws.ToString(m.MessageId))
		msg, err := Parse(aws.ToString(m.Body))
		if err != nil {
			// One bad message must not block the queue (nor be redelivered forever): delete it.
			log.Error(err, "Deleting unparsable interruption message")
			MessagesTotal.WithLabelValues(string(KindNoOp), OutcomeUnparsable).Inc()
			deleteAsync(m)
			continue
		}
		msg.SQSMessageID = aws.ToString(m.MessageId)
		if !msg.Time.IsZero() {
			MessageAge.WithLabelValues(string(msg.Kind)).Observe(c.Clock.Since(msg.Time).Seconds())
		}
		if msg.Kind == KindNoOp {
			// Unknown kinds and events of no concern: nothing to do, and no reason to see them again.
			log.V(4).Info("Ignoring interruption message", "source", msg.Source, "detailType", msg.DetailType)
			MessagesTotal.WithLabelValues(string(KindNoOp), OutcomeHandled).Inc()
			deleteAsync(m)
			continue
		}
		msgs = append(msgs, msg)
		sources = append(sources, m)
	}
	if len(msgs) > 0 {
		errs := handle(ctx, msgs)
		for i, m := range sources {
			var err error
			if i < len(errs) {
				err = errs[i]
			}
			log := klog.FromContext(ctx).WithValues("messageID", aws.ToString(m.MessageId))
			if err != nil {
				log.Error(err, "Handling interruption message failed; it will be redelivered", "kind", msgs[i].Kind, "instances", msgs[i].InstanceIDs, "receiveCount", m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
				MessagesTotal.WithLabelValues(string(msgs[i].Kind), OutcomeFailed).Inc()
				continue
			}
			log.V(4).Info("Handled interruption message", "kind", msgs[i].Kind, "instances", msgs[i].InstanceIDs)
			MessagesTotal.WithLabelValues(string(msgs[i].Kind), OutcomeHandled).Inc()
			deleteAsync(m)
		}
	}
	// Taken in: nothing to hand over, or handled (if the handler did not say so earlier).
	BatchTakenIn(ctx)
	wg.Wait()
}

func (c *Consumer) defaults() {
	if c.WaitTime <= 0 {
		c.WaitTime = 20 * time.Second
	}
	// SQS counts whole seconds, and 0 is a short poll: an idle queue would be polled in a
	// tight loop.
	c.WaitTime = max(c.WaitTime.Round(time.Second), time.Second)
	if c.VisibilityTimeout <= 0 {
		c.VisibilityTimeout = 30 * time.Second
	}
	if c.MaxMessages <= 0 || c.MaxMessages > 10 {
		c.MaxMessages = 10
	}
	if c.Workers <= 0 {
		c.Workers = int(c.MaxMessages)
	}
	if c.ErrorBackoff <= 0 {
		c.ErrorBackoff = time.Second
	}
	if c.InFlightBatches <= 0 {
		c.InFlightBatches = 4
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// receive polls the queue, waiting up to wait (whole seconds; 0 is a short poll).
func (c *Consumer) receive(ctx context.Context, wait time.Duration) ([]sqstypes.Message, error) {
	out, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.QueueURL),
		MaxNumberOfMessages:         c.MaxMessages,
		WaitTimeSeconds:             int32(min(wait, 20*time.Second) / time.Second),
		VisibilityTimeout:           int32(max(c.VisibilityTimeout/time.Second, 1)),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount, sqstypes.MessageSystemAttributeNameSentTimestamp},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", c.QueueURL, err)
	}
	return out.Messages, nil
}

func (c *Consumer) delete(ctx context.Context, m sqstypes.Message) {
	_, err := c.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.QueueURL), ReceiptHandle: m.ReceiptHandle})
	if err != nil && ctx.Err() == nil {
		// The message comes back after its visibility timeout and is handled again: handlers
		// are idempotent (delivery is at least once anyway).
		klog.FromContext(ctx).Error(err, "Deleting interruption message failed", "messageID", aws.ToString(m.MessageId))
	}
}

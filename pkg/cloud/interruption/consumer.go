package interruption

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
)

// Outcomes of a message, the "outcome" label of MessagesTotal.
const (
	OutcomeHandled    = "handled"
	OutcomeFailed     = "failed"
	OutcomeUnparsable = "unparsable"
)

var (
	MessagesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_cloud_interruption_messages_total",
		Help: "Interruption queue messages by kind and outcome (handled and deleted, handler failed and left for redelivery, unparsable and deleted).",
	}, []string{"kind", "outcome"})
	MessageAge = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lifeboat_cloud_interruption_message_age_seconds",
		Help:    "Time from the event (EventBridge time) to the start of its handling.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"kind"})
)

func init() {
	crmetrics.Registry.MustRegister(MessagesTotal, MessageAge)
}

// Handler acts on one message; NoOp messages are deleted without calling it. An error leaves the message in the queue: it becomes visible
// again after the visibility timeout and is redelivered. The messages of one receive batch are
// handled concurrently (Consumer.Workers): a Handler must be safe for concurrent use, and
// duplicates of one message (SQS delivers at least once) may be handled at the same time.
type Handler func(ctx context.Context, msg Message) error

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
	// Workers bounds how many messages of one receive batch are handled at once. A correlated
	// reclaim delivers many notices in one batch, and handling them one after another would
	// delay the last notice of the batch by every handling before it. Each message is still
	// deleted only after its own handling succeeded, and the next receive waits for the whole
	// batch. Default: MaxMessages (a batch is handled fully in parallel); 1 handles in order.
	Workers int
	Clock   clock.Clock
}

// Run receives and handles messages until ctx is done; it returns nil then. A handled or
// unparsable message is deleted; a message whose handling failed is left for redelivery.
func (c *Consumer) Run(ctx context.Context, handle Handler) error {
	if c.SQS == nil || c.QueueURL == "" {
		return errors.New("interruption consumer: SQS client and queue URL are required")
	}
	c.defaults()
	log := klog.FromContext(ctx).WithValues("queue", c.QueueURL)
	backoff := c.ErrorBackoff
	for ctx.Err() == nil {
		msgs, err := c.receive(ctx)
		if err != nil {
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
		c.processBatch(ctx, msgs, handle)
	}
	return nil
}

// processBatch handles a receive batch with at most Workers messages in flight and returns when
// every message is handled (and deleted, or left for redelivery).
func (c *Consumer) processBatch(ctx context.Context, msgs []sqstypes.Message, handle Handler) {
	if c.Workers <= 1 || len(msgs) <= 1 {
		for _, m := range msgs {
			c.process(ctx, m, handle)
		}
		return
	}
	slots := make(chan struct{}, c.Workers)
	var wg sync.WaitGroup
	for _, m := range msgs {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			c.process(ctx, m, handle)
		}()
	}
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
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

func (c *Consumer) receive(ctx context.Context) ([]sqstypes.Message, error) {
	out, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.QueueURL),
		MaxNumberOfMessages:         c.MaxMessages,
		WaitTimeSeconds:             int32(min(c.WaitTime, 20*time.Second) / time.Second),
		VisibilityTimeout:           int32(max(c.VisibilityTimeout/time.Second, 1)),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount, sqstypes.MessageSystemAttributeNameSentTimestamp},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", c.QueueURL, err)
	}
	return out.Messages, nil
}

// process handles one message. It returns nothing: every outcome is logged and counted, and the
// queue's visibility timeout takes care of what was not deleted.
func (c *Consumer) process(ctx context.Context, m sqstypes.Message, handle Handler) {
	log := klog.FromContext(ctx).WithValues("messageID", aws.ToString(m.MessageId))
	msg, err := Parse(aws.ToString(m.Body))
	if err != nil {
		// One bad message must not block the queue (nor be redelivered forever): delete it.
		log.Error(err, "Deleting unparsable interruption message")
		MessagesTotal.WithLabelValues(string(KindNoOp), OutcomeUnparsable).Inc()
		c.delete(ctx, m)
		return
	}
	msg.SQSMessageID = aws.ToString(m.MessageId)
	if !msg.Time.IsZero() {
		MessageAge.WithLabelValues(string(msg.Kind)).Observe(c.Clock.Since(msg.Time).Seconds())
	}
	if msg.Kind == KindNoOp {
		// Unknown kinds and events of no concern: nothing to do, and no reason to see them again.
		log.V(4).Info("Ignoring interruption message", "source", msg.Source, "detailType", msg.DetailType)
		MessagesTotal.WithLabelValues(string(KindNoOp), OutcomeHandled).Inc()
		c.delete(ctx, m)
		return
	}
	if err := handle(ctx, msg); err != nil {
		log.Error(err, "Handling interruption message failed; it will be redelivered", "kind", msg.Kind, "instances", msg.InstanceIDs, "receiveCount", m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		MessagesTotal.WithLabelValues(string(msg.Kind), OutcomeFailed).Inc()
		return
	}
	log.V(4).Info("Handled interruption message", "kind", msg.Kind, "instances", msg.InstanceIDs)
	MessagesTotal.WithLabelValues(string(msg.Kind), OutcomeHandled).Inc()
	c.delete(ctx, m)
}

func (c *Consumer) delete(ctx context.Context, m sqstypes.Message) {
	_, err := c.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.QueueURL), ReceiptHandle: m.ReceiptHandle})
	if err != nil && ctx.Err() == nil {
		// The message comes back after its visibility timeout and is handled again: handlers
		// are idempotent (delivery is at least once anyway).
		klog.FromContext(ctx).Error(err, "Deleting interruption message failed", "messageID", aws.ToString(m.MessageId))
	}
}

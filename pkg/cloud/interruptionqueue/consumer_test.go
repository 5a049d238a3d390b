package interruptionqueue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
)

func spotEvent(id, instance string) string {
	return fmt.Sprintf(`{"version":"0","id":%q,"detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-29T20:57:42Z","region":"us-east-1","resources":[],"detail":{"instance-id":%q,"instance-action":"terminate"}}`, id, instance)
}

type recorder struct {
	mu      sync.Mutex
	byEvent map[string]int
	fail    map[string]int // event id → failures still to return
	handled chan struct{}
}

func newRecorder() *recorder {
	return &recorder{byEvent: map[string]int{}, fail: map[string]int{}, handled: make(chan struct{}, 1000)}
}

func (r *recorder) handle(_ context.Context, m interruptionqueue.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail[m.EventID] > 0 {
		r.fail[m.EventID]--
		return errors.New("handler failed on purpose")
	}
	r.byEvent[m.EventID]++
	r.handled <- struct{}{}
	return nil
}

// run starts a consumer on a new queue of an emulator and returns the SQS client, the queue URL
// and a stop function that waits for the consumer to return.
func run(t *testing.T, s *awsemu.Server, rec *recorder) (*sqs.Client, string, func()) {
	t.Helper()
	o := s.ClientOptions()
	o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	c, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.SQS.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("lifeboat-interruption")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: c.SQS, QueueURL: aws.ToString(q.QueueUrl), WaitTime: time.Second, VisibilityTimeout: time.Second, ErrorBackoff: time.Millisecond}
	go func() { done <- consumer.Run(ctx, rec.handle) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return c.SQS, aws.ToString(q.QueueUrl), stop
}

func waitHandled(t *testing.T, rec *recorder, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for range n {
		select {
		case <-rec.handled:
		case <-timeout:
			t.Fatalf("timed out waiting for %d handled messages", n)
		}
	}
}

func waitEmpty(t *testing.T, s *awsemu.Server, queue string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.QueueDepth(queue) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s still holds %d messages", queue, s.QueueDepth(queue))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConsumerDuplicatesAndReordering(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{Seed: 42})
	s.SetFaults(awsemu.Faults{SQSDuplicates: 1, SQSReorder: true, SQSThrottle: 0.3})
	rec := newRecorder()
	api, url, stop := run(t, s, rec)
	const events = 20
	for i := range events {
		if _, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(spotEvent(fmt.Sprintf("evt-%d", i), fmt.Sprintf("i-%017x", i)))}); err != nil {
			t.Fatal(err)
		}
	}
	// Every copy is handled and deleted: 2 deliveries of each event.
	waitHandled(t, rec, 2*events)
	waitEmpty(t, s, "lifeboat-interruption")
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := range events {
		if got := rec.byEvent[fmt.Sprintf("evt-%d", i)]; got != 2 {
			t.Errorf("evt-%d handled %d times, want 2 (one per delivered copy)", i, got)
		}
	}
	if n := s.Calls("DeleteMessage", ""); n != 2*events {
		t.Errorf("%d deletes, want %d", n, 2*events)
	}
}

func TestConsumerDeletesUnparsableAndRedeliversFailures(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{})
	rec := newRecorder()
	rec.fail["evt-retry"] = 1
	unparsableBefore := testutil.ToFloat64(interruptionqueue.MessagesTotal.WithLabelValues(string(interruptionqueue.KindNoOp), interruptionqueue.OutcomeUnparsable))
	failedBefore := testutil.ToFloat64(interruptionqueue.MessagesTotal.WithLabelValues(string(interruptionqueue.KindSpotInterruption), interruptionqueue.OutcomeFailed))
	api, url, stop := run(t, s, rec)
	send := func(body string) {
		t.Helper()
		if _, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	send("this is not an event")
	send(`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","time":"2026-11-29T20:57:42Z","detail":{"instance-id":"nope"}}`)
	send(spotEvent("evt-retry", "i-0000000000000abcd"))
	unknown, err := os.ReadFile(filepath.Join("testdata", "unknown-kind.json"))
	if err != nil {
		t.Fatal(err)
	}
	send(string(unknown))
	// After one failure and the 1 s visibility timeout, the retried event.
	waitHandled(t, rec, 1)
	waitEmpty(t, s, "lifeboat-interruption")
	stop()
	if got := testutil.ToFloat64(interruptionqueue.MessagesTotal.WithLabelValues(string(interruptionqueue.KindNoOp), interruptionqueue.OutcomeUnparsable)) - unparsableBefore; got != 2 {
		t.Errorf("unparsable counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(interruptionqueue.MessagesTotal.WithLabelValues(string(interruptionqueue.KindSpotInterruption), interruptionqueue.OutcomeFailed)) - failedBefore; got != 1 {
		t.Errorf("failed handling counted %v, want 1", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.byEvent["evt-retry"] != 1 {
		t.Errorf("failed message handled %d times after redelivery, want 1", rec.byEvent["evt-retry"])
	}
	if len(rec.byEvent) != 1 {
		t.Errorf("handler saw %v; the unknown kind must not reach it", rec.byEvent)
	}
}

// TestConsumerHandlesBatchConcurrently: the messages of one receive batch are handled at the
// same time, never more than Workers at once, and each is deleted after its own handling.
func TestConsumerHandlesBatchConcurrently(t *testing.T) {
	s, sqsAPI, url := newQueue(t, "lifeboat-interruption", false)
	const events, workers = 10, 3
	// All messages are queued before the consumer starts, so its first receive gets a batch.
	for i := range events {
		if _, err := sqsAPI.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(spotEvent(fmt.Sprintf("evt-%d", i), fmt.Sprintf("i-%017x", i)))}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu             sync.Mutex
		inFlight, most int
		handled        = map[string]int{}
		full           = make(chan struct{})
		fullOnce       sync.Once
	)
	done := make(chan struct{}, events)
	handle := func(ctx context.Context, m interruptionqueue.Message) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == workers {
			fullOnce.Do(func() { close(full) })
		}
		mu.Unlock()
		// The first handlers wait until the pool is full: this only returns if Workers
		// messages really are handled at once.
		select {
		case <-full:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		inFlight--
		handled[m.EventID]++
		mu.Unlock()
		done <- struct{}{}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: sqsAPI, QueueURL: url, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second, Workers: workers}
	go func() { stopped <- consumer.Run(ctx, handle) }()
	timeout := time.After(20 * time.Second)
	for range events {
		select {
		case <-done:
		case <-timeout:
			t.Fatal("timed out waiting for the batch to be handled")
		}
	}
	waitEmpty(t, s, "lifeboat-interruption")
	cancel()
	if err := <-stopped; err != nil {
		t.Errorf("consumer: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != workers {
		t.Errorf("at most %d messages in flight, want exactly %d (Workers)", most, workers)
	}
	for i := range events {
		if got := handled[fmt.Sprintf("evt-%d", i)]; got != 1 {
			t.Errorf("evt-%d handled %d times, want 1", i, got)
		}
	}
	if n := s.Calls("DeleteMessage", ""); n != events {
		t.Errorf("%d deletes, want %d", n, events)
	}
}

// TestConsumerHandsBatchOver: RunBatches gives the actionable messages of a receive as one
// slice (the unparsable one is deleted without reaching the handler), deletes the handled
// ones and leaves a failed one for redelivery.
func TestConsumerHandsBatchOver(t *testing.T) {
	s, sqsAPI, url := newQueue(t, "lifeboat-batch", true)
	// Queued before the consumer runs: one receive takes them all.
	bodies := []string{"not an event"}
	for i := range 6 {
		bodies = append(bodies, spotEvent(fmt.Sprintf("evt-%d", i), fmt.Sprintf("i-00000000000000%03d", i)))
	}
	for _, b := range bodies {
		if _, err := sqsAPI.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		batches [][]string
		failed  bool
	)
	handled := make(chan struct{}, 100)
	handle := func(_ context.Context, msgs []interruptionqueue.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		var ids []string
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			ids = append(ids, m.EventID)
			if m.EventID == "evt-3" && !failed {
				failed = true
				errs[i] = errors.New("failed on purpose")
				continue
			}
			handled <- struct{}{}
		}
		batches = append(batches, ids)
		return errs
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: sqsAPI, QueueURL: url, WaitTime: time.Second, VisibilityTimeout: time.Second, ErrorBackoff: time.Millisecond}
	go func() { done <- consumer.RunBatches(ctx, handle) }()
	timeout := time.After(20 * time.Second)
	for range 6 {
		select {
		case <-handled:
		case <-timeout:
			t.Fatal("timed out waiting for 6 handled messages")
		}
	}
	waitEmpty(t, s, "lifeboat-batch")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || len(batches[0]) != 6 || len(batches[1]) != 1 || batches[1][0] != "evt-3" {
		t.Fatalf("batches %v, want the 6 events at once, then the failed one redelivered alone", batches)
	}
}

// TestConsumerBatchesInFlight: the next receive does not wait for a batch's handling. The
// first batch's handler holds until a second notice, sent after it was received, is handed over
// in its own batch; with InFlightBatches 1 that would never happen.
func TestConsumerBatchesInFlight(t *testing.T) {
	s, sqsAPI, url := newQueue(t, "lifeboat-inflight", true)
	send := func(id string) {
		t.Helper()
		if _, err := sqsAPI.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(spotEvent("evt-"+id, id))}); err != nil {
			t.Fatal(err)
		}
	}
	send("i-00000000000000001")
	first, second := make(chan struct{}), make(chan struct{})
	handle := func(ctx context.Context, msgs []interruptionqueue.Message) []error {
		switch msgs[0].EventID {
		case "evt-i-00000000000000001":
			close(first)
			select {
			case <-second:
			case <-ctx.Done():
			}
		case "evt-i-00000000000000002":
			close(second)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: sqsAPI, QueueURL: url, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second, ErrorBackoff: time.Millisecond}
	go func() { done <- consumer.RunBatches(ctx, handle) }()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the first notice was never handed over")
	}
	send("i-00000000000000002")
	select {
	case <-second:
	case <-time.After(20 * time.Second):
		t.Fatal("the second notice waited for the first batch's handling")
	}
	waitEmpty(t, s, "lifeboat-inflight")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// newQueue starts an emulator with a queue of that name; fast retries if fast.
func newQueue(t *testing.T, name string, fast bool) (*awsemu.Server, *sqs.Client, string) {
	t.Helper()
	s := awsemutest.StartT(t, awsemu.Options{})
	o := s.ClientOptions()
	if fast {
		o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	}
	c, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.SQS.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return s, c.SQS, aws.ToString(q.QueueUrl)
}

// TestConsumerGathersSplitBurst: a receive that returns part of a burst (the rest arrives just
// after it) is followed at once by a poll without waiting. The first part's handler holds (as
// the decision batcher does) until the release, which comes once the rest's handler has taken
// its batch in (BatchTakenIn) — not after the first part's handling.
func TestConsumerGathersSplitBurst(t *testing.T) {
	s, sqsAPI, url := newQueue(t, "lifeboat-gather", true)
	send := func(id string) {
		t.Helper()
		if _, err := sqsAPI.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(spotEvent("evt-"+id, id))}); err != nil {
			t.Error(err)
		}
	}
	send("i-00000000000000001")
	var (
		mu       sync.Mutex
		log      []string
		gathers  int
		released = make(chan struct{})
	)
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	gather := func() func() {
		mu.Lock()
		gathers++
		first := gathers == 1
		mu.Unlock()
		if first {
			// The rest of the burst lands right after the first receive.
			send("i-00000000000000002")
			send("i-00000000000000003")
		}
		var once sync.Once
		return func() {
			once.Do(func() {
				note("release")
				if first {
					close(released)
				}
			})
		}
	}
	handle := func(ctx context.Context, msgs []interruptionqueue.Message) []error {
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.EventID)
		}
		note(fmt.Sprint(ids))
		if len(msgs) == 1 && msgs[0].EventID == "evt-i-00000000000000001" {
			select {
			case <-released:
			case <-time.After(10 * time.Second):
				t.Error("the first part's batch was never released")
			}
			return nil
		}
		note("announcing")
		interruptionqueue.BatchTakenIn(ctx)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: sqsAPI, QueueURL: url, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second, ErrorBackoff: time.Millisecond, HoldBatchOpen: gather}
	go func() { done <- consumer.RunBatches(ctx, handle) }()
	waitEmpty(t, s, "lifeboat-gather")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var rest, releasedAt, announcedAt = -1, -1, -1
	for i, e := range log {
		switch e {
		case "[evt-i-00000000000000002 evt-i-00000000000000003]", "[evt-i-00000000000000003 evt-i-00000000000000002]":
			rest = i
		case "release":
			if releasedAt < 0 {
				releasedAt = i
			}
		case "announcing":
			announcedAt = i
		}
	}
	if rest < 0 || announcedAt < 0 || releasedAt < announcedAt {
		t.Fatalf("log %v: want the rest in one follow-up batch, released only once its handler announced", log)
	}
	if n := s.Calls("ReceiveMessage", ""); n < 2 {
		t.Fatalf("%d receives, want the long poll and the follow-up", n)
	}
}

// TestConsumerGatherEmptyFollowUp: a lone notice's follow-up poll finds nothing, and the hold
// ends at once (the handler waits for it, as the decision batcher does); with a full receive no
// follow-up is made.
func TestConsumerGatherEmptyFollowUp(t *testing.T) {
	s, sqsAPI, url := newQueue(t, "lifeboat-gather-empty", true)
	if _, err := sqsAPI.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(spotEvent("evt-1", "i-00000000000000001"))}); err != nil {
		t.Fatal(err)
	}
	var (
		gathers  int
		released = make(chan struct{})
		once     sync.Once
	)
	gather := func() func() {
		gathers++
		return func() { once.Do(func() { close(released) }) }
	}
	handle := func(ctx context.Context, msgs []interruptionqueue.Message) []error {
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Error("the hold never ended")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	consumer := &interruptionqueue.Consumer{SQS: sqsAPI, QueueURL: url, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second, ErrorBackoff: time.Millisecond, HoldBatchOpen: gather}
	go func() { done <- consumer.RunBatches(ctx, handle) }()
	waitEmpty(t, s, "lifeboat-gather-empty")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if gathers != 1 {
		t.Fatalf("HoldBatchOpen called %d times, want 1", gathers)
	}
}

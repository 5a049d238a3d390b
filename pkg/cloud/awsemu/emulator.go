// Package awsemu is a wire-level emulator of the EC2 and SQS APIs Lifeboat uses, in the spirit of
// LocalStack or amazon-ec2-metadata-mock: an http.Handler that speaks the EC2 Query protocol
// (form-encoded requests, XML responses) and the SQS JSON protocol (awsJson1_0), so the
// production aws-sdk-go-v2 clients run against it unchanged, pointed at it by endpoint override.
//
// EC2 instances follow the real state machine (pending → running → stopping → stopped →
// pending → running → shutting-down → terminated) with configurable delays, idempotent
// ClientToken semantics and hibernation. SQS queues deliver at least once, with long polling and
// visibility timeouts. Faults can be injected: throttling, server errors, insufficient capacity,
// NotFound right after launch, hibernation degraded to a stop, duplicate and reordered delivery.
// An optional NodeBinder mirrors instances as Nodes in a (KWOK) cluster.
//
// One handler serves both services: requests with an X-Amz-Target of AmazonSQS.* are SQS, the
// rest EC2. Signatures are not checked.
package awsemu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Delays of the state machine. The defaults model a real node (docs/FACTS.md): a cold launch reaches
// SSH in ~26 s and a hibernated m7i.large resumes in ~21 s (brevdev/ec2-coldboot-research);
// a pre-warmed stopped node is Ready in ~20 s (stratos-sh docs).
type Delays struct {
	// Launch: pending → running after RunInstances.
	Launch time.Duration
	// NodeBoot: running → Node registered (kubelet up), after Launch.
	NodeBoot time.Duration
	// Stop: stopping → stopped (hibernation writes RAM to disk).
	Stop time.Duration
	// Start: pending → running after StartInstances.
	Start time.Duration
	// NodeResume: running → Node Ready again after a resume, after Start.
	NodeResume time.Duration
	// Terminate: shutting-down → terminated.
	Terminate time.Duration
}

// DefaultDelays are the simulation's defaults.
func DefaultDelays() Delays {
	return Delays{
		Launch:     6 * time.Second,
		NodeBoot:   20 * time.Second, // ≈ 26 s to a registered node (cold)
		Stop:       20 * time.Second, // assumption: writing a few GiB of RAM to gp3; not sourced
		Start:      6 * time.Second,
		NodeResume: 14 * time.Second, // ≈ 20 s to Ready after StartInstances (warm)
		Terminate:  5 * time.Second,
	}
}

// Options configure an Emulator.
type Options struct {
	// Region, default us-east-1; AccountID, default 000000000000.
	Region    string
	AccountID string
	Delays    Delays
	// Subnets maps subnet IDs to availability zones. Default: subnet-a, subnet-b, subnet-c in
	// zones <region>a, b, c. RunInstances with an unknown subnet fails InvalidSubnetID.NotFound.
	Subnets map[string]string
	// TerminatedRetention: how long terminated instances stay visible (EC2: about an hour).
	TerminatedRetention time.Duration
	// Binder, if set, mirrors instances as Nodes (see NodeBinder).
	Binder NodeBinder
	// Seed makes reordered delivery reproducible. Zero: random.
	Seed uint64
	// Logger; default klog's background logger.
	Logger *klog.Logger
}

// CapacityFault makes EC2 report InsufficientInstanceCapacity for an instance type in a zone.
// Empty InstanceType or Zone match all. OnRun and OnStart choose the calls (both false: both).
type CapacityFault struct {
	InstanceType, Zone string
	OnRun, OnStart     bool
}

// Faults are the injected failures. Fractions are applied deterministically: with 0.5, every
// second call of the service fails, so tests do not depend on luck.
type Faults struct {
	// EC2Throttle: fraction of EC2 calls answered RequestLimitExceeded (HTTP 503).
	EC2Throttle float64
	// EC2ServerError: fraction of EC2 calls answered InternalError (HTTP 500).
	EC2ServerError float64
	// SQSThrottle: fraction of SQS calls answered RequestThrottled (HTTP 400).
	SQSThrottle float64
	// SQSServerError: fraction of SQS calls answered InternalFailure (HTTP 500).
	SQSServerError float64
	// Capacity: InsufficientInstanceCapacity for matching launches or starts.
	Capacity []CapacityFault
	// NotFoundAfterLaunch: a new instance is InvalidInstanceID.NotFound to every call naming it
	// for this long (EC2's eventual consistency).
	NotFoundAfterLaunch time.Duration
	// HibernationDegrades: every hibernation becomes a plain stop (StateReason
	// Client.UserInitiatedShutdown), as EC2 does when hibernation fails.
	HibernationDegrades bool
	// DegradeHibernationOf: the same for chosen instance IDs.
	DegradeHibernationOf map[string]bool
	// SQSDuplicates: each sent message is delivered this many extra times (distinct receipt
	// handles, same MessageId), as SQS's at-least-once delivery may.
	SQSDuplicates int
	// SQSReorder: receives return visible messages in random order.
	SQSReorder bool
}

// Emulator is the EC2 + SQS emulator. Create it with New, serve it as an http.Handler, Close it.
type Emulator struct {
	opts Options
	log  klog.Logger

	mu     sync.Mutex
	faults Faults
	// fault counters: calls per service seen by each fractional fault.
	faultCalls map[string]uint64
	calls      map[string]map[string]int // action → outcome code ("" = success) → count
	seq        uint64
	rng        *rand.Rand
	closed     bool
	timers     map[*time.Timer]struct{}

	ec2 ec2State
	sqs sqsState

	binder *binderQueue
}

// New returns a started emulator. Close it to stop its timers and binder.
func New(opts Options) *Emulator {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.AccountID == "" {
		opts.AccountID = "000000000000"
	}
	if opts.Subnets == nil {
		opts.Subnets = map[string]string{
			"subnet-a": opts.Region + "a",
			"subnet-b": opts.Region + "b",
			"subnet-c": opts.Region + "c",
		}
	}
	if opts.TerminatedRetention == 0 {
		opts.TerminatedRetention = time.Hour
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	log := klog.Background().WithName("awsemu")
	if opts.Logger != nil {
		log = *opts.Logger
	}
	e := &Emulator{
		opts:       opts,
		log:        log,
		faultCalls: map[string]uint64{},
		calls:      map[string]map[string]int{},
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		timers:     map[*time.Timer]struct{}{},
	}
	e.ec2.init()
	e.sqs.init()
	if opts.Binder != nil {
		e.binder = newBinderQueue(opts.Binder, log)
	}
	return e
}

// Close stops the state machine's timers, wakes long polls and stops the binder (pending Node
// updates are dropped). It is safe to call more than once.
func (e *Emulator) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	for t := range e.timers {
		t.Stop()
	}
	e.timers = nil
	e.sqs.wakeAll()
	e.mu.Unlock()
	if e.binder != nil {
		e.binder.close()
	}
}

// SetFaults replaces the injected faults.
func (e *Emulator) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
}

// UpdateFaults edits the injected faults in place.
func (e *Emulator) UpdateFaults(fn func(*Faults)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(&e.faults)
}

// Calls returns how many requests of an action ("RunInstances", "ReceiveMessage", …) the
// emulator answered with the given error code; code "" counts successes.
func (e *Emulator) Calls(action, code string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[action][code]
}

// TotalCalls returns how many requests of an action were answered, whatever the outcome.
func (e *Emulator) TotalCalls(action string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls[action] {
		n += c
	}
	return n
}

func (e *Emulator) countLocked(action, code string) {
	m := e.calls[action]
	if m == nil {
		m = map[string]int{}
		e.calls[action] = m
	}
	m[code]++
}

// fire decides a fractional fault deterministically: call n fails when the running total of
// fraction crosses an integer, so a fraction f fails exactly ⌊n·f⌋ of n calls, evenly spread.
func (e *Emulator) fireLocked(name string, fraction float64) bool {
	if fraction <= 0 {
		return false
	}
	n := e.faultCalls[name]
	e.faultCalls[name] = n + 1
	if fraction >= 1 {
		return true
	}
	return int64(float64(n+1)*fraction) > int64(float64(n)*fraction)
}

// afterLocked runs fn under e.mu after d, unless the emulator is closed first.
func (e *Emulator) afterLocked(d time.Duration, fn func()) {
	if e.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			return
		}
		delete(e.timers, t)
		fn()
	})
	e.timers[t] = struct{}{}
}

func (e *Emulator) nextIDLocked(prefix string) string {
	e.seq++
	// 17 hex digits like modern EC2 IDs; the high bits vary per emulator so IDs from two
	// emulators (or runs) rarely collide.
	return fmt.Sprintf("%s-%017x", prefix, (e.rng.Uint64()&0xfff)<<52|e.seq)
}

// ServeHTTP implements http.Handler.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if target := r.Header.Get("X-Amz-Target"); strings.HasPrefix(target, "AmazonSQS.") {
		e.serveSQS(w, r, strings.TrimPrefix(target, "AmazonSQS."))
		return
	}
	e.serveEC2(w, r)
}

// requestID is a fresh request ID for responses.
func (e *Emulator) requestID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, b := e.rng.Uint64(), e.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

// Wait blocks until every Node update queued so far has been applied to the binder (or the
// emulator is closed). Tests use it to avoid racing the binder.
func (e *Emulator) Wait(ctx context.Context) error {
	if e.binder == nil {
		return nil
	}
	return e.binder.wait(ctx)
}

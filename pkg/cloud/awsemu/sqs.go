package awsemu

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sqsError is an SQS JSON-protocol error: the awsJson1_0 "__type" with the SQS shape name, and the
// legacy query code in x-amzn-query-error (SQS is awsQueryCompatible), which the SDK prefers.
type sqsError struct {
	status    int
	shape     string // e.g. QueueDoesNotExist
	queryCode string // e.g. AWS.SimpleQueueService.NonExistentQueue
	fault     string // Sender or Receiver
	message   string
}

func sqsClientErr(shape, queryCode, format string, args ...any) *sqsError {
	return &sqsError{status: http.StatusBadRequest, shape: shape, queryCode: queryCode, fault: "Sender", message: fmt.Sprintf(format, args...)}
}

type sqsMessage struct {
	id, body, md5 string
	sentAt        time.Time
	// copy distinguishes duplicate deliveries of one message; each is deleted separately.
	copy          int
	visibleAt     time.Time
	receiveCount  int
	firstReceived time.Time
	receipt       string
}

type sqsQueue struct {
	name, url         string
	visibilityTimeout time.Duration
	waitTime          time.Duration
	messages          []*sqsMessage
	// receipts maps every receipt handle ever issued to its message; deleting with a handle of a
	// deleted message succeeds, like SQS.
	receipts map[string]*sqsMessage
	// wake is closed and replaced when messages may have become available.
	wake chan struct{}
}

type sqsState struct {
	queues map[string]*sqsQueue // by name
}

func (s *sqsState) init() { s.queues = map[string]*sqsQueue{} }

func (s *sqsState) wakeAll() {
	for _, q := range s.queues {
		q.signal()
	}
}

func (q *sqsQueue) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

func (e *Emulator) serveSQS(w http.ResponseWriter, r *http.Request, op string) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		e.writeSQSError(w, op, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "read body: %v", err))
		return
	}
	var in map[string]json.RawMessage
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			e.writeSQSError(w, op, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "The request body is not valid JSON: %v", err))
			return
		}
	}
	sqsWire.serve(e, w, op, func() (any, *sqsError) { return e.sqsActionLocked(r, op, in) })
}

// sqsWire is the SQS JSON protocol (awsJson1_0).
var sqsWire = apiWire[*sqsError]{
	fault:   (*Emulator).sqsFaultLocked,
	code:    func(err *sqsError) string { return err.shape },
	marshal: json.Marshal,
	internal: func(err error) *sqsError {
		return &sqsError{status: 500, shape: "InternalError", queryCode: "InternalError", fault: "Receiver", message: err.Error()}
	},
	writeErr: (*Emulator).writeSQSError,
	writeBody: func(e *Emulator, w http.ResponseWriter, body []byte) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-RequestId", e.requestID())
		_, _ = w.Write(body)
	},
}

// sqsActions are the SQS operations the emulator serves; ReceiveMessage releases e.mu while
// it long-polls.
var sqsActions = map[string]func(e *Emulator, r *http.Request, in map[string]json.RawMessage) (any, *sqsError){
	"ReceiveMessage":          (*Emulator).receiveLocked,
	"CreateQueue":             (*Emulator).createQueueLocked,
	"GetQueueUrl":             withoutRequest((*Emulator).getQueueURLLocked),
	"SendMessage":             withoutRequest((*Emulator).sendMessageLocked),
	"DeleteMessage":           withoutRequest((*Emulator).deleteMessageLocked),
	"ChangeMessageVisibility": withoutRequest((*Emulator).changeVisibilityLocked),
	"GetQueueAttributes":      withoutRequest((*Emulator).getQueueAttributesLocked),
}

// withoutRequest adapts an SQS operation that needs only its input.
func withoutRequest(op func(e *Emulator, in map[string]json.RawMessage) (any, *sqsError)) func(*Emulator, *http.Request, map[string]json.RawMessage) (any, *sqsError) {
	return func(e *Emulator, _ *http.Request, in map[string]json.RawMessage) (any, *sqsError) { return op(e, in) }
}

// sqsActionLocked runs one SQS operation.
func (e *Emulator) sqsActionLocked(r *http.Request, op string, in map[string]json.RawMessage) (any, *sqsError) {
	run, ok := sqsActions[op]
	if !ok {
		return nil, &sqsError{status: 400, shape: "UnsupportedOperation", queryCode: "AWS.SimpleQueueService.UnsupportedOperation", fault: "Sender", message: "Operation " + op + " is not supported by the Lifeboat emulator."}
	}
	return run(e, r, in)
}

func (e *Emulator) writeSQSError(w http.ResponseWriter, op string, err *sqsError) {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + err.shape, "message": err.message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-RequestId", e.requestID())
	if err.queryCode != "" {
		w.Header().Set("X-Amzn-Query-Error", err.queryCode+";"+err.fault)
	}
	w.WriteHeader(err.status)
	_, _ = w.Write(body)
	e.log.V(4).Info("SQS error", "op", op, "code", err.shape, "message", err.message)
}

func (e *Emulator) sqsFaultLocked() *sqsError {
	if e.fireLocked("sqs-throttle", e.faults.SQSThrottle) {
		return &sqsError{status: http.StatusBadRequest, shape: "RequestThrottled", queryCode: "RequestThrottled", fault: "Sender", message: "Request is throttled."}
	}
	if e.fireLocked("sqs-5xx", e.faults.SQSServerError) {
		return &sqsError{status: http.StatusInternalServerError, shape: "InternalError", queryCode: "InternalError", fault: "Receiver", message: "We encountered an internal error. Please try again."}
	}
	return nil
}

func jsonString(in map[string]json.RawMessage, key string) string {
	var s string
	if raw, ok := in[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

func jsonInt(in map[string]json.RawMessage, key string) (int, bool, *sqsError) {
	raw, ok := in[key]
	if !ok {
		return 0, false, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Value %s for parameter %s is invalid.", raw, key)
	}
	return n, true, nil
}

// jsonSeconds reads an optional parameter of whole seconds in [0, maxSeconds]; def when it is
// absent. reason is appended to the message of an out-of-range value.
func jsonSeconds(in map[string]json.RawMessage, key string, def time.Duration, maxSeconds int, reason string) (time.Duration, *sqsError) {
	n, set, err := jsonInt(in, key)
	if err != nil || !set {
		return def, err
	}
	if n < 0 || n > maxSeconds {
		return 0, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Value %d for parameter %s is invalid.%s", n, key, reason)
	}
	return time.Duration(n) * time.Second, nil
}

// queueFromURLLocked finds a queue by its URL (the last path element is its name).
func (e *Emulator) queueFromURLLocked(in map[string]json.RawMessage) (*sqsQueue, *sqsError) {
	u := jsonString(in, "QueueUrl")
	if u == "" {
		return nil, sqsClientErr("MissingParameter", "MissingParameter", "The request must contain the parameter QueueUrl.")
	}
	name := u[strings.LastIndex(u, "/")+1:]
	q, ok := e.sqs.queues[name]
	if !ok {
		return nil, sqsClientErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return q, nil
}

func (e *Emulator) queueURL(r *http.Request, name string) string {
	scheme := "http"
	if r != nil && r.TLS != nil {
		scheme = "https"
	}
	host := "localhost"
	if r != nil && r.Host != "" {
		host = r.Host
	}
	return scheme + "://" + host + "/" + e.opts.AccountID + "/" + name
}

func (e *Emulator) createQueueLocked(r *http.Request, in map[string]json.RawMessage) (any, *sqsError) {
	name := jsonString(in, "QueueName")
	if name == "" || len(name) > 80 || strings.ContainsAny(name, "/: ") {
		return nil, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Queue name %q is invalid.", name)
	}
	var attrs map[string]string
	if raw, ok := in["Attributes"]; ok {
		if err := json.Unmarshal(raw, &attrs); err != nil {
			return nil, sqsClientErr("InvalidAttributeValue", "InvalidAttributeValue", "Attributes: %v", err)
		}
	}
	q := e.createQueueInternalLocked(name, e.queueURL(r, name))
	if v, ok := attrs["VisibilityTimeout"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 43200 {
			return nil, sqsClientErr("InvalidAttributeValue", "InvalidAttributeValue", "Invalid value for the parameter VisibilityTimeout.")
		}
		q.visibilityTimeout = time.Duration(n) * time.Second
	}
	if v, ok := attrs["ReceiveMessageWaitTimeSeconds"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 20 {
			return nil, sqsClientErr("InvalidAttributeValue", "InvalidAttributeValue", "Invalid value for the parameter ReceiveMessageWaitTimeSeconds.")
		}
		q.waitTime = time.Duration(n) * time.Second
	}
	return map[string]string{"QueueUrl": q.url}, nil
}

func (e *Emulator) createQueueInternalLocked(name, url string) *sqsQueue {
	if q, ok := e.sqs.queues[name]; ok {
		return q
	}
	q := &sqsQueue{name: name, url: url, visibilityTimeout: 30 * time.Second, receipts: map[string]*sqsMessage{}, wake: make(chan struct{})}
	e.sqs.queues[name] = q
	return q
}

// CreateQueue creates a queue from Go (for the simulation) and returns its URL on the given
// endpoint (e.g. "http://127.0.0.1:4566").
func (e *Emulator) CreateQueue(endpoint, name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.createQueueInternalLocked(name, strings.TrimSuffix(endpoint, "/")+"/"+e.opts.AccountID+"/"+name).url
}

func (e *Emulator) getQueueURLLocked(in map[string]json.RawMessage) (any, *sqsError) {
	q, ok := e.sqs.queues[jsonString(in, "QueueName")]
	if !ok {
		return nil, sqsClientErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return map[string]string{"QueueUrl": q.url}, nil
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (e *Emulator) sendMessageLocked(in map[string]json.RawMessage) (any, *sqsError) {
	q, err := e.queueFromURLLocked(in)
	if err != nil {
		return nil, err
	}
	body := jsonString(in, "MessageBody")
	if body == "" {
		return nil, sqsClientErr("MissingParameter", "MissingParameter", "The request must contain the parameter MessageBody.")
	}
	delay, _, err := jsonInt(in, "DelaySeconds")
	if err != nil {
		return nil, err
	}
	if delay < 0 || delay > 900 {
		return nil, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Value %d for parameter DelaySeconds is invalid.", delay)
	}
	id := e.enqueueLocked(q, body, time.Duration(delay)*time.Second)
	return map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(body)}, nil
}

// SendMessage enqueues a message from Go (the simulation's EventBridge); it honours the
// duplicate-delivery fault like the API does.
func (e *Emulator) SendMessage(queueName, body string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.sqs.queues[queueName]
	if !ok {
		return "", fmt.Errorf("queue %q does not exist", queueName)
	}
	return e.enqueueLocked(q, body, 0), nil
}

func (e *Emulator) enqueueLocked(q *sqsQueue, body string, delay time.Duration) string {
	e.seq++
	a := e.rng.Uint64()
	id := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a>>32, a>>16&0xffff, a&0xfff, e.seq&0xfff, e.seq)
	now := time.Now()
	for c := 0; c <= e.faults.SQSDuplicates; c++ {
		q.messages = append(q.messages, &sqsMessage{id: id, body: body, md5: md5Hex(body), sentAt: now, copy: c, visibleAt: now.Add(delay)})
	}
	if delay > 0 {
		e.afterLocked(delay, q.signal)
	}
	q.signal()
	return id
}

type sqsMessageOut struct {
	MessageID     string            `json:"MessageId"`
	ReceiptHandle string            `json:"ReceiptHandle"`
	MD5OfBody     string            `json:"MD5OfBody"`
	Body          string            `json:"Body"`
	Attributes    map[string]string `json:"Attributes,omitempty"`
}

// receiveLocked is called with e.mu held; it releases it while long-polling.
func (e *Emulator) receiveLocked(r *http.Request, in map[string]json.RawMessage) (any, *sqsError) {
	q, err := e.queueFromURLLocked(in)
	if err != nil {
		return nil, err
	}
	maxN, set, err := jsonInt(in, "MaxNumberOfMessages")
	if err != nil {
		return nil, err
	}
	if !set {
		maxN = 1
	}
	if maxN < 1 || maxN > 10 {
		return nil, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", maxN)
	}
	wait, err := jsonSeconds(in, "WaitTimeSeconds", q.waitTime, 20, " Reason: Must be >= 0 and <= 20, if provided.")
	if err != nil {
		return nil, err
	}
	visibility, err := jsonSeconds(in, "VisibilityTimeout", q.visibilityTimeout, 43200, "")
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		now := time.Now()
		var visible []*sqsMessage
		var nextVisible time.Time
		for _, m := range q.messages {
			if !now.Before(m.visibleAt) {
				visible = append(visible, m)
			} else if nextVisible.IsZero() || m.visibleAt.Before(nextVisible) {
				nextVisible = m.visibleAt
			}
		}
		if len(visible) > 0 || !now.Before(deadline) || e.closed {
			if e.faults.SQSReorder {
				e.rng.Shuffle(len(visible), func(i, j int) { visible[i], visible[j] = visible[j], visible[i] })
			}
			if len(visible) > maxN {
				visible = visible[:maxN]
			}
			out := make([]sqsMessageOut, 0, len(visible))
			for _, m := range visible {
				m.receiveCount++
				if m.firstReceived.IsZero() {
					m.firstReceived = now
				}
				m.visibleAt = now.Add(visibility)
				e.seq++
				m.receipt = fmt.Sprintf("emu-%s-%d-%d", m.id, m.copy, e.seq)
				q.receipts[m.receipt] = m
				out = append(out, sqsMessageOut{
					MessageID: m.id, ReceiptHandle: m.receipt, MD5OfBody: m.md5, Body: m.body,
					Attributes: map[string]string{
						"ApproximateReceiveCount":          strconv.Itoa(m.receiveCount),
						"SentTimestamp":                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
						"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceived.UnixMilli(), 10),
					},
				})
				if visibility > 0 {
					// Wake pollers when this message becomes visible again.
					e.afterLocked(visibility, q.signal)
				}
			}
			return map[string]any{"Messages": out}, nil
		}
		wake := q.wake
		timeout := time.Until(deadline)
		if !nextVisible.IsZero() && time.Until(nextVisible) < timeout {
			timeout = time.Until(nextVisible)
		}
		e.mu.Unlock()
		timer := time.NewTimer(max(timeout, 0))
		select {
		case <-wake:
		case <-timer.C:
		case <-r.Context().Done():
		}
		timer.Stop()
		e.mu.Lock()
		if r.Context().Err() != nil {
			return map[string]any{"Messages": []sqsMessageOut{}}, nil
		}
	}
}

// receiptLocked resolves the request's queue and receipt handle to the message it was issued
// for.
func (e *Emulator) receiptLocked(in map[string]json.RawMessage) (q *sqsQueue, m *sqsMessage, handle string, err *sqsError) {
	q, err = e.queueFromURLLocked(in)
	if err != nil {
		return nil, nil, "", err
	}
	handle = jsonString(in, "ReceiptHandle")
	m, ok := q.receipts[handle]
	if !ok {
		return nil, nil, "", sqsClientErr("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle \"%s\" is not a valid receipt handle.", handle)
	}
	return q, m, handle, nil
}

func (e *Emulator) deleteMessageLocked(in map[string]json.RawMessage) (any, *sqsError) {
	q, m, _, err := e.receiptLocked(in)
	if err != nil {
		return nil, err
	}
	for i, qm := range q.messages {
		if qm == m {
			q.messages = append(q.messages[:i], q.messages[i+1:]...)
			break
		}
	}
	return struct{}{}, nil
}

func (e *Emulator) changeVisibilityLocked(in map[string]json.RawMessage) (any, *sqsError) {
	q, m, handle, err := e.receiptLocked(in)
	if err != nil {
		return nil, err
	}
	n, set, err := jsonInt(in, "VisibilityTimeout")
	if err != nil {
		return nil, err
	}
	if !set || n < 0 || n > 43200 {
		return nil, sqsClientErr("InvalidParameterValue", "InvalidParameterValue", "Value for parameter VisibilityTimeout is invalid.")
	}
	if m.receipt != handle {
		return nil, sqsClientErr("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "The message referred to is not in flight.")
	}
	m.visibleAt = time.Now().Add(time.Duration(n) * time.Second)
	if n == 0 {
		q.signal()
	} else {
		e.afterLocked(time.Duration(n)*time.Second, q.signal)
	}
	return struct{}{}, nil
}

func (e *Emulator) getQueueAttributesLocked(in map[string]json.RawMessage) (any, *sqsError) {
	q, err := e.queueFromURLLocked(in)
	if err != nil {
		return nil, err
	}
	visible, inflight := q.countsAt(time.Now())
	return map[string]any{"Attributes": map[string]string{
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inflight),
		"VisibilityTimeout":                     strconv.Itoa(int(q.visibilityTimeout / time.Second)),
		"ReceiveMessageWaitTimeSeconds":         strconv.Itoa(int(q.waitTime / time.Second)),
		"QueueArn":                              "arn:aws:sqs:" + e.opts.Region + ":" + e.opts.AccountID + ":" + q.name,
	}}, nil
}

func (q *sqsQueue) countsAt(now time.Time) (visible, inflight int) {
	for _, m := range q.messages {
		if now.Before(m.visibleAt) {
			inflight++
		} else {
			visible++
		}
	}
	return visible, inflight
}

// QueueDepth returns the number of messages not yet deleted (visible and in flight).
func (e *Emulator) QueueDepth(queueName string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.sqs.queues[queueName]
	if !ok {
		return 0
	}
	return len(q.messages)
}

// QueueNames lists the queues.
func (e *Emulator) QueueNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.sqs.queues))
	for n := range e.sqs.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

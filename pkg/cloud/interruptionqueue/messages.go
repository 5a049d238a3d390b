// Package interruptionqueue reads EC2 interruption events from Lifeboat's own SQS queue, which
// EventBridge rules feed (docs/AWS.md): Spot interruption warnings, rebalance recommendations,
// instance state changes and AWS Health scheduled changes.
//
// Parsing is keyed by the event's (source, detail-type), like karpenter-provider-aws
// pkg/controllers/interruption: an unknown kind is a no-op, an unparsable body is an error (the
// consumer logs, counts and deletes it so it cannot block the queue). Delivery is at least once:
// handlers must tolerate duplicates and reordering.
package interruptionqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind of a message.
type Kind string

const (
	KindSpotInterruption        Kind = "SpotInterruption"
	KindRebalanceRecommendation Kind = "RebalanceRecommendation"
	KindStateChange             Kind = "StateChange"
	KindScheduledChange         Kind = "ScheduledChange"
	// KindNoOp is an event Lifeboat does not act on: an unknown (source, detail-type), a Health
	// event of another service or category, an empty body.
	KindNoOp Kind = "NoOp"
)

// Kinds lists every Kind, for metrics initialisation.
var Kinds = []Kind{KindSpotInterruption, KindRebalanceRecommendation, KindStateChange, KindScheduledChange, KindNoOp}

// EventBridge sources and detail-types (AWS EventBridge schema registry: aws.ec2 and aws.health).
const (
	SourceEC2    = "aws.ec2"
	SourceHealth = "aws.health"

	DetailTypeSpotInterruption        = "EC2 Spot Instance Interruption Warning"
	DetailTypeRebalanceRecommendation = "EC2 Instance Rebalance Recommendation"
	DetailTypeStateChange             = "EC2 Instance State-change Notification"
	DetailTypeHealthEvent             = "AWS Health Event"
)

// Message is one parsed event.
type Message struct {
	Kind Kind
	// EventID is the EventBridge event id; duplicates of one delivery share it.
	EventID    string
	Source     string
	DetailType string
	Account    string
	Region     string
	// Time is when the event happened (EventBridge "time").
	Time        time.Time
	InstanceIDs []string

	// InstanceAction of a Spot interruption: terminate, stop or hibernate.
	InstanceAction string
	// State of a state change: pending, running, stopping, stopped, shutting-down, terminated.
	State string
	// EventTypeCode of a scheduled change, e.g. AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED, and its
	// window.
	EventTypeCode      string
	StartTime, EndTime time.Time

	// SQSMessageID is set by the Consumer.
	SQSMessageID string
}

// envelope is the EventBridge event structure common to all events.
type envelope struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

type key struct{ source, detailType string }

type parseFunc func(env envelope, msg *Message) error

var parsers = map[key]parseFunc{
	{SourceEC2, DetailTypeSpotInterruption}:        parseSpotInterruption,
	{SourceEC2, DetailTypeRebalanceRecommendation}: parseRebalanceRecommendation,
	{SourceEC2, DetailTypeStateChange}:             parseStateChange,
	{SourceHealth, DetailTypeHealthEvent}:          parseHealthEvent,
}

// Parse decodes an SQS message body holding an EventBridge event. An error means the body is not
// an event Lifeboat can trust (the consumer deletes it); the returned message is then a NoOp.
func Parse(body string) (Message, error) {
	noop := Message{Kind: KindNoOp}
	if strings.TrimSpace(body) == "" {
		return noop, nil
	}
	var env envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return noop, fmt.Errorf("not an EventBridge event: %w", err)
	}
	msg := Message{
		Kind:       KindNoOp,
		EventID:    env.ID,
		Source:     env.Source,
		DetailType: env.DetailType,
		Account:    env.Account,
		Region:     env.Region,
	}
	parse, ok := parsers[key{env.Source, env.DetailType}]
	if !ok {
		return msg, nil
	}
	t, err := time.Parse(time.RFC3339, env.Time)
	if err != nil {
		return Message{Kind: KindNoOp}, fmt.Errorf("%s event %q: time %q: %w", env.DetailType, env.ID, env.Time, err)
	}
	msg.Time = t
	if len(env.Detail) == 0 || string(env.Detail) == "null" {
		return Message{Kind: KindNoOp}, fmt.Errorf("%s event %q has no detail", env.DetailType, env.ID)
	}
	if err := parse(env, &msg); err != nil {
		return Message{Kind: KindNoOp}, fmt.Errorf("%s event %q: %w", env.DetailType, env.ID, err)
	}
	return msg, nil
}

// ec2InstanceDetail is the detail of the aws.ec2 events: "instance-id" plus per-kind fields.
type ec2InstanceDetail struct {
	InstanceID     string `json:"instance-id"`
	InstanceAction string `json:"instance-action"`
	State          string `json:"state"`
}

func decodeInstanceDetail(env envelope) (ec2InstanceDetail, error) {
	var d ec2InstanceDetail
	if err := json.Unmarshal(env.Detail, &d); err != nil {
		return d, fmt.Errorf("detail: %w", err)
	}
	if err := validInstanceID(d.InstanceID); err != nil {
		return d, err
	}
	return d, nil
}

func validInstanceID(id string) error {
	if !strings.HasPrefix(id, "i-") || len(id) < 3 || len(id) > 19 {
		return fmt.Errorf("instance-id %q is not an EC2 instance ID", id)
	}
	for _, c := range id[2:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("instance-id %q is not an EC2 instance ID", id)
		}
	}
	return nil
}

func parseSpotInterruption(env envelope, msg *Message) error {
	d, err := decodeInstanceDetail(env)
	if err != nil {
		return err
	}
	switch d.InstanceAction {
	case "terminate", "stop", "hibernate":
	default:
		return fmt.Errorf("instance-action %q is not terminate, stop or hibernate", d.InstanceAction)
	}
	msg.Kind = KindSpotInterruption
	msg.InstanceIDs = []string{d.InstanceID}
	msg.InstanceAction = d.InstanceAction
	return nil
}

func parseRebalanceRecommendation(env envelope, msg *Message) error {
	d, err := decodeInstanceDetail(env)
	if err != nil {
		return err
	}
	msg.Kind = KindRebalanceRecommendation
	msg.InstanceIDs = []string{d.InstanceID}
	return nil
}

var instanceStates = map[string]bool{"pending": true, "running": true, "stopping": true, "stopped": true, "shutting-down": true, "terminated": true}

func parseStateChange(env envelope, msg *Message) error {
	d, err := decodeInstanceDetail(env)
	if err != nil {
		return err
	}
	if !instanceStates[d.State] {
		return fmt.Errorf("state %q is not an EC2 instance state", d.State)
	}
	msg.Kind = KindStateChange
	msg.InstanceIDs = []string{d.InstanceID}
	msg.State = d.State
	return nil
}

// healthDetail is the detail of aws.health "AWS Health Event" (schema aws.health@AWSHealthEvent).
type healthDetail struct {
	EventARN          string `json:"eventArn"`
	Service           string `json:"service"`
	EventTypeCode     string `json:"eventTypeCode"`
	EventTypeCategory string `json:"eventTypeCategory"`
	StartTime         string `json:"startTime"`
	EndTime           string `json:"endTime"`
	AffectedEntities  []struct {
		EntityValue string `json:"entityValue"`
	} `json:"affectedEntities"`
}

// healthTimeLayouts: Health events write times as RFC 1123 ("Wed, 05 Apr 2023 12:00:00 GMT").
var healthTimeLayouts = []string{time.RFC1123, time.RFC1123Z, time.RFC3339}

func parseHealthTime(s string) (time.Time, error) {
	var errs []error
	for _, layout := range healthTimeLayouts {
		t, err := time.Parse(layout, s)
		if err == nil {
			return t, nil
		}
		errs = append(errs, err)
	}
	return time.Time{}, errors.Join(errs...)
}

func parseHealthEvent(env envelope, msg *Message) error {
	var d healthDetail
	if err := json.Unmarshal(env.Detail, &d); err != nil {
		return fmt.Errorf("detail: %w", err)
	}
	// Only EC2 scheduled changes (retirement, maintenance reboots) concern nodes; other Health
	// events are no-ops, as in Karpenter.
	if d.Service != "EC2" || d.EventTypeCategory != "scheduledChange" {
		return nil
	}
	if len(d.AffectedEntities) == 0 {
		return errors.New("scheduled change without affected entities")
	}
	ids := make([]string, 0, len(d.AffectedEntities))
	for _, e := range d.AffectedEntities {
		if err := validInstanceID(e.EntityValue); err != nil {
			// Health lists other resources too (volumes, hosts); keep the instances.
			continue
		}
		ids = append(ids, e.EntityValue)
	}
	if len(ids) == 0 {
		return nil
	}
	msg.Kind = KindScheduledChange
	msg.InstanceIDs = ids
	msg.EventTypeCode = d.EventTypeCode
	if d.StartTime != "" {
		t, err := parseHealthTime(d.StartTime)
		if err != nil {
			return fmt.Errorf("startTime %q: %w", d.StartTime, err)
		}
		msg.StartTime = t
	}
	if d.EndTime != "" {
		t, err := parseHealthTime(d.EndTime)
		if err != nil {
			return fmt.Errorf("endTime %q: %w", d.EndTime, err)
		}
		msg.EndTime = t
	}
	return nil
}

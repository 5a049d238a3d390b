package interruptionqueue

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseSamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Message
	}{
		{"spot-interruption.json", Message{
			Kind: KindSpotInterruption, EventID: "1e5527d7-bb36-4607-3370-4164db56a40e", Source: SourceEC2, DetailType: DetailTypeSpotInterruption,
			Account: "123456789012", Region: "us-east-1", Time: mustTime(t, "2026-11-29T20:57:42Z"),
			InstanceIDs: []string{"i-0b662ef9931388ba0"}, InstanceAction: "terminate",
		}},
		{"rebalance-recommendation.json", Message{
			Kind: KindRebalanceRecommendation, EventID: "5e8e7e6a-4c8a-4b51-a5b4-9f4a0e4b3e11", Source: SourceEC2, DetailType: DetailTypeRebalanceRecommendation,
			Account: "123456789012", Region: "us-east-1", Time: mustTime(t, "2026-11-29T20:41:03Z"),
			InstanceIDs: []string{"i-0a1b2c3d4e5f67890"},
		}},
		{"state-change-stopping.json", Message{
			Kind: KindStateChange, EventID: "7bf73129-1428-4cd3-a780-95db273d1602", Source: SourceEC2, DetailType: DetailTypeStateChange,
			Account: "123456789012", Region: "us-east-1", Time: mustTime(t, "2026-11-29T20:59:44Z"),
			InstanceIDs: []string{"i-abcd1111"}, State: "stopping",
		}},
		{"scheduled-change.json", Message{
			Kind: KindScheduledChange, EventID: "7fb65329-1628-4cf3-a740-95fg457h1402", Source: SourceHealth, DetailType: DetailTypeHealthEvent,
			Account: "123456789012", Region: "us-east-1", Time: mustTime(t, "2026-11-28T06:27:57Z"),
			InstanceIDs:   []string{"i-0123456789abcdef0", "i-0123456789abcdef1"},
			EventTypeCode: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
			StartTime:     mustTime(t, "2026-12-05T06:27:57Z"), EndTime: mustTime(t, "2026-12-05T07:27:57Z"),
		}},
		{"health-other-service.json", Message{
			Kind: KindNoOp, EventID: "3b2a1f0e-9d8c-4b7a-8e6f-5d4c3b2a1f0e", Source: SourceHealth, DetailType: DetailTypeHealthEvent,
			Account: "123456789012", Region: "us-east-1", Time: mustTime(t, "2026-11-28T06:27:57Z"),
		}},
		{"unknown-kind.json", Message{
			Kind: KindNoOp, EventID: "0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f", Source: "aws.autoscaling", DetailType: "EC2 Instance Launch Successful",
			Account: "123456789012", Region: "us-east-1",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(string(body))
			if err != nil {
				t.Fatal(err)
			}
			// Compare instants, not time.Location pointers.
			for _, p := range []*time.Time{&got.Time, &got.StartTime, &got.EndTime, &tc.want.Time, &tc.want.StartTime, &tc.want.EndTime} {
				if !p.IsZero() {
					*p = p.UTC()
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	spot := func(detail string) string {
		return `{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2026-11-29T20:57:42Z","detail":` + detail + `}`
	}
	for name, tc := range map[string]struct {
		body    string
		wantErr bool
	}{
		"empty body":               {"", false},
		"whitespace":               {"  \n", false},
		"not json":                 {"hello", true},
		"json array":               {"[1,2]", true},
		"truncated":                {`{"source":"aws.ec2"`, true},
		"no detail":                {`{"detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2026-11-29T20:57:42Z"}`, true},
		"null detail":              {spot("null"), true},
		"bad time":                 {`{"detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"yesterday","detail":{"instance-id":"i-0abc","instance-action":"terminate"}}`, true},
		"missing instance":         {spot(`{"instance-action":"terminate"}`), true},
		"not an instance":          {spot(`{"instance-id":"vol-0abc","instance-action":"terminate"}`), true},
		"bad action":               {spot(`{"instance-id":"i-0abc","instance-action":"explode"}`), true},
		"detail is a string":       {spot(`"i-0abc"`), true},
		"bad state":                {`{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2026-11-29T20:57:42Z","detail":{"instance-id":"i-0abc","state":"melting"}}`, true},
		"health without entities":  {`{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-29T20:57:42Z","detail":{"service":"EC2","eventTypeCategory":"scheduledChange"}}`, true},
		"health bad start":         {`{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-29T20:57:42Z","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","startTime":"soon","affectedEntities":[{"entityValue":"i-0abc"}]}}`, true},
		"health only volumes":      {`{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-29T20:57:42Z","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"vol-1"}]}}`, false},
		"health issue (not sched)": {`{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-29T20:57:42Z","detail":{"service":"EC2","eventTypeCategory":"issue","affectedEntities":[{"entityValue":"i-0abc"}]}}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			msg, err := Parse(tc.body)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse error %v, want error %v", err, tc.wantErr)
			}
			if (err != nil || strings.Contains(name, "health")) && msg.Kind != KindNoOp {
				t.Errorf("kind %s, want NoOp", msg.Kind)
			}
		})
	}
}

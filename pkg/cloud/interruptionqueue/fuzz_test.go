package interruptionqueue

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bodies to the parser: it must never panic, a body it rejects must
// come back as a NoOp (the consumer deletes it), and every actionable message must name at
// least one well-formed instance.
//
//	go test ./pkg/cloud/interruptionqueue -run '^$' -fuzz FuzzParse -fuzztime 60s
func FuzzParse(f *testing.F) {
	samples, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range samples {
		body, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(body))
	}
	f.Fuzz(func(t *testing.T, body string) {
		msg, err := Parse(body)
		if err != nil {
			if msg.Kind != KindNoOp {
				t.Fatalf("rejected body parsed as %s", msg.Kind)
			}
			return
		}
		switch msg.Kind {
		case KindNoOp:
			return
		case KindSpotInterruption, KindRebalanceRecommendation, KindStateChange, KindScheduledChange:
		default:
			t.Fatalf("unknown kind %q", msg.Kind)
		}
		if len(msg.InstanceIDs) == 0 {
			t.Fatalf("%s without instances", msg.Kind)
		}
		for _, id := range msg.InstanceIDs {
			if err := validInstanceID(id); err != nil {
				t.Fatal(err)
			}
		}
		if msg.Time.IsZero() {
			t.Fatalf("%s without time", msg.Kind)
		}
	})
}

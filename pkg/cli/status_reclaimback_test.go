package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestPrintReclaimBack(t *testing.T) {
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "lifeboat.dev/v1alpha1", "kind": "ReclaimBackPolicy", "metadata": map[string]any{"name": "nightly"},
		"spec": map[string]any{"always": true},
		"status": map[string]any{"fallbackNodes": int64(3), "returnedNodes": int64(2), "onDemandNodeHoursReturned": "5.250",
			"inFlight":   []any{map[string]any{"node": "od-1", "nodePool": "default", "phase": "Surging", "started": "2026-12-02T23:00:00Z"}},
			"conditions": []any{map[string]any{"type": "Blocked", "status": "True", "reason": "MaxInFlight", "message": "1 move(s) in flight, maxInFlight 1", "lastTransitionTime": "2026-12-02T23:00:00Z"}}},
	}}
	var out bytes.Buffer
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
	printReclaimBack(context.Background(), tw, statusDyn(policy))
	_ = tw.Flush()
	for _, want := range []string{"RECLAIM-BACK POLICY", "nightly", "od-1 (Surging)", "5.250", "MaxInFlight: 1 move(s) in flight"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printReclaimBack(context.Background(), tw, statusDyn())
	_ = tw.Flush()
	if out.Len() != 0 {
		t.Errorf("no policy must print nothing, got %q", out.String())
	}
}

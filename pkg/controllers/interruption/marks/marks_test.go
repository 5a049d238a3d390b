package marks

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

const sourceSpot = "sqs/spot-interruption"

func markedBy(source string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Annotations: map[string]string{
		v1alpha1.AnnotationInterruptedAt: "2026-11-29T20:59:00Z", v1alpha1.AnnotationInterruptionSource: source,
	}}}
}

func TestNeeded(t *testing.T) {
	tests := []struct {
		name   string
		node   *corev1.Node
		source string
		want   bool
	}{
		{"unmarked", &corev1.Node{}, sourceSpot, true},
		{"marked by an interruption", markedBy(sourceSpot), SourceKarpenterEvent, false},
		{"a recommendation's mark, then an interruption", markedBy(SourceRebalance), sourceSpot, true},
		{"a recommendation's mark, then its duplicate", markedBy(SourceRebalance), SourceRebalance, false},
	}
	for _, tt := range tests {
		if got := Needed(tt.node, tt.source); got != tt.want {
			t.Errorf("%s: Needed = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMarked(t *testing.T) {
	n := markedBy(SourceRebalance)
	n.Annotations[v1alpha1.AnnotationResumeDecision] = "sb-1"
	at := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	m := Marked(n, sourceSpot, at)
	if n.Annotations[v1alpha1.AnnotationInterruptionSource] != SourceRebalance {
		t.Fatal("Marked changed its input")
	}
	if Same(m, n) || !AwaitsDecision(m) || len(m.Spec.Taints) != 1 || m.Spec.Taints[0].Key != v1alpha1.TaintInterrupted {
		t.Fatalf("marked copy %+v", m)
	}
	if again := Marked(m, sourceSpot, at); !Same(again, m) || len(again.Spec.Taints) != 1 {
		t.Fatalf("marking twice: %+v", again)
	}
}

package reclaimplan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLastICE(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	ev := func(kind, name, reason string, at time.Time) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(at.Add(-time.Minute))},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name}, Reason: reason, LastTimestamp: metav1.NewTime(at)}
	}
	series := ev("NodeClaim", "default-q8k2z", ReasonKarpenterICE, t0)
	series.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(t0.Add(5 * time.Minute))}
	tests := []struct {
		name   string
		events []corev1.Event
		pool   string
		want   time.Time
	}{
		{"none", nil, "default", time.Time{}},
		{"the latest of the pool's", []corev1.Event{
			ev("NodeClaim", "default-abcde", ReasonKarpenterICE, t0),
			ev("NodeClaim", "default-fghij", ReasonKarpenterICE, t0.Add(2*time.Minute)),
		}, "default", t0.Add(2 * time.Minute)},
		{"another NodePool's, even one whose name starts with this one", []corev1.Event{
			ev("NodeClaim", "batch-abcde", ReasonKarpenterICE, t0),
			ev("NodeClaim", "default-gpu-abcde", ReasonKarpenterICE, t0),
		}, "default", time.Time{}},
		{"another reason or kind", []corev1.Event{
			ev("NodeClaim", "default-abcde", "Launched", t0),
			ev("Pod", "default-abcde", ReasonKarpenterICE, t0),
		}, "default", time.Time{}},
		{"a series counts its last observation", []corev1.Event{series}, "default", t0.Add(5 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LastICE(tt.events, tt.pool); !got.Equal(tt.want) {
				t.Errorf("LastICE = %s, want %s", got, tt.want)
			}
		})
	}
}

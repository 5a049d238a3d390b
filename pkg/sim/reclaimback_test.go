package sim

import (
	"testing"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// The run's relative window becomes a UTC window the controller's own arithmetic opens at
// t0 + after (rounded up to the minute) and closes `for` later, also across midnight.
func TestReclaimBackPolicyWindow(t *testing.T) {
	rel := func(after, dur time.Duration) *scenario.ReclaimBack {
		rb := &scenario.ReclaimBack{Window: &scenario.RelativeWindow{After: scenario.Duration{Duration: after}, For: scenario.Duration{Duration: dur}}}
		rb.MinPlacementScore, rb.MaxInFlight = 7, "2"
		return rb
	}
	tests := []struct {
		name      string
		rb        *scenario.ReclaimBack
		t0        time.Time
		wantOpen  time.Time
		wantStart string
		wantDay   string
	}{
		{"rounded up to the minute", rel(9*time.Minute, 8*time.Minute), time.Date(2026, 12, 3, 5, 40, 12, 0, time.UTC),
			time.Date(2026, 12, 3, 5, 50, 0, 0, time.UTC), "05:50", "Thu"},
		{"on the minute stays", rel(2*time.Minute, time.Hour), time.Date(2026, 12, 3, 5, 40, 0, 0, time.UTC),
			time.Date(2026, 12, 3, 5, 42, 0, 0, time.UTC), "05:42", "Thu"},
		{"crosses midnight", rel(5*time.Minute, 10*time.Minute), time.Date(2026, 12, 7, 0, 52, 30, 0, time.FixedZone("CET", 3600)),
			time.Date(2026, 12, 6, 23, 58, 0, 0, time.UTC), "23:58", "Sun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, open, close := reclaimBackPolicy(tt.rb, tt.t0)
			if !open.Equal(tt.wantOpen) || !close.Equal(open.Add(tt.rb.Window.For.Duration)) {
				t.Fatalf("window %s–%s, want open %s", open, close, tt.wantOpen)
			}
			w := p.Spec.Windows
			if p.Spec.Always || len(w) != 1 || w[0].Start != tt.wantStart || w[0].Days[0] != tt.wantDay || w[0].TimeZone != "UTC" {
				t.Fatalf("spec = %+v", p.Spec)
			}
			if p.Spec.MaxInFlight.String() != "2" || p.Spec.MinPlacementScore != 7 || p.Spec.NodePools.Names[0] != "default" {
				t.Errorf("spec = %+v", p.Spec)
			}
			sched, err := reclaimplan.ScheduleOf(p.Spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				at   time.Time
				want bool
			}{{open.Add(-time.Second), false}, {open, true}, {close.Add(-time.Second), true}, {close.Add(time.Second), false}} {
				if got, _, _ := sched.Open(c.at); got != c.want {
					t.Errorf("open at %s = %v, want %v", c.at, got, c.want)
				}
			}
		})
	}
	p, open, _ := reclaimBackPolicy(&scenario.ReclaimBack{MaxInFlight: "1", MinPlacementScore: 7}, time.Now())
	if !p.Spec.Always || len(p.Spec.Windows) != 0 || !open.IsZero() {
		t.Errorf("no window: spec %+v, open %s; want always", p.Spec, open)
	}
}

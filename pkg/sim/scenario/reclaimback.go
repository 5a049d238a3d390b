package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ReclaimBack runs Lifeboat's reclaim-back in lifeboat mode (docs/RECLAIMBACK.md): at t0 the
// run creates a ReclaimBackPolicy for the default NodePool from these fields, so the On-Demand
// nodes Karpenter falls back to during an ice event are moved back to Spot once the pools
// recover. Baseline mode has no reclaim-back (Karpenter alone keeps them).
type ReclaimBack struct {
	// Window is when moves may start, relative to t0; omitted: always.
	Window *RelativeWindow `yaml:"window,omitempty"`
	// MinSpotStability: no Spot interruption of the NodePool's types for this long (default 1m;
	// the product's default is 30m).
	MinSpotStability Duration `yaml:"minSpotStability,omitempty"`
	// MinPlacementScore is the EC2 Spot placement score needed in every zone (default 7).
	MinPlacementScore int `yaml:"minPlacementScore,omitempty"`
	// MaxInFlight is the number of nodes (or a percentage of the fallback nodes) moving at once
	// (default "1").
	MaxInFlight string `yaml:"maxInFlight,omitempty"`
	// MoveTimeout undoes a move not finished by then (default 5m).
	MoveTimeout Duration `yaml:"moveTimeout,omitempty"`
	// CoolDown is the first wait after a failed move (default 1m; doubles up to 8×).
	CoolDown Duration `yaml:"coolDown,omitempty"`
}

// RelativeWindow is a maintenance window on the run's clock: it opens After t0 and lasts For.
// The run writes it into the policy as a UTC window of today (start rounded up to the minute).
type RelativeWindow struct {
	After Duration `yaml:"after"`
	For   Duration `yaml:"for"`
}

func (r *ReclaimBack) applyDefaults() {
	if r.MinSpotStability.Duration == 0 {
		r.MinSpotStability.Duration = time.Minute
	}
	if r.MinPlacementScore == 0 {
		r.MinPlacementScore = 7
	}
	if r.MaxInFlight == "" {
		r.MaxInFlight = "1"
	}
	if r.MoveTimeout.Duration == 0 {
		r.MoveTimeout.Duration = 5 * time.Minute
	}
	if r.CoolDown.Duration == 0 {
		r.CoolDown.Duration = time.Minute
	}
}

// validate checks reclaimBack against the run's duration and modes.
func (r *ReclaimBack) validate(p *problems, s *Scenario) {
	if w := r.Window; w != nil {
		if w.After.Duration < 0 || w.After.Duration >= s.Duration.Duration {
			p.bad("reclaimBack.window.after", "must be within the scenario's duration (%s)", s.Duration)
		}
		if w.For.Duration < time.Minute {
			p.bad("reclaimBack.window.for", "must be at least 1m (windows have minute granularity)")
		}
	}
	if r.MinSpotStability.Duration < 0 {
		p.bad("reclaimBack.minSpotStability", "must be ≥ 0")
	}
	if r.MinPlacementScore < 1 || r.MinPlacementScore > 10 {
		p.bad("reclaimBack.minPlacementScore", "want a score from 1 to 10, got %d", r.MinPlacementScore)
	}
	if !validInFlight(r.MaxInFlight) {
		p.bad("reclaimBack.maxInFlight", "want a count ≥ 1 or a percentage such as \"10%%\", got %q", r.MaxInFlight)
	}
	if r.MoveTimeout.Duration <= 0 || r.CoolDown.Duration <= 0 {
		p.bad("reclaimBack", "moveTimeout and coolDown must be > 0")
	}
	hasLifeboat := false
	for _, m := range s.Modes {
		hasLifeboat = hasLifeboat || m == ModeLifeboat
	}
	if !hasLifeboat {
		p.bad("reclaimBack", "needs the lifeboat mode (reclaim-back is Lifeboat's controller)")
	}
}

func validInFlight(v string) bool {
	n, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
	return err == nil && n >= 1 && (!strings.HasSuffix(v, "%") || n <= 100)
}

// PlacementScore is the Spot placement score an ice event's pools have during the crunch
// (default 1), or the score a placement-score event sets.
func (e Event) PlacementScore() int {
	if e.Score == 0 && e.Kind == EventICE {
		return 1
	}
	return e.Score
}

func (e Event) validateScore(p *problems, f string) {
	switch {
	case e.Kind == EventPlacementScore && (e.Score < 1 || e.Score > 10):
		p.bad(f+".score", "want a Spot placement score from 1 to 10 for a placement-score event, got %d", e.Score)
	case e.Kind == EventICE && e.Score != 0 && (e.Score < 1 || e.Score > 10):
		p.bad(f+".score", "want a Spot placement score from 1 to 10, got %d", e.Score)
	case e.Kind != EventICE && e.Kind != EventPlacementScore && e.Score != 0:
		p.bad(f+".score", "only ice and placement-score events take a score")
	}
}

// String is how reports name the policy's knobs.
func (r *ReclaimBack) String() string {
	w := "always"
	if r.Window != nil {
		w = fmt.Sprintf("t0+%s for %s", r.Window.After, r.Window.For)
	}
	return fmt.Sprintf("window %s, minSpotStability %s, minPlacementScore %d, maxInFlight %s", w, r.MinSpotStability, r.MinPlacementScore, r.MaxInFlight)
}

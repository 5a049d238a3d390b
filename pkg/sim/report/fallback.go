package report

import (
	"fmt"
	"time"
)

// HoursPerMonth turns an hourly price into a monthly one (365 × 24 / 12).
const HoursPerMonth = 730

// SavingsBackPoints is how close to its pre-crunch value the Spot savings rate must come for
// the fleet to count as back on Spot (5 percentage points).
const SavingsBackPoints = 0.05

// FallbackResult is a mode's On-Demand fallback capacity around a capacity crunch (runs with
// an "ice" marker): how far the Spot savings rate fell and whether it came back.
type FallbackResult struct {
	// Savings rate of the running nodes: mean before the crunch began, and mean over the run's
	// last minute.
	SavingsRateBefore float64 `json:"savings_rate_before_crunch"`
	SavingsRateEnd    float64 `json:"savings_rate_end"`
	// SavingsBackAtSeconds is when (since t0), after the crunch ended, the savings rate came
	// back within SavingsBackPoints of SavingsRateBefore and stayed there to the end; -1 when it
	// did not.
	SavingsBackAtSeconds float64 `json:"savings_back_at_seconds"`
	// Karpenter's On-Demand nodes: the most at once, at the end, and node-hours from the end of
	// the crunch to the end of the run.
	OnDemandNodesPeak            int     `json:"ondemand_nodes_peak"`
	OnDemandNodesEnd             int     `json:"ondemand_nodes_end"`
	OnDemandNodeHoursAfterCrunch float64 `json:"ondemand_node_hours_after_crunch"`
	// OnDemandDollarsPerHourEnd is what Karpenter's On-Demand nodes cost an hour at the end.
	OnDemandDollarsPerHourEnd float64 `json:"ondemand_dollars_per_hour_end"`
}

// ReclaimBackResult compares the fallback capacity of the baseline and the lifeboat mode.
type ReclaimBackResult struct {
	// NodesReturned: On-Demand nodes at the end, Karpenter alone minus Lifeboat.
	NodesReturned int `json:"nodes_returned"`
	// NodeHoursReturned: On-Demand node-hours after the crunch, Karpenter alone minus Lifeboat
	// (this run's length only: Karpenter alone keeps its nodes past the run).
	NodeHoursReturned float64 `json:"ondemand_node_hours_returned"`
	// DollarsPerMonth is what the returned nodes save a month: the On-Demand hourly price of
	// the difference at the end, less its Spot price (the scenario's spotDiscount), × 730 h.
	DollarsPerMonth float64 `json:"dollars_per_month"`
	// Window is when reclaim-back could move nodes, since t0 (close −1: always open).
	WindowOpenSeconds  float64 `json:"window_open_seconds"`
	WindowCloseSeconds float64 `json:"window_close_seconds"`
}

// markerAt is the time of the first marker of kind; false when there is none.
func markerAt(ms []Marker, kind string) (time.Duration, bool) {
	at, found := time.Duration(0), false
	for _, m := range ms {
		if m.Kind == kind && (!found || m.At < at) {
			at, found = m.At, true
		}
	}
	return at, found
}

// summarizeFallback computes the FallbackResult of a run with a crunch; nil without one.
func summarizeFallback(r *Run) *FallbackResult {
	iceAt, ok := markerAt(r.Markers, "ice")
	if !ok || len(r.Samples) == 0 {
		return nil
	}
	iceEnd, ended := markerAt(r.Markers, "ice-end")
	end := r.Samples[len(r.Samples)-1].At
	step := r.Interval.Seconds()
	if step <= 0 {
		step = 1
	}
	f := &FallbackResult{SavingsBackAtSeconds: -1}
	var before, last float64
	var nBefore, nLast int
	for _, s := range r.Samples {
		od := s.Nodes["karpenter-on-demand"]
		f.OnDemandNodesPeak = max(f.OnDemandNodesPeak, od)
		if s.At < iceAt {
			before += s.Savings
			nBefore++
		}
		if s.At >= end-time.Minute {
			last += s.Savings
			nLast++
		}
		if ended && s.At >= iceEnd {
			f.OnDemandNodeHoursAfterCrunch += float64(od) * step / 3600
		}
	}
	final := r.Samples[len(r.Samples)-1]
	f.OnDemandNodesEnd, f.OnDemandDollarsPerHourEnd = final.Nodes["karpenter-on-demand"], round4(final.OnDemandHourly)
	if nBefore > 0 {
		f.SavingsRateBefore = round4(before / float64(nBefore))
	}
	f.SavingsRateEnd = round4(last / float64(max(nLast, 1)))
	f.OnDemandNodeHoursAfterCrunch = round4(f.OnDemandNodeHoursAfterCrunch)
	if ended && nBefore > 0 {
		back := time.Duration(-1)
		for _, s := range r.Samples {
			if s.At < iceEnd {
				continue
			}
			switch {
			case s.Savings < f.SavingsRateBefore-SavingsBackPoints:
				back = -1
			case back < 0:
				back = s.At
			}
		}
		if back >= 0 {
			f.SavingsBackAtSeconds = round(back.Seconds())
		}
	}
	return f
}

// reclaimBack compares the modes' fallback capacity; nil unless both ran with a crunch.
func (rep *Report) reclaimBack() *ReclaimBackResult {
	base, lb := rep.Modes["baseline"], rep.Modes["lifeboat"]
	if base == nil || lb == nil || base.Fallback == nil || lb.Fallback == nil {
		return nil
	}
	b, l := base.Fallback, lb.Fallback
	res := &ReclaimBackResult{
		NodesReturned:      b.OnDemandNodesEnd - l.OnDemandNodesEnd,
		NodeHoursReturned:  round4(b.OnDemandNodeHoursAfterCrunch - l.OnDemandNodeHoursAfterCrunch),
		DollarsPerMonth:    round2((b.OnDemandDollarsPerHourEnd - l.OnDemandDollarsPerHourEnd) * (1 - rep.SpotPriceRatio) * HoursPerMonth),
		WindowOpenSeconds:  -1,
		WindowCloseSeconds: -1,
	}
	if at, ok := markerAt(lb.Markers, "reclaim-back"); ok {
		res.WindowOpenSeconds = round(at.Seconds())
	}
	if at, ok := markerAt(lb.Markers, "reclaim-back-end"); ok {
		res.WindowCloseSeconds = round(at.Seconds())
	}
	return res
}

// fallbackOutcome is the report's first lines about a crunch: the savings rate before and
// after in both modes, and what reclaim-back returned.
func (rep *Report) fallbackOutcome() []string {
	rb := rep.reclaimBack()
	if rb == nil {
		return nil
	}
	b, l := rep.Modes["baseline"].Fallback, rep.Modes["lifeboat"].Fallback
	back := "not back within 5 points by the end"
	if l.SavingsBackAtSeconds >= 0 {
		back = fmt.Sprintf("back within 5 points at t0+%.0fs", l.SavingsBackAtSeconds)
		if rb.WindowCloseSeconds >= 0 {
			within := "inside"
			if l.SavingsBackAtSeconds > rb.WindowCloseSeconds {
				within = "after"
			}
			back += fmt.Sprintf(" (%s the reclaim-back window t0+%.0fs–%.0fs)", within, rb.WindowOpenSeconds, rb.WindowCloseSeconds)
		}
	}
	return []string{
		fmt.Sprintf("Spot savings rate: %.0f%% before the crunch; at the end Lifeboat %.0f%%, %s; Karpenter alone %.0f%%",
			100*l.SavingsRateBefore, 100*l.SavingsRateEnd, back, 100*b.SavingsRateEnd),
		fmt.Sprintf("On-Demand fallback nodes at the end: Lifeboat %d, Karpenter alone %d: reclaim-back returned %d to Spot (%.2f On-Demand node-hours in this run; $%.2f a month at these prices)",
			l.OnDemandNodesEnd, b.OnDemandNodesEnd, rb.NodesReturned, rb.NodeHoursReturned, rb.DollarsPerMonth),
	}
}

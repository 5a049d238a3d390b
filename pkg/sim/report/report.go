// Package report turns the samples a simulation run collects into the figures users compare
// (report.json, documented in docs/SIMULATION.md), a self-contained HTML page with inline SVG
// charts, and a plain-text table.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Sample is what the observers saw at one instant of a run.
type Sample struct {
	At        time.Duration    // since the run's start
	Workloads map[string]int32 // "<ns>/<name>" → ready replicas
	Nodes     map[string]int   // node kind → count (see NodeKinds)
	Pending   int              // Pods Pending
}

// NodeKinds are the node series the observers count.
var NodeKinds = []string{"karpenter-spot", "karpenter-on-demand", "lifeboat-standby", "lifeboat-active", "lifeboat-draining", "other"}

// Marker is an event on the time axis (a notice, a reclaim, a resume, a handoff).
type Marker struct {
	At    time.Duration `json:"at_seconds"`
	Kind  string        `json:"kind"`
	Label string        `json:"label"`
}

// WorkloadInfo is what the run knows of a workload besides samples.
type WorkloadInfo struct {
	Replicas  int32
	PDBFloor  int32
	Protected bool
	Killed    int // Pods still running on a node at its reclaim
}

// Run is one mode's raw results.
type Run struct {
	Mode      string
	Interval  time.Duration // sampling interval (1 s)
	Samples   []Sample
	Markers   []Marker
	Workloads map[string]WorkloadInfo

	KarpenterLaunched         int
	LifeboatResumed           int
	LifeboatActiveNodeSeconds float64
	LifeboatDollars           float64
	OverprovisioningDollars   float64
}

// Report is report.json. Field names are stable: other tools read them.
type Report struct {
	Scenario  string                 `json:"scenario"`
	Generated time.Time              `json:"generated"`
	Shortened []string               `json:"shortened,omitempty"`
	Modes     map[string]*ModeResult `json:"modes"`
}

// ModeResult holds one mode's figures.
type ModeResult struct {
	Workloads map[string]*WorkloadResult `json:"workloads"`
	Nodes     NodeResult                 `json:"nodes"`
	Cost      CostResult                 `json:"cost"`
	Markers   []Marker                   `json:"markers,omitempty"`
}

// WorkloadResult holds one workload's availability figures.
type WorkloadResult struct {
	Replicas          int32   `json:"replicas"`
	PDBFloor          int32   `json:"pdb_floor"`
	MinReady          int32   `json:"min_ready"`
	SecondsBelowFloor float64 `json:"seconds_below_floor"`
	SecondsZeroReady  float64 `json:"seconds_zero_ready"`
	// RecoverySeconds runs from the first notice until ready replicas are back to the desired
	// count for good (0 when they never dropped; until the run's end when they never came back).
	RecoverySeconds     float64 `json:"recovery_seconds"`
	PodsKilledAtReclaim int     `json:"pods_killed_at_reclaim"`
	Protected           bool    `json:"protected"`
}

// NodeResult counts nodes.
type NodeResult struct {
	KarpenterLaunched         int     `json:"karpenter_launched"`
	LifeboatResumed           int     `json:"lifeboat_resumed"`
	LifeboatActiveNodeSeconds float64 `json:"lifeboat_active_node_seconds"`
}

// CostResult estimates what each protection costs for the run's duration.
type CostResult struct {
	LifeboatDollars         float64 `json:"lifeboat_dollars"`
	OverprovisioningDollars float64 `json:"overprovisioning_dollars"`
}

// Summarize computes a mode's figures from its samples.
func Summarize(r *Run) *ModeResult {
	res := &ModeResult{
		Workloads: map[string]*WorkloadResult{},
		Nodes: NodeResult{
			KarpenterLaunched:         r.KarpenterLaunched,
			LifeboatResumed:           r.LifeboatResumed,
			LifeboatActiveNodeSeconds: round(r.LifeboatActiveNodeSeconds),
		},
		Cost:    CostResult{LifeboatDollars: round4(r.LifeboatDollars), OverprovisioningDollars: round4(r.OverprovisioningDollars)},
		Markers: r.Markers,
	}
	firstNotice := time.Duration(-1)
	for _, m := range r.Markers {
		if m.Kind == "notice" && (firstNotice < 0 || m.At < firstNotice) {
			firstNotice = m.At
		}
	}
	step := r.Interval.Seconds()
	if step <= 0 {
		step = 1
	}
	for name, info := range r.Workloads {
		w := &WorkloadResult{Replicas: info.Replicas, PDBFloor: info.PDBFloor, MinReady: info.Replicas,
			PodsKilledAtReclaim: info.Killed, Protected: info.Protected}
		lastShort := time.Duration(-1)
		for _, s := range r.Samples {
			ready := s.Workloads[name]
			if firstNotice >= 0 && s.At < firstNotice {
				continue // the start-up ramp is not an outage
			}
			if ready < w.MinReady {
				w.MinReady = ready
			}
			if ready < info.PDBFloor {
				w.SecondsBelowFloor += step
			}
			if ready == 0 {
				w.SecondsZeroReady += step
			}
			if ready < info.Replicas {
				lastShort = s.At
			}
		}
		if firstNotice >= 0 && lastShort >= 0 {
			end := lastShort + r.Interval
			w.RecoverySeconds = round((end - firstNotice).Seconds())
		}
		if firstNotice < 0 {
			w.MinReady = minReady(r.Samples, name, info.Replicas)
		}
		res.Workloads[name] = w
	}
	return res
}

func minReady(samples []Sample, name string, def int32) int32 {
	m := def
	for _, s := range samples {
		if v := s.Workloads[name]; v < m {
			m = v
		}
	}
	return m
}

func round(f float64) float64  { return float64(int64(f*10+0.5)) / 10 }
func round4(f float64) float64 { return float64(int64(f*10000+0.5)) / 10000 }

// New builds a report from every mode's run.
func New(scenario string, shortened []string, runs []*Run) *Report {
	rep := &Report{Scenario: scenario, Generated: time.Now().UTC(), Shortened: shortened, Modes: map[string]*ModeResult{}}
	for _, r := range runs {
		rep.Modes[r.Mode] = Summarize(r)
	}
	return rep
}

// WriteJSON writes report.json.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// ModeNames returns the modes in a stable order: baseline first.
func (rep *Report) ModeNames() []string {
	var names []string
	for m := range rep.Modes {
		names = append(names, m)
	}
	order := map[string]int{"baseline": 0, "lifeboat": 1, "overprovisioning": 2}
	sort.Slice(names, func(i, j int) bool {
		oi, iok := order[names[i]]
		oj, jok := order[names[j]]
		if iok && jok {
			return oi < oj
		}
		if iok != jok {
			return iok
		}
		return names[i] < names[j]
	})
	return names
}

// WriteTable writes the side-by-side plain-text table.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario %s\n", rep.Scenario)
	for _, s := range rep.Shortened {
		fmt.Fprintf(tw, "  shortened for the demo: %s\n", s)
	}
	fmt.Fprintln(tw, "MODE\tWORKLOAD\tREPLICAS\tPDB FLOOR\tMIN READY\tBELOW FLOOR (s)\tZERO READY (s)\tRECOVERY (s)\tKILLED AT RECLAIM")
	for _, m := range rep.ModeNames() {
		res := rep.Modes[m]
		var names []string
		for n := range res.Workloads {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			wr := res.Workloads[n]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%d\n", m, n, wr.Replicas, wr.PDBFloor, wr.MinReady,
				wr.SecondsBelowFloor, wr.SecondsZeroReady, wr.RecoverySeconds, wr.PodsKilledAtReclaim)
		}
	}
	fmt.Fprintln(tw, "MODE\tKARPENTER NODES\tLIFEBOAT RESUMED\tLIFEBOAT NODE-SECONDS\tLIFEBOAT $\tOVERPROVISIONING $")
	for _, m := range rep.ModeNames() {
		res := rep.Modes[m]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.4f\t%.4f\n", m, res.Nodes.KarpenterLaunched, res.Nodes.LifeboatResumed,
			res.Nodes.LifeboatActiveNodeSeconds, res.Cost.LifeboatDollars, res.Cost.OverprovisioningDollars)
	}
	return tw.Flush()
}

// String renders the table.
func (rep *Report) String() string {
	var b strings.Builder
	_ = rep.WriteTable(&b)
	return b.String()
}

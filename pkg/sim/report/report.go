// Package report turns the samples a simulation run collects into the figures users compare
// (report.json, documented in docs/SIMULATION.md), a self-contained HTML page with inline SVG
// charts, and a plain-text table.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
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
	// Savings is 1 − (hourly price of the running nodes) / (their On-Demand price): the Spot
	// savings rate at that instant (0 when no node runs).
	Savings float64
	// OnDemandHourly is the hourly price of Karpenter's On-Demand nodes.
	OnDemandHourly float64
	// Overcommitted is the number of nodes whose bound Pods request more than the node holds
	// (a real kubelet would have rejected some of them; KWOK runs them).
	Overcommitted int
}

// NodeKinds are the node series the observers count.
var NodeKinds = []string{"karpenter-spot", "karpenter-on-demand", "lifeboat-standby", "lifeboat-active", "lifeboat-draining", "other"}

// Marker is an event on the time axis (a notice, a reclaim, a resume, a handoff).
type Marker struct {
	At    time.Duration
	Kind  string
	Label string
}

type markerJSON struct {
	AtSeconds float64 `json:"at_seconds"`
	Kind      string  `json:"kind"`
	Label     string  `json:"label"`
}

// MarshalJSON writes the time as seconds since t0 (at_seconds).
func (m Marker) MarshalJSON() ([]byte, error) {
	return json.Marshal(markerJSON{AtSeconds: m.At.Seconds(), Kind: m.Kind, Label: m.Label})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Marker) UnmarshalJSON(b []byte) error {
	var j markerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = Marker{At: time.Duration(j.AtSeconds * float64(time.Second)), Kind: j.Kind, Label: j.Label}
	return nil
}

// WorkloadInfo is what the run knows of a workload besides samples.
type WorkloadInfo struct {
	Replicas  int32
	PDBFloor  int32
	Protected bool
	Killed    int // Pods still running on a node at its reclaim
	Noticed   int // Pods on a node when its notice came (the workload's exposure)
	// NodesAtStart: nodes running the workload's Pods at t0; SharedNodesAtStart: those of
	// them running another workload's Pods too (the starting layout; scenario.Ramp).
	NodesAtStart, SharedNodesAtStart int
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
	// Monthly projection (see scenario.Cost).
	RunsPerMonth                    float64
	LifeboatDollarsPerMonth         float64
	OverprovisioningDollarsPerMonth float64

	// Resumes are the lifeboat nodes resumed during the run, with their timings.
	Resumes []Resume
	// KarpenterBoots: for each of Karpenter's Nodes created since t0, creation → Ready.
	KarpenterBoots []time.Duration
}

// Resume is one lifeboat node's resume, timed from the notice of the node it was resumed for.
type Resume struct {
	Node string
	// ToStartRequested: notice → StartInstances returned; ToReady: notice → Node Ready.
	// Negative when unknown.
	ToStartRequested, ToReady time.Duration
}

// Report is report.json. Field names are stable: other tools read them.
type Report struct {
	Scenario  string                 `json:"scenario"`
	Generated time.Time              `json:"generated"`
	Shortened []string               `json:"shortened,omitempty"`
	Modes     map[string]*ModeResult `json:"modes"`
	// SpotPriceRatio is the scenario's Spot price as a fraction of On-Demand (spotDiscount).
	SpotPriceRatio float64 `json:"spot_price_ratio,omitempty"`
	// ReclaimBack compares the On-Demand fallback capacity of both modes after a crunch
	// (fallback.go); omitted without one.
	ReclaimBack *ReclaimBackResult `json:"reclaim_back,omitempty"`
	// Regressions compares every workload present in both the baseline and the lifeboat mode
	// (see Worse): empty when Lifeboat did no workload harm, omitted unless both modes ran.
	Regressions []Regression `json:"regressions,omitzero"`
}

// ModeResult holds one mode's figures.
type ModeResult struct {
	Workloads map[string]*WorkloadResult `json:"workloads"`
	Nodes     NodeResult                 `json:"nodes"`
	Cost      CostResult                 `json:"cost"`
	Markers   []Marker                   `json:"markers,omitempty"`
	// Fallback is the On-Demand fallback capacity around a capacity crunch (fallback.go).
	Fallback *FallbackResult `json:"fallback,omitempty"`
}

// WorkloadResult holds one workload's availability figures.
type WorkloadResult struct {
	Replicas          int32   `json:"replicas"`
	PDBFloor          int32   `json:"pdb_floor"`
	MinReady          int32   `json:"min_ready"`
	SecondsBelowFloor float64 `json:"seconds_below_floor"`
	SecondsZeroReady  float64 `json:"seconds_zero_ready"`
	// SecondsBelowReplicas is the time with ready < replicas; ReplicaSecondsLost the area
	// between the desired and the ready count over that time (replicas × seconds: 3 replicas
	// missing for 10 s is 30).
	SecondsBelowReplicas float64 `json:"seconds_below_replicas"`
	ReplicaSecondsLost   float64 `json:"replica_seconds_lost"`
	// RecoverySeconds runs from the first notice until ready replicas are back to the desired
	// count for good (0 when they never dropped; until the run's end when they never came back).
	RecoverySeconds     float64 `json:"recovery_seconds"`
	PodsKilledAtReclaim int     `json:"pods_killed_at_reclaim"`
	// PodsNoticed counts the workload's Pods on a node when its notice came: how hard the
	// market hit it. Modes compare like for like only where it is equal (see ExposureDiffers).
	PodsNoticed int `json:"pods_noticed"`
	// NodesAtStart counts the nodes running the workload's Pods at t0, SharedNodesAtStart
	// those of them running another workload's Pods too: how the ramp laid the cluster out in
	// this mode. Where they differ much between modes, so does the free room the workload's
	// replacements find with its image cached (scenario field ramp).
	NodesAtStart       int  `json:"nodes_at_start"`
	SharedNodesAtStart int  `json:"shared_nodes_at_start"`
	Protected          bool `json:"protected"`
}

// NodeResult counts nodes.
type NodeResult struct {
	KarpenterLaunched         int     `json:"karpenter_launched"`
	LifeboatResumed           int     `json:"lifeboat_resumed"`
	LifeboatActiveNodeSeconds float64 `json:"lifeboat_active_node_seconds"`
	// OvercommittedNodesPeak is the most nodes at once whose bound Pods requested more than the
	// node holds (Sample.Overcommitted). Not 0 means the run is not faithful: a real kubelet
	// rejects the overflowing Pods (OutOfcpu, OutOfpods), KWOK runs them.
	OvercommittedNodesPeak int `json:"overcommitted_nodes_peak"`
	// Resume latency over the resumed lifeboat nodes, from the market's notice for the node
	// each was resumed for: to StartInstances returned, and to the Node Ready (lifeboat mode).
	ResumeStartP50Seconds float64 `json:"resume_notice_to_start_p50_seconds,omitempty"`
	ResumeStartP99Seconds float64 `json:"resume_notice_to_start_p99_seconds,omitempty"`
	ResumeReadyP50Seconds float64 `json:"resume_notice_to_ready_p50_seconds,omitempty"`
	ResumeReadyP99Seconds float64 `json:"resume_notice_to_ready_p99_seconds,omitempty"`
	// KarpenterBootP50Seconds: median creation → Ready of Karpenter's Nodes created since t0,
	// the boot the harness simulates. Above the scenario's karpenterBoot, or apart between the
	// modes, it shows the machine's lag (Cautions).
	KarpenterBootP50Seconds float64 `json:"karpenter_boot_p50_seconds,omitempty"`
	// KarpenterBoots: how many of Karpenter's Nodes the median is over.
	KarpenterBoots int `json:"karpenter_boots,omitempty"`
}

// CostResult estimates what each protection costs: for the run's duration, and projected over
// a month (the comparison that matters: a warm pool pays EBS while it waits, balloons pay
// running nodes).
type CostResult struct {
	LifeboatDollars                 float64 `json:"lifeboat_dollars"`
	OverprovisioningDollars         float64 `json:"overprovisioning_dollars"`
	RunsPerMonth                    float64 `json:"runs_per_month,omitempty"`
	LifeboatDollarsPerMonth         float64 `json:"lifeboat_dollars_per_month,omitempty"`
	OverprovisioningDollarsPerMonth float64 `json:"overprovisioning_dollars_per_month,omitempty"`
	// Spot savings rate of the running nodes against On-Demand, over the run: mean and lowest
	// (regional-crunch shows it fall while Karpenter falls back to On-Demand).
	SavingsRateMean float64 `json:"savings_rate_mean"`
	SavingsRateMin  float64 `json:"savings_rate_min"`
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
		Cost: CostResult{LifeboatDollars: round4(r.LifeboatDollars), OverprovisioningDollars: round4(r.OverprovisioningDollars),
			RunsPerMonth: r.RunsPerMonth, LifeboatDollarsPerMonth: round2(r.LifeboatDollarsPerMonth),
			OverprovisioningDollarsPerMonth: round2(r.OverprovisioningDollarsPerMonth)},
		Markers:  r.Markers,
		Fallback: summarizeFallback(r),
	}
	if len(r.Samples) > 0 {
		sum, lowest := 0.0, 1.0
		for _, smp := range r.Samples {
			sum += smp.Savings
			lowest = min(lowest, smp.Savings)
			res.Nodes.OvercommittedNodesPeak = max(res.Nodes.OvercommittedNodesPeak, smp.Overcommitted)
		}
		res.Cost.SavingsRateMean, res.Cost.SavingsRateMin = round4(sum/float64(len(r.Samples))), round4(lowest)
	}
	var toStart, toReady []time.Duration
	for _, rs := range r.Resumes {
		if rs.ToStartRequested >= 0 {
			toStart = append(toStart, rs.ToStartRequested)
		}
		if rs.ToReady >= 0 {
			toReady = append(toReady, rs.ToReady)
		}
	}
	res.Nodes.ResumeStartP50Seconds, res.Nodes.ResumeStartP99Seconds = quantileSeconds(toStart, 0.5), quantileSeconds(toStart, 0.99)
	res.Nodes.ResumeReadyP50Seconds, res.Nodes.ResumeReadyP99Seconds = quantileSeconds(toReady, 0.5), quantileSeconds(toReady, 0.99)
	res.Nodes.KarpenterBootP50Seconds, res.Nodes.KarpenterBoots = quantileSeconds(r.KarpenterBoots, 0.5), len(r.KarpenterBoots)
	firstNotice, noticed := markerAt(r.Markers, "notice")
	if !noticed {
		firstNotice = -1
	}
	step := r.Interval.Seconds()
	if step <= 0 {
		step = 1
	}
	for name, info := range r.Workloads {
		w := &WorkloadResult{Replicas: info.Replicas, PDBFloor: info.PDBFloor, MinReady: info.Replicas,
			PodsKilledAtReclaim: info.Killed, PodsNoticed: info.Noticed, Protected: info.Protected,
			NodesAtStart: info.NodesAtStart, SharedNodesAtStart: info.SharedNodesAtStart}
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
				w.SecondsBelowReplicas += step
				w.ReplicaSecondsLost += float64(info.Replicas-ready) * step
			}
		}
		w.SecondsBelowReplicas, w.ReplicaSecondsLost = round(w.SecondsBelowReplicas), round(w.ReplicaSecondsLost)
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

// quantileSeconds is the nearest-rank quantile, in seconds rounded to the millisecond (0 when
// there are no samples).
func quantileSeconds(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Milliseconds()) / 1000
}

func round(f float64) float64  { return float64(int64(f*10+0.5)) / 10 }
func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }
func round4(f float64) float64 { return float64(int64(f*10000+0.5)) / 10000 }

// New builds a report from every mode's run; spotPriceRatio is the scenario's Spot price as
// a fraction of On-Demand.
func New(scenario string, shortened []string, spotPriceRatio float64, runs []*Run) *Report {
	rep := &Report{Scenario: scenario, Generated: time.Now().UTC(), Shortened: shortened, SpotPriceRatio: spotPriceRatio, Modes: map[string]*ModeResult{}}
	for _, r := range runs {
		rep.Modes[r.Mode] = Summarize(r)
	}
	rep.ReclaimBack = rep.reclaimBack()
	rep.Regressions = rep.Worse()
	return rep
}

// WriteJSON writes report.json; its regressions are those of the modes it holds (Worse).
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	out := *rep
	out.Regressions = rep.Worse()
	out.ReclaimBack = rep.reclaimBack()
	return enc.Encode(&out)
}

// Regression is a figure in which a workload did worse with Lifeboat than with Karpenter alone.
type Regression struct {
	Workload string  `json:"workload"`
	Metric   string  `json:"metric"` // the WorkloadResult's JSON name, e.g. seconds_zero_ready
	Baseline float64 `json:"baseline"`
	Lifeboat float64 `json:"lifeboat"`
	// ExposureDiffers: the market hit the workload differently in the two modes (pods_noticed
	// differs), so this regression compares unlike runs: reported, not dropped.
	ExposureDiffers bool `json:"exposure_differs"`
}

// Sampling noise allowed on the time-based figures before Worse calls them a regression: the
// lifeboat figure must exceed the baseline one by more than max(regressionSlack, regressionRatio ×
// baseline). One-second samples of two runs with jittered timings differ by a sample or two
// at every edge.
const (
	regressionSlack = 2    // seconds, or replica-seconds
	regressionRatio = 0.05 // of the baseline figure
)

// regressionChecks are the figures Worse compares, in the order it reports them.
var regressionChecks = []struct {
	metric string
	unit   string // after the number in Outcome
	value  func(*WorkloadResult) float64
	worse  func(baseline, lifeboat float64) bool
}{
	{"seconds_below_floor", " s", func(w *WorkloadResult) float64 { return w.SecondsBelowFloor }, worseWithSlack},
	{"seconds_zero_ready", " s", func(w *WorkloadResult) float64 { return w.SecondsZeroReady }, worseWithSlack},
	{"replica_seconds_lost", " replica-seconds", func(w *WorkloadResult) float64 { return w.ReplicaSecondsLost }, worseWithSlack},
	{"pods_killed_at_reclaim", "", func(w *WorkloadResult) float64 { return float64(w.PodsKilledAtReclaim) }, func(b, l float64) bool { return l > b }},
	{"recovery_seconds", " s", func(w *WorkloadResult) float64 { return w.RecoverySeconds }, worseWithSlack},
	// Higher is better.
	{"min_ready", "", func(w *WorkloadResult) float64 { return float64(w.MinReady) }, func(b, l float64) bool { return l < b }},
}

func worseWithSlack(baseline, lifeboat float64) bool {
	return lifeboat > baseline+max(regressionSlack, regressionRatio*baseline)
}

// Worse checks that no workload is worse with Lifeboat than with Karpenter alone: for every
// workload in both the "baseline" and the "lifeboat" mode it compares seconds_below_floor,
// seconds_zero_ready, replica_seconds_lost and recovery_seconds (worse only beyond the sampling
// slack: more than max(2, 5 % of baseline)), pods_killed_at_reclaim (any more is worse) and
// min_ready (any fewer is worse). Sorted by workload, then in that order of figures. A
// regression of a workload whose pods_noticed differs between the modes is marked
// ExposureDiffers. Nil when either mode is missing; empty, not nil, when there is no regression.
func (rep *Report) Worse() []Regression {
	pairs := rep.workloadPairs()
	if pairs == nil {
		return nil
	}
	out := []Regression{}
	for _, wp := range pairs {
		name, bw, lw := wp.name, wp.baseline, wp.lifeboat
		for _, c := range regressionChecks {
			if b, l := c.value(bw), c.value(lw); c.worse(b, l) {
				out = append(out, Regression{Workload: name, Metric: c.metric, Baseline: b, Lifeboat: l,
					ExposureDiffers: bw.PodsNoticed != lw.PodsNoticed})
			}
		}
	}
	return out
}

// workloadPair is one workload's results in the baseline and the lifeboat mode.
type workloadPair struct {
	name               string
	baseline, lifeboat *WorkloadResult
}

// workloadPairs are the workloads in both the baseline and the lifeboat mode, sorted by name;
// nil when either mode is missing.
func (rep *Report) workloadPairs() []workloadPair {
	base, lb := rep.Modes["baseline"], rep.Modes["lifeboat"]
	if base == nil || lb == nil {
		return nil
	}
	out := []workloadPair{}
	for _, name := range sortedKeys(lb.Workloads) {
		if bw, lw := base.Workloads[name], lb.Workloads[name]; bw != nil && lw != nil {
			out = append(out, workloadPair{name, bw, lw})
		}
	}
	return out
}

// Outcome states the comparison in words, for the first lines of the report: per protected
// workload in both modes, the replica-seconds each mode lost and its lowest ready count; then
// one line per regression (Worse) or one saying there is none. Nil unless the report holds
// both the baseline and the lifeboat mode.
func (rep *Report) Outcome() []string {
	pairs := rep.workloadPairs()
	if pairs == nil {
		return nil
	}
	var lines []string
	for _, wp := range pairs {
		name, bw, lw := wp.name, wp.baseline, wp.lifeboat
		if !(lw.Protected || bw.Protected) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: Lifeboat lost %s replica-seconds (min ready %d/%d), Karpenter alone %s (min ready %d/%d)",
			name, thousands(lw.ReplicaSecondsLost), lw.MinReady, lw.Replicas, thousands(bw.ReplicaSecondsLost), bw.MinReady, bw.Replicas))
	}
	regs := rep.Worse()
	for _, r := range regs {
		unit := ""
		for _, c := range regressionChecks {
			if c.metric == r.Metric {
				unit = c.unit
			}
		}
		line := fmt.Sprintf("WORSE with Lifeboat: %s %s %s%s vs %s%s (Karpenter alone)",
			r.Workload, r.Metric, thousands(r.Lifeboat), unit, thousands(r.Baseline), unit)
		if r.ExposureDiffers {
			line += " — exposure differs, not like for like"
		}
		lines = append(lines, line)
	}
	if len(regs) == 0 {
		lines = append(lines, "No workload did worse with Lifeboat than with Karpenter alone.")
	}
	return append(lines, rep.fallbackOutcome()...)
}

// Cautions are lines about runs that did not model the cluster faithfully: one per mode whose
// nodes held more Pods than they fit (NodeResult.OvercommittedNodesPeak). Such a mode ran on
// fewer, fuller nodes than a real cluster could, and a reclaim there displaced more Pods. Then
// one per workload the market hit differently in the baseline and the lifeboat mode
// (ExposureDiffs).
func (rep *Report) Cautions() []string {
	var lines []string
	for _, m := range rep.ModeNames() {
		if n := rep.Modes[m].Nodes.OvercommittedNodesPeak; n > 0 {
			lines = append(lines, fmt.Sprintf("CAUTION %s: up to %d node(s) held more Pods than they fit (two schedulers bound into the same free room; a real kubelet rejects the overflow with OutOfcpu/OutOfpods, KWOK runs it), so this mode's figures are not comparable", m, n))
		}
	}
	if l := rep.bootLag(); l != "" {
		lines = append(lines, l)
	}
	lines = append(lines, rep.ExposureDiffs()...)
	return append(lines, rep.LayoutDiffs()...)
}

// layoutDiffShare: shares of a workload's nodes that hold other workloads' Pods too further
// apart than this between the modes make LayoutDiffs report it, for a workload on at least
// layoutMinNodes nodes in each mode: on fewer, one node moves the share by more than a fifth
// (make demo seed 99: a 4-Pod Job shared 4 of 4 nodes with Lifeboat, 1 of 2 alone).
const (
	layoutDiffShare = 0.25
	layoutMinNodes  = 5
)

// LayoutDiffs has a line per workload in both the baseline and the lifeboat mode, on at least
// layoutMinNodes nodes in each, whose starting layout differs: the share of its nodes it shared with other workloads at t0
// (shared_nodes_at_start / nodes_at_start) is more than layoutDiffShare apart. Its replacements
// then found different free room — with its image cached or not — so its recovery and
// replica-seconds are not like for like. Nil when there is none or either mode is missing.
func (rep *Report) LayoutDiffs() []string {
	var lines []string
	for _, wp := range rep.workloadPairs() {
		bw, lw := wp.baseline, wp.lifeboat
		if bw.NodesAtStart < layoutMinNodes || lw.NodesAtStart < layoutMinNodes {
			continue
		}
		bs := float64(bw.SharedNodesAtStart) / float64(bw.NodesAtStart)
		ls := float64(lw.SharedNodesAtStart) / float64(lw.NodesAtStart)
		if math.Abs(bs-ls) <= layoutDiffShare {
			continue
		}
		lines = append(lines, fmt.Sprintf("LAYOUT differs: %s shared %d of its %d nodes with other workloads at t0 with Lifeboat, %d of %d with Karpenter alone — its replacements found different free room (with its image cached or not), so its recovery and replica-seconds are not like for like; the scenario field `ramp: byPriority` lays both modes out alike",
			wp.name, lw.SharedNodesAtStart, lw.NodesAtStart, bw.SharedNodesAtStart, bw.NodesAtStart))
	}
	return lines
}

// Simulated boots further apart than this between the modes (seconds, or this fraction of the
// baseline's) mean the harness lagged in one mode: KWOK flips Nodes Ready when it gets to them.
const (
	bootLagSlack = 5
	bootLagRatio = 0.1
	// bootLagMinNodes: fewer new nodes in a mode and the median is the scenario's jitter
	// (karpenterBoot ± jitter per node), not a lag.
	bootLagMinNodes = 10
)

// bootLag is a caution when Karpenter's Nodes took clearly longer to turn Ready in one mode than
// in the other: the boot is simulated, the same delays in both modes, so the difference is the
// machine's lag, and the recovery and replica-seconds of workloads waiting for new nodes are
// not like for like. "" when the modes agree or either has no figure.
func (rep *Report) bootLag() string {
	b, l := rep.Modes["baseline"], rep.Modes["lifeboat"]
	if b == nil || l == nil {
		return ""
	}
	bb, lb := b.Nodes.KarpenterBootP50Seconds, l.Nodes.KarpenterBootP50Seconds
	if bb <= 0 || lb <= 0 || b.Nodes.KarpenterBoots < bootLagMinNodes || l.Nodes.KarpenterBoots < bootLagMinNodes ||
		math.Abs(lb-bb) <= max(bootLagSlack, bootLagRatio*bb) {
		return ""
	}
	return fmt.Sprintf("CAUTION the simulated kubelets lagged: Karpenter's nodes turned Ready %s s after launch (median) with Lifeboat, %s s with Karpenter alone — the same simulated boot, so the gap is this machine's; recovery and replica-seconds of workloads waiting for new nodes are not like for like",
		strconv.FormatFloat(lb, 'f', 1, 64), strconv.FormatFloat(bb, 'f', 1, 64))
}

// ExposureDiffs has a line per workload in both the baseline and the lifeboat mode whose
// pods_noticed differs: the market hit it harder in one mode than in the other (placement
// differs between the modes and did not allow the same interruption), so its comparison is not
// like for like. Nil when there is none or either mode is missing.
func (rep *Report) ExposureDiffs() []string {
	var lines []string
	for _, wp := range rep.workloadPairs() {
		name, bw, lw := wp.name, wp.baseline, wp.lifeboat
		if bw.PodsNoticed == lw.PodsNoticed {
			continue
		}
		lines = append(lines, fmt.Sprintf("EXPOSURE differs: %s %d Pods noticed with Lifeboat, %d with Karpenter alone — its comparison is not like for like",
			name, lw.PodsNoticed, bw.PodsNoticed))
	}
	return lines
}

// thousands writes f rounded to an integer with thousands separators: 2310.4 → "2,310".
func thousands(f float64) string {
	digits := strconv.FormatFloat(math.Abs(math.Round(f)), 'f', 0, 64)
	var b strings.Builder
	if f < 0 && digits != "0" {
		b.WriteByte('-')
	}
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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

// WriteTable writes the outcome in words (Outcome, when both baseline and lifeboat ran), then
// the side-by-side plain-text table.
func (rep *Report) WriteTable(w io.Writer) error {
	if lines := append(rep.Outcome(), rep.Cautions()...); len(lines) > 0 {
		if _, err := fmt.Fprintf(w, "%s\n\n", strings.Join(lines, "\n")); err != nil {
			return err
		}
	}
	return rep.writeFigures(w)
}

// writeFigures writes the table of figures alone.
func (rep *Report) writeFigures(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario %s\n", rep.Scenario)
	for _, s := range rep.Shortened {
		fmt.Fprintf(tw, "  shortened for the demo: %s\n", s)
	}
	fmt.Fprintln(tw, "MODE\tWORKLOAD\tREPLICAS\tPDB FLOOR\tMIN READY\tBELOW FLOOR (s)\tZERO READY (s)\tBELOW REPLICAS (s)\tREPLICA-SECONDS LOST\tRECOVERY (s)\tKILLED AT RECLAIM\tPODS NOTICED")
	for _, m := range rep.ModeNames() {
		res := rep.Modes[m]
		for _, n := range sortedKeys(res.Workloads) {
			wr := res.Workloads[n]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%s\t%.0f\t%d\t%d\n", m, n, wr.Replicas, wr.PDBFloor, wr.MinReady,
				wr.SecondsBelowFloor, wr.SecondsZeroReady, wr.SecondsBelowReplicas, thousands(wr.ReplicaSecondsLost),
				wr.RecoverySeconds, wr.PodsKilledAtReclaim, wr.PodsNoticed)
		}
	}
	// Each table aligns on its own (one tabwriter for both would pad every column to the
	// other table's widths).
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tKARPENTER NODES\tNODE BOOT p50 (s)\tLIFEBOAT RESUMED\tNOTICE→START p50/p99 (s)\tNOTICE→READY p50/p99 (s)\tLIFEBOAT NODE-SECONDS\tLIFEBOAT $ (RUN)\tOVERPROVISIONING $ (RUN)\tSPOT SAVINGS mean / min")
	for _, m := range rep.ModeNames() {
		res := rep.Modes[m]
		start, ready, boot := "-", "-", "-"
		if res.Nodes.KarpenterBootP50Seconds > 0 {
			boot = fmt.Sprintf("%.1f", res.Nodes.KarpenterBootP50Seconds)
		}
		if res.Nodes.LifeboatResumed > 0 && res.Nodes.ResumeStartP99Seconds > 0 {
			start = fmt.Sprintf("%.3f / %.3f", res.Nodes.ResumeStartP50Seconds, res.Nodes.ResumeStartP99Seconds)
		}
		if res.Nodes.LifeboatResumed > 0 && res.Nodes.ResumeReadyP99Seconds > 0 {
			ready = fmt.Sprintf("%.1f / %.1f", res.Nodes.ResumeReadyP50Seconds, res.Nodes.ResumeReadyP99Seconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%.0f\t%.4f\t%.4f\t%.0f%% / %.0f%%\n", m, res.Nodes.KarpenterLaunched, boot, res.Nodes.LifeboatResumed,
			start, ready, res.Nodes.LifeboatActiveNodeSeconds, res.Cost.LifeboatDollars, res.Cost.OverprovisioningDollars,
			100*res.Cost.SavingsRateMean, 100*res.Cost.SavingsRateMin)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res, ok := rep.Modes["lifeboat"]; ok && res.Cost.OverprovisioningDollarsPerMonth > 0 {
		_, err := fmt.Fprintf(w, "monthly, %g runs like this one a month:  lifeboat $%.2f  overprovisioning $%.2f  ratio %.2f\n",
			res.Cost.RunsPerMonth, res.Cost.LifeboatDollarsPerMonth, res.Cost.OverprovisioningDollarsPerMonth,
			res.Cost.LifeboatDollarsPerMonth/res.Cost.OverprovisioningDollarsPerMonth)
		return err
	}
	return nil
}

// String renders the table.
func (rep *Report) String() string {
	var b strings.Builder
	_ = rep.WriteTable(&b)
	return b.String()
}

// Package scenario defines the simulation's scenario files: the cluster, the workloads, the
// warm pool, the timing model and the interruption events of one run, and the modes to
// compare. Files are YAML; every error names the field and the line (docs/SIMULATION.md).
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Mode is one way of running a scenario.
type Mode string

const (
	// ModeBaseline is Karpenter alone.
	ModeBaseline Mode = "baseline"
	// ModeLifeboat adds Lifeboat's webhook, scheduler and controller with the WarmPool.
	ModeLifeboat Mode = "lifeboat"
	// ModeOverprovisioning keeps balloon Pods sized to the same protection on running nodes.
	ModeOverprovisioning Mode = "overprovisioning"
)

// Scenario is one scenario file.
type Scenario struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description,omitempty"`
	Duration    Duration `yaml:"duration"`
	Seed        int64    `yaml:"seed,omitempty"`
	// Modes to run; default baseline, plus lifeboat when WarmPool is set.
	Modes     []Mode     `yaml:"modes,omitempty"`
	Cluster   Cluster    `yaml:"cluster"`
	Timing    Timing     `yaml:"timing"`
	Workloads []Workload `yaml:"workloads"`
	WarmPool  *WarmPool  `yaml:"warmPool,omitempty"`
	Events    []Event    `yaml:"events"`
	// Shortened lists durations the scenario shortened from production values so a run fits
	// a demo (e.g. activeDuration); reports print them.
	Shortened []string `yaml:"shortened,omitempty"`
	// WarmupTimeout bounds the wait for every workload to be ready before t0 (default 6m;
	// large scenarios need more: Karpenter launches hundreds of nodes in batches).
	WarmupTimeout Duration `yaml:"warmupTimeout,omitempty"`
	// Ramp is how the workloads are created before t0: together (default) or byPriority (see
	// Ramp).
	Ramp Ramp `yaml:"ramp,omitempty"`
	// Cost holds the assumptions of the monthly cost projection.
	Cost Cost `yaml:"cost,omitempty"`
	// ReclaimBack moves On-Demand fallback nodes back to Spot in lifeboat mode (reclaimback.go).
	ReclaimBack *ReclaimBack `yaml:"reclaimBack,omitempty"`
}

// Ramp is how a run creates its workloads before t0, the same in every mode.
type Ramp string

const (
	// RampTogether creates every workload at once.
	RampTogether Ramp = "together"
	// RampByPriority creates the workloads in waves by the priority their Pods have under
	// Lifeboat (LifeboatPriority), highest first, and places each wave before it creates the
	// next. The scheduler serves Pending Pods highest priority first, so in lifeboat mode a ramp
	// of all workloads at once puts the protected Pods on the first nodes to come up and the
	// others on the later ones, while without Lifeboat (every Pod at priority 0) they mix: the
	// two modes would start from differently laid-out clusters (measured, scale-quarter seed 7:
	// 9–12 of ~55 nodes held an unprotected worker beside protected Pods with Lifeboat, 37–42
	// without), and an unprotected workload's replacements found free room with or without its
	// image cached by that chance. In waves both modes lay out the cluster alike.
	RampByPriority Ramp = "byPriority"
)

// LifeboatPriority is the priority a workload's Pods get in lifeboat mode: its tier's
// PriorityClass when protected (the webhook assigns it), else the cluster's default, 0.
func (w Workload) LifeboatPriority() int32 {
	if !w.Protected {
		return 0
	}
	return v1alpha1.TierPriority(v1alpha1.Tier(w.Tier))
}

// RampWaves are the groups of workloads a run creates one after another (Ramp): one group with
// every workload for together; for byPriority, one group per LifeboatPriority, highest first,
// each in the scenario's order.
func (s *Scenario) RampWaves() [][]Workload {
	if s.Ramp != RampByPriority {
		return [][]Workload{s.Workloads}
	}
	byPrio := map[int32][]Workload{}
	var prios []int32
	for _, w := range s.Workloads {
		p := w.LifeboatPriority()
		if _, ok := byPrio[p]; !ok {
			prios = append(prios, p)
		}
		byPrio[p] = append(byPrio[p], w)
	}
	slices.Sort(prios)
	slices.Reverse(prios)
	waves := make([][]Workload, 0, len(prios))
	for _, p := range prios {
		waves = append(waves, byPrio[p])
	}
	return waves
}

// Cost holds the assumptions that turn one run's cost into a monthly figure.
type Cost struct {
	// RunsPerMonth is how many times a month an interruption like this scenario's hits the
	// pool (default 4, one a week). The monthly projection is the hibernated pool's EBS for a
	// whole month plus RunsPerMonth times the run's active lifeboat time; overprovisioning pays
	// its balloon nodes all month.
	RunsPerMonth float64 `yaml:"runsPerMonth,omitempty"`
}

// Cluster is the capacity the scenario runs on.
type Cluster struct {
	Zones         []string       `yaml:"zones"`
	InstanceTypes []InstanceType `yaml:"instanceTypes"`
	// SpotDiscount is the Spot price as a fraction of On-Demand (default 0.35).
	SpotDiscount float64 `yaml:"spotDiscount,omitempty"`
	// ZoneSpotFactor scales the Spot price per zone (default 1). Spot prices differ by zone;
	// Karpenter launches in the cheapest, which is how one capacity pool fills up.
	ZoneSpotFactor map[string]float64 `yaml:"zoneSpotFactor,omitempty"`
}

// InstanceType is offered in every zone, Spot and On-Demand.
type InstanceType struct {
	Name        string  `yaml:"name"`
	CPU         string  `yaml:"cpu"`
	Memory      string  `yaml:"memory"`
	Pods        int     `yaml:"pods,omitempty"`
	OnDemandUSD float64 `yaml:"onDemandPrice"`
	// PoolOnly types are not offered to Karpenter, only to the warm pool (a pool may use a
	// larger type than the NodePools do).
	PoolOnly bool `yaml:"poolOnly,omitempty"`
}

// Timing is the timing model; every figure is a distribution (mean ± jitter).
type Timing struct {
	// NoticeSeconds is the Spot notice (AWS: 120 s).
	Notice Duration `yaml:"notice"`
	// KarpenterBoot: NodeClaim launch → Node Ready (docs/FACTS.md: 30–40 s typical, up to 80 s).
	KarpenterBoot Dist `yaml:"karpenterBoot"`
	// LifeboatResume: StartInstances → Node Ready for a hibernated node (docs/FACTS.md: ~20 s).
	LifeboatResume Dist `yaml:"lifeboatResume"`
	// ImagePullCold on a node without the Pod's images; ImagePullCached on a pre-warmed one or
	// any node an earlier Pod brought them to.
	ImagePullCold   Dist `yaml:"imagePullCold"`
	ImagePullCached Dist `yaml:"imagePullCached"`
	// AppStart: container start → Ready.
	AppStart Dist `yaml:"appStart"`
}

// Dist is a duration with uniform jitter: Mean ± Jitter.
type Dist struct {
	Mean   Duration `yaml:"mean"`
	Jitter Duration `yaml:"jitter,omitempty"`
}

// Workload is one Deployment, StatefulSet or Job of the scenario.
type Workload struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
	Kind      string `yaml:"kind"` // Deployment, StatefulSet, Job
	Replicas  int32  `yaml:"replicas"`
	CPU       string `yaml:"cpu"`
	Memory    string `yaml:"memory"`
	// Tier: critical, stateless, checkpointed, best-effort (docs/ARCHITECTURE.md "Tiers").
	Tier string `yaml:"tier,omitempty"`
	// Protected turns Lifeboat on for the workload (in lifeboat mode).
	Protected bool `yaml:"protected"`
	// PDBMaxUnavailable is "20%", "1", or "0" / "0%" (no disruption allowed). PDBMinAvailable
	// is "2", "80%", or "100%" / the replica count (no disruption allowed). At most one of the
	// two; neither means no PDB.
	PDBMaxUnavailable string `yaml:"pdbMaxUnavailable,omitempty"`
	PDBMinAvailable   string `yaml:"pdbMinAvailable,omitempty"`
	// GracePeriod is terminationGracePeriodSeconds.
	GracePeriod Duration `yaml:"gracePeriod,omitempty"`
	// RunFor is how long a Job's Pods work before completing.
	RunFor Duration `yaml:"runFor,omitempty"`
	// CapacityType pins the workload: "spot", "on-demand" or empty (either).
	CapacityType string `yaml:"capacityType,omitempty"`
}

// HasPDB reports whether the workload gets a PodDisruptionBudget.
func (w Workload) HasPDB() bool { return w.PDBMaxUnavailable != "" || w.PDBMinAvailable != "" }

// PDBFloor is the ready count the workload's PDB guarantees, computed as the disruption
// controller computes desiredHealthy: replicas − maxUnavailable, or minAvailable, percentages
// of replicas rounded up; never below 0 nor above replicas. 0 without a (valid) PDB.
func (w Workload) PDBFloor() int32 {
	switch {
	case w.PDBMaxUnavailable != "":
		m, err := ParseMaxUnavailable(w.PDBMaxUnavailable)
		if err != nil {
			return 0
		}
		return m.Floor(w.Replicas)
	case w.PDBMinAvailable != "":
		m, err := ParseMinAvailable(w.PDBMinAvailable)
		if err != nil {
			return 0
		}
		return m.Floor(w.Replicas)
	}
	return 0
}

// WarmPool is the WarmPool spec used in lifeboat mode (a subset with the simulation's needs).
type WarmPool struct {
	Size           string   `yaml:"size"` // a number or "auto"
	InstanceTypes  []string `yaml:"instanceTypes"`
	ActiveDuration Duration `yaml:"activeDuration"`
	Handoff        string   `yaml:"handoff,omitempty"`  // AfterActiveDuration, WhenReplacementReady
	AfterUse       string   `yaml:"afterUse,omitempty"` // Terminate, Rehibernate
	// EBSGiBPerNode prices the hibernated volume (cost model).
	EBSGiBPerNode int `yaml:"ebsGiBPerNode,omitempty"`
	// Bridge false runs Lifeboat without the bridge (no eviction holds, no surge before the
	// drain; lifeboat-controller --disable-bridge, lifeboat-webhook --eviction-pending-hold=0),
	// to measure what the bridge changes. Default true.
	Bridge *bool `yaml:"bridge,omitempty"`
}

// EventKind is what happens at an event's time.
type EventKind string

const (
	// EventBurst: Count nodes of Pool get notices spread over Spread (correlated reclaim).
	EventBurst EventKind = "burst"
	// EventNotice: one node of Pool gets a notice.
	EventNotice EventKind = "notice"
	// EventRebalance: a rebalance recommendation for Count nodes of Pool.
	EventRebalance EventKind = "rebalance"
	// EventICE: Pool (or every Spot pool when Pool.InstanceType is "*") has no capacity For;
	// its Spot placement score is Score (default 1) for that time.
	EventICE EventKind = "ice"
	// EventPlacementScore: EC2 answers GetSpotPlacementScores with Score for Pool's types and
	// zone (empty: all) from then on, or For when set.
	EventPlacementScore EventKind = "placement-score"
)

// Event is one scheduled market event.
type Event struct {
	At     Duration  `yaml:"at"`
	Kind   EventKind `yaml:"kind"`
	Pool   Pool      `yaml:"pool"`
	Count  int       `yaml:"count,omitempty"`
	Spread Duration  `yaml:"spread,omitempty"`
	For    Duration  `yaml:"for,omitempty"`
	// Score is a Spot placement score, 1–10 (ice, placement-score).
	Score int `yaml:"score,omitempty"`
}

// Pool names a capacity pool: instance type × zone (× capacity type, Spot for notices).
// An empty InstanceType or Zone means "the busiest" at event time.
type Pool struct {
	InstanceType string `yaml:"instanceType,omitempty"`
	Zone         string `yaml:"zone,omitempty"`
	CapacityType string `yaml:"capacityType,omitempty"`
}

// Duration is a time.Duration written as "90s", "2m".
type Duration struct{ time.Duration }

// UnmarshalYAML parses Go duration strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"90s\" or \"2m\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (use e.g. \"90s\", \"2m\")", n.Line, s)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// FieldError is a problem with one field of a scenario file.
type FieldError struct {
	Field string // dotted path, e.g. workloads[1].replicas
	Line  int    // 1-based; 0 when unknown
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Parse decodes and validates a scenario file. Unknown fields are errors; every error names
// the field and its line.
func Parse(name string, data []byte) (*Scenario, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	s := &Scenario{}
	if err := dec.Decode(s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.applyDefaults()
	if errs := s.Validate(); len(errs) > 0 {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			e.Line = lineOf(&root, e.Field)
			msgs = append(msgs, e.Error())
		}
		return nil, fmt.Errorf("%s: invalid scenario:\n  %s", name, strings.Join(msgs, "\n  "))
	}
	return s, nil
}

func (s *Scenario) applyDefaults() {
	if s.Ramp == "" {
		s.Ramp = RampTogether
	}
	if len(s.Modes) == 0 {
		s.Modes = []Mode{ModeBaseline}
		if s.WarmPool != nil {
			s.Modes = append(s.Modes, ModeLifeboat)
		}
	}
	if s.Timing.Notice.Duration == 0 {
		s.Timing.Notice.Duration = 120 * time.Second
	}
	if s.Cluster.SpotDiscount == 0 {
		s.Cluster.SpotDiscount = 0.35
	}
	for i := range s.Workloads {
		w := &s.Workloads[i]
		if w.Namespace == "" {
			w.Namespace = "default"
		}
		if w.Tier == "" {
			switch w.Kind {
			case "StatefulSet":
				w.Tier = "checkpointed"
			case "Job":
				w.Tier = "best-effort"
			default:
				w.Tier = "stateless"
			}
		}
	}
	if s.Cost.RunsPerMonth == 0 {
		s.Cost.RunsPerMonth = 4
	}
	if s.WarmupTimeout.Duration == 0 {
		s.WarmupTimeout.Duration = 6 * time.Minute
	}
	if s.ReclaimBack != nil {
		s.ReclaimBack.applyDefaults()
	}
	if s.WarmPool != nil {
		if s.WarmPool.Handoff == "" {
			s.WarmPool.Handoff = "AfterActiveDuration"
		}
		if s.WarmPool.AfterUse == "" {
			s.WarmPool.AfterUse = "Terminate"
		}
		if s.WarmPool.ActiveDuration.Duration == 0 {
			s.WarmPool.ActiveDuration.Duration = 5 * time.Minute
		}
		if s.WarmPool.EBSGiBPerNode == 0 {
			s.WarmPool.EBSGiBPerNode = 40
		}
	}
}

// problems collects the FieldErrors of a validation, in the order found.
type problems []*FieldError

// bad records a problem with field; the message is format with args.
func (p *problems) bad(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Validate checks the decoded scenario; field paths follow the YAML keys.
func (s *Scenario) Validate() []*FieldError {
	var p problems
	s.validateRun(&p)
	types := s.Cluster.validate(&p)
	s.Timing.validate(&p)
	validateWorkloads(&p, s.Workloads)
	if s.WarmPool != nil {
		s.WarmPool.validate(&p, types)
	}
	if s.Cost.RunsPerMonth < 0 {
		p.bad("cost.runsPerMonth", "must be ≥ 0, got %g", s.Cost.RunsPerMonth)
	}
	for _, m := range s.Modes {
		if m == ModeLifeboat && s.WarmPool == nil {
			p.bad("warmPool", "required when modes include lifeboat")
		}
	}
	s.validateEvents(&p, types)
	if s.ReclaimBack != nil {
		s.ReclaimBack.validate(&p, s)
	}
	return p
}

// validateRun checks the run's top-level fields: name, duration and modes.
func (s *Scenario) validateRun(p *problems) {
	if s.Name == "" {
		p.bad("name", "required")
	}
	if s.Duration.Duration <= 0 {
		p.bad("duration", "must be > 0 (e.g. \"10m\")")
	}
	switch s.Ramp {
	case "", RampTogether, RampByPriority:
	default:
		p.bad("ramp", "want together or byPriority, got %q", s.Ramp)
	}
	for i, m := range s.Modes {
		switch m {
		case ModeBaseline, ModeLifeboat, ModeOverprovisioning:
		default:
			p.bad(fmt.Sprintf("modes[%d]", i), "unknown mode %q (baseline, lifeboat, overprovisioning)", m)
		}
	}
}

// validate checks cluster: zones, instance types and Spot prices. It returns the set of
// instance type names (the warm pool and the events refer to them).
func (c Cluster) validate(p *problems) (types map[string]bool) {
	if len(c.Zones) == 0 {
		p.bad("cluster.zones", "at least one zone")
	}
	if len(c.InstanceTypes) == 0 {
		p.bad("cluster.instanceTypes", "at least one instance type")
	}
	types = map[string]bool{}
	for i, it := range c.InstanceTypes {
		it.validate(p, fmt.Sprintf("cluster.instanceTypes[%d]", i), types[it.Name])
		types[it.Name] = true
	}
	if c.SpotDiscount <= 0 || c.SpotDiscount > 1 {
		p.bad("cluster.spotDiscount", "must be in (0, 1]")
	}
	for z, f := range c.ZoneSpotFactor {
		if !slices.Contains(c.Zones, z) {
			p.bad("cluster.zoneSpotFactor", "zone %q is not in cluster.zones", z)
		}
		if f <= 0 {
			p.bad("cluster.zoneSpotFactor", "factor of %s must be > 0", z)
		}
	}
	return types
}

// validate checks one instance type at field path f; duplicate: an earlier one has its name.
func (it InstanceType) validate(p *problems, f string, duplicate bool) {
	if it.Name == "" {
		p.bad(f+".name", "required")
	}
	if duplicate {
		p.bad(f+".name", "duplicate instance type %q", it.Name)
	}
	if !isQuantity(it.CPU) {
		p.bad(f+".cpu", "want a CPU quantity such as \"2\" or \"1500m\", got %q", it.CPU)
	}
	if !isQuantity(it.Memory) {
		p.bad(f+".memory", "want a memory quantity such as \"8Gi\", got %q", it.Memory)
	}
	if it.OnDemandUSD <= 0 {
		p.bad(f+".onDemandPrice", "must be > 0 (USD per hour)")
	}
}

// validate checks the timing model: every distribution has mean ≥ 0 and jitter in [0, mean].
func (t Timing) validate(p *problems) {
	for name, d := range map[string]Dist{
		"timing.karpenterBoot": t.KarpenterBoot, "timing.lifeboatResume": t.LifeboatResume,
		"timing.imagePullCold": t.ImagePullCold, "timing.imagePullCached": t.ImagePullCached,
		"timing.appStart": t.AppStart,
	} {
		if d.Mean.Duration < 0 || d.Jitter.Duration < 0 || d.Jitter.Duration > d.Mean.Duration {
			p.bad(name, "mean must be ≥ 0 and jitter between 0 and mean")
		}
	}
}

// validateWorkloads checks the workloads: at least one, names unique per namespace, each valid.
func validateWorkloads(p *problems, workloads []Workload) {
	if len(workloads) == 0 {
		p.bad("workloads", "at least one workload")
	}
	seen := map[string]bool{}
	for i, w := range workloads {
		w.validate(p, fmt.Sprintf("workloads[%d]", i), seen[w.Namespace+"/"+w.Name])
		seen[w.Namespace+"/"+w.Name] = true
	}
}

// validate checks one workload at field path f; duplicate: an earlier one has its
// namespace/name.
func (w Workload) validate(p *problems, f string, duplicate bool) {
	if w.Name == "" {
		p.bad(f+".name", "required")
	}
	if duplicate {
		p.bad(f+".name", "duplicate workload %s/%s", w.Namespace, w.Name)
	}
	switch w.Kind {
	case "Deployment", "StatefulSet", "Job":
	default:
		p.bad(f+".kind", "want Deployment, StatefulSet or Job, got %q", w.Kind)
	}
	if w.Replicas <= 0 {
		p.bad(f+".replicas", "must be > 0")
	}
	if !isQuantity(w.CPU) {
		p.bad(f+".cpu", "want a CPU quantity such as \"250m\", got %q", w.CPU)
	}
	if !isQuantity(w.Memory) {
		p.bad(f+".memory", "want a memory quantity such as \"512Mi\", got %q", w.Memory)
	}
	switch w.Tier {
	case "critical", "stateless", "checkpointed", "best-effort":
	default:
		p.bad(f+".tier", "want critical, stateless, checkpointed or best-effort, got %q", w.Tier)
	}
	w.validatePDB(p, f)
	switch w.CapacityType {
	case "", "spot", "on-demand":
	default:
		p.bad(f+".capacityType", "want spot, on-demand or empty, got %q", w.CapacityType)
	}
}

// validatePDB checks a workload's PDB fields at field path f: each parses, at most one is set,
// and a minAvailable count does not exceed the replicas.
func (w Workload) validatePDB(p *problems, f string) {
	if w.PDBMaxUnavailable != "" {
		if _, err := ParseMaxUnavailable(w.PDBMaxUnavailable); err != nil {
			p.bad(f+".pdbMaxUnavailable", "%v", err)
		}
	}
	if w.PDBMinAvailable == "" {
		return
	}
	if w.PDBMaxUnavailable != "" {
		p.bad(f+".pdbMinAvailable", "pdbMinAvailable and pdbMaxUnavailable are mutually exclusive (a PDB has one or the other)")
	} else if m, err := ParseMinAvailable(w.PDBMinAvailable); err != nil {
		p.bad(f+".pdbMinAvailable", "%v", err)
	} else if !m.IsPercent && w.Replicas > 0 && m.Count > int(w.Replicas) {
		p.bad(f+".pdbMinAvailable", "%d is more than replicas (%d); use %d or \"100%%\" for a PDB that allows no disruption",
			m.Count, w.Replicas, w.Replicas)
	}
}

// validate checks the warm pool; types are the cluster's instance type names.
func (wp *WarmPool) validate(p *problems, types map[string]bool) {
	if wp.Size != "auto" && !isNonNegInt(wp.Size) {
		p.bad("warmPool.size", "want a number ≥ 0 or \"auto\", got %q", wp.Size)
	}
	if len(wp.InstanceTypes) == 0 {
		p.bad("warmPool.instanceTypes", "at least one instance type")
	}
	for i, t := range wp.InstanceTypes {
		if !types[t] {
			p.bad(fmt.Sprintf("warmPool.instanceTypes[%d]", i), "%q is not in cluster.instanceTypes", t)
		}
	}
	if wp.Handoff != "AfterActiveDuration" && wp.Handoff != "WhenReplacementReady" {
		p.bad("warmPool.handoff", "want AfterActiveDuration or WhenReplacementReady, got %q", wp.Handoff)
	}
	if wp.AfterUse != "Terminate" && wp.AfterUse != "Rehibernate" {
		p.bad("warmPool.afterUse", "want Terminate or Rehibernate, got %q", wp.AfterUse)
	}
}

// validateEvents checks the events: within the duration, their pools in the cluster (types
// are its instance type names), and the fields each kind needs.
func (s *Scenario) validateEvents(p *problems, types map[string]bool) {
	zones := map[string]bool{}
	for _, z := range s.Cluster.Zones {
		zones[z] = true
	}
	for i, e := range s.Events {
		f := fmt.Sprintf("events[%d]", i)
		if e.At.Duration < 0 || (s.Duration.Duration > 0 && e.At.Duration >= s.Duration.Duration) {
			p.bad(f+".at", "must be within the scenario's duration")
		}
		if e.Pool.InstanceType != "" && e.Pool.InstanceType != "*" && !types[e.Pool.InstanceType] {
			p.bad(f+".pool.instanceType", "%q is not in cluster.instanceTypes", e.Pool.InstanceType)
		}
		if e.Pool.Zone != "" && !zones[e.Pool.Zone] {
			p.bad(f+".pool.zone", "%q is not in cluster.zones", e.Pool.Zone)
		}
		e.validateKind(p, f)
		e.validateScore(p, f)
	}
}

// validateKind checks an event's kind at field path f and the fields that kind needs.
func (e Event) validateKind(p *problems, f string) {
	switch e.Kind {
	case EventBurst, EventRebalance:
		if e.Count <= 0 {
			p.bad(f+".count", "must be > 0 for a %s", e.Kind)
		}
	case EventNotice, EventPlacementScore:
	case EventICE:
		if e.For.Duration <= 0 {
			p.bad(f+".for", "must be > 0 for an ice event (how long the pool has no capacity)")
		}
	default:
		p.bad(f+".kind", "want burst, notice, rebalance, ice or placement-score, got %q", e.Kind)
	}
}

// lineOf finds the line of a dotted field path (a.b[2].c) in the YAML tree; the nearest
// existing ancestor's line when the field itself is absent.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 {
			key = part[:i]
			fmt.Sscanf(part[i:], "[%d]", &idx)
		}
		next := mapValue(n, key)
		if next == nil {
			return line
		}
		n, line = next, next.Line
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// run builds a run whose "shop/web" ready count follows readies (one sample a second) with a
// notice at noticeAt.
func run(mode string, noticeAt time.Duration, readies []int32) *Run {
	r := &Run{Mode: mode, Interval: time.Second,
		Workloads:         map[string]WorkloadInfo{"shop/web": {Replicas: 12, PDBFloor: 9, Protected: true, Killed: 2}},
		Markers:           []Marker{{At: noticeAt, Kind: "notice", Label: "notice node-1"}, {At: noticeAt + 120*time.Second, Kind: "reclaim", Label: "reclaim node-1"}},
		KarpenterLaunched: 3, LifeboatResumed: 1, LifeboatActiveNodeSeconds: 181.04,
	}
	for i, v := range readies {
		r.Samples = append(r.Samples, Sample{At: time.Duration(i) * time.Second,
			Workloads: map[string]int32{"shop/web": v}, Nodes: map[string]int{"karpenter-spot": 3, "lifeboat-active": i % 2}})
	}
	return r
}

func TestSummarize(t *testing.T) {
	// ramp (ignored: before the notice), steady, outage to 0, recovery.
	readies := []int32{0, 4, 12, 12, 12, 10, 8, 0, 0, 5, 9, 12, 12}
	res := Summarize(run("baseline", 3*time.Second, readies))
	w := res.Workloads["shop/web"]
	if w.MinReady != 0 {
		t.Errorf("min ready %d, want 0", w.MinReady)
	}
	// below 9 at t=6 (8), 7 (0), 8 (0), 9 (5) → 4 s; zero at 7, 8 → 2 s.
	if w.SecondsBelowFloor != 4 || w.SecondsZeroReady != 2 {
		t.Errorf("below floor %v s, zero %v s; want 4, 2", w.SecondsBelowFloor, w.SecondsZeroReady)
	}
	// last short sample at t=10, notice at 3 → back at 11: 8 s.
	if w.RecoverySeconds != 8 {
		t.Errorf("recovery %v s, want 8", w.RecoverySeconds)
	}
	if w.PodsKilledAtReclaim != 2 || w.PDBFloor != 9 || w.Replicas != 12 {
		t.Errorf("workload result %+v", w)
	}
	if res.Nodes.LifeboatActiveNodeSeconds != 181 || res.Nodes.KarpenterLaunched != 3 {
		t.Errorf("nodes %+v", res.Nodes)
	}

	steady := Summarize(run("lifeboat", 3*time.Second, []int32{0, 12, 12, 12, 12, 12}))
	if w := steady.Workloads["shop/web"]; w.SecondsBelowFloor != 0 || w.RecoverySeconds != 0 || w.MinReady != 12 {
		t.Errorf("an undisturbed workload reports %+v", w)
	}
}

func TestReportFormats(t *testing.T) {
	runs := []*Run{
		run("lifeboat", 2*time.Second, []int32{12, 12, 12, 11, 12}),
		run("baseline", 2*time.Second, []int32{12, 12, 8, 0, 12}),
	}
	rep := New("monday-reclaim", []string{"activeDuration 3m"}, 0.35, runs)
	if got := rep.ModeNames(); strings.Join(got, ",") != "baseline,lifeboat" {
		t.Errorf("mode order %v", got)
	}

	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["scenario"] != "monday-reclaim" {
		t.Errorf("scenario = %v", doc["scenario"])
	}
	modes := doc["modes"].(map[string]any)
	if at := modes["baseline"].(map[string]any)["markers"].([]any)[0].(map[string]any)["at_seconds"]; at != 2.0 {
		t.Errorf("first marker at_seconds = %v, want 2 (seconds, not nanoseconds)", at)
	}
	for _, m := range []string{"baseline", "lifeboat"} {
		mode := modes[m].(map[string]any)
		w := mode["workloads"].(map[string]any)["shop/web"].(map[string]any)
		for _, k := range []string{"replicas", "pdb_floor", "min_ready", "seconds_below_floor", "seconds_zero_ready", "recovery_seconds", "pods_killed_at_reclaim"} {
			if _, ok := w[k]; !ok {
				t.Errorf("%s: workload lacks %q", m, k)
			}
		}
		for _, k := range []string{"karpenter_launched", "lifeboat_resumed", "lifeboat_active_node_seconds"} {
			if _, ok := mode["nodes"].(map[string]any)[k]; !ok {
				t.Errorf("%s: nodes lacks %q", m, k)
			}
		}
		for _, k := range []string{"lifeboat_dollars", "overprovisioning_dollars"} {
			if _, ok := mode["cost"].(map[string]any)[k]; !ok {
				t.Errorf("%s: cost lacks %q", m, k)
			}
		}
	}

	var html bytes.Buffer
	if err := WriteHTML(&html, rep, runs); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if n := strings.Count(h, `aria-label="ready replicas of `); n != 1 {
		t.Errorf("want one chart per workload (1), got %d", n)
	}
	if n := strings.Count(h, `aria-label="nodes in `); n != 2 {
		t.Errorf("want one node chart per mode (2), got %d", n)
	}
	for _, forbidden := range []string{"<script", "http://", "https://fonts", "@import"} {
		if strings.Contains(strings.ReplaceAll(h, `xmlns="http://www.w3.org/2000/svg"`, ""), forbidden) {
			t.Errorf("report.html is not self-contained: contains %q", forbidden)
		}
	}
	if !strings.Contains(h, "PDB floor") || !strings.Contains(h, "reclaim node-1") {
		t.Errorf("report.html lacks the PDB floor or event markers")
	}
	table := rep.String()
	if !strings.Contains(table, "shortened for the demo: activeDuration 3m") || !strings.Contains(table, "baseline  shop/web") {
		t.Errorf("table:\n%s", table)
	}
}

func TestSummarizeResumesAndMonthlyCost(t *testing.T) {
	r := run("lifeboat", 3*time.Second, []int32{12, 12, 12, 12})
	r.RunsPerMonth, r.LifeboatDollarsPerMonth, r.OverprovisioningDollarsPerMonth = 4, 13.567, 196.224
	for i, ms := range []int{40, 10, 30, 20} {
		r.Resumes = append(r.Resumes, Resume{Node: "pool-" + string(rune('a'+i)),
			ToStartRequested: time.Duration(ms) * time.Millisecond, ToReady: time.Duration(20000+ms) * time.Millisecond})
	}
	r.Resumes = append(r.Resumes, Resume{Node: "unknown", ToStartRequested: -1, ToReady: -1})
	res := Summarize(r)
	n := res.Nodes
	// nearest rank over 4 samples: p50 = 2nd (20 ms), p99 = 4th (40 ms); the unknown one is left out.
	if n.ResumeStartP50Seconds != 0.02 || n.ResumeStartP99Seconds != 0.04 {
		t.Errorf("notice → start p50/p99 = %v/%v, want 0.02/0.04", n.ResumeStartP50Seconds, n.ResumeStartP99Seconds)
	}
	if n.ResumeReadyP50Seconds != 20.02 || n.ResumeReadyP99Seconds != 20.04 {
		t.Errorf("notice → ready p50/p99 = %v/%v, want 20.02/20.04", n.ResumeReadyP50Seconds, n.ResumeReadyP99Seconds)
	}
	if c := res.Cost; c.RunsPerMonth != 4 || c.LifeboatDollarsPerMonth != 13.57 || c.OverprovisioningDollarsPerMonth != 196.22 {
		t.Errorf("monthly cost %+v", c)
	}
	table := New("s", nil, 0.35, []*Run{r}).String()
	if !strings.Contains(table, "0.020 / 0.040") || !strings.Contains(table, "ratio 0.07") {
		t.Errorf("table lacks resume latency or the monthly ratio:\n%s", table)
	}
}

func TestSummarizeReplicaLoss(t *testing.T) {
	tests := []struct {
		name        string
		interval    time.Duration
		noticeAt    time.Duration // negative: no notice marker
		readies     []int32
		wantBelow   float64
		wantLost    float64
		wantMinRdy  int32
		wantBelowFl float64
	}{
		{name: "dip after the notice", interval: time.Second, noticeAt: 0,
			readies: []int32{12, 12, 9, 9, 10, 12}, wantBelow: 3, wantLost: 3 + 3 + 2, wantMinRdy: 9},
		{name: "start-up ramp before the notice is not counted", interval: time.Second, noticeAt: 3 * time.Second,
			readies: []int32{0, 4, 11, 12, 12, 9, 9, 10, 12}, wantBelow: 3, wantLost: 8, wantMinRdy: 9},
		{name: "outage to zero", interval: time.Second, noticeAt: time.Second,
			readies: []int32{12, 12, 6, 0, 0, 8, 12}, wantBelow: 4, wantLost: 6 + 12 + 12 + 4, wantMinRdy: 0, wantBelowFl: 4},
		{name: "surge above replicas is no credit", interval: time.Second, noticeAt: 0,
			readies: []int32{12, 14, 11, 13, 12}, wantBelow: 1, wantLost: 1, wantMinRdy: 11},
		{name: "half-second samples", interval: 500 * time.Millisecond, noticeAt: 0,
			readies: []int32{12, 10, 10, 11, 12}, wantBelow: 1.5, wantLost: 0.5 * (2 + 2 + 1), wantMinRdy: 10},
		{name: "no notice: every sample counts", interval: time.Second, noticeAt: -1,
			readies: []int32{11, 12, 12, 10}, wantBelow: 2, wantLost: 3, wantMinRdy: 10},
		{name: "undisturbed", interval: time.Second, noticeAt: 0,
			readies: []int32{12, 12, 12}, wantMinRdy: 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Run{Mode: "baseline", Interval: tt.interval, Workloads: map[string]WorkloadInfo{"shop/web": {Replicas: 12, PDBFloor: 9}}}
			if tt.noticeAt >= 0 {
				r.Markers = []Marker{{At: tt.noticeAt, Kind: "notice"}}
			}
			for i, v := range tt.readies {
				r.Samples = append(r.Samples, Sample{At: time.Duration(i) * tt.interval, Workloads: map[string]int32{"shop/web": v}})
			}
			w := Summarize(r).Workloads["shop/web"]
			if w.SecondsBelowReplicas != tt.wantBelow || w.ReplicaSecondsLost != tt.wantLost {
				t.Errorf("seconds_below_replicas %v, replica_seconds_lost %v; want %v, %v", w.SecondsBelowReplicas, w.ReplicaSecondsLost, tt.wantBelow, tt.wantLost)
			}
			if w.MinReady != tt.wantMinRdy || w.SecondsBelowFloor != tt.wantBelowFl {
				t.Errorf("min_ready %d, seconds_below_floor %v; want %d, %v", w.MinReady, w.SecondsBelowFloor, tt.wantMinRdy, tt.wantBelowFl)
			}
		})
	}
}

// wr is a workload result with the figures Worse compares.
func wr(belowFloor, zero, lost, recovery float64, killed int, minReady int32) *WorkloadResult {
	return &WorkloadResult{Replicas: 12, PDBFloor: 9, MinReady: minReady, SecondsBelowFloor: belowFloor, SecondsZeroReady: zero,
		ReplicaSecondsLost: lost, RecoverySeconds: recovery, PodsKilledAtReclaim: killed, Protected: true}
}

func TestWorse(t *testing.T) {
	ok := wr(0, 0, 0, 0, 0, 12)
	tests := []struct {
		name     string
		base, lb *WorkloadResult
		want     []Regression
	}{
		{"identical", ok, ok, nil},
		{"lifeboat better everywhere", wr(30, 10, 2310, 90, 3, 5), ok, nil},
		{"within 2 s of a small baseline", wr(1, 0, 0, 10, 0, 12), wr(3, 2, 2, 12, 0, 12), nil},
		{"just beyond 2 s", wr(1, 0, 0, 10, 0, 12), wr(3.5, 0, 0, 10, 0, 12),
			[]Regression{{"shop/web", "seconds_below_floor", 1, 3.5, false}}},
		{"within 5 % of a large baseline", wr(0, 0, 1000, 200, 0, 12), wr(0, 0, 1050, 210, 0, 12), nil},
		{"beyond 5 % of a large baseline", wr(0, 0, 1000, 200, 0, 12), wr(0, 0, 1051, 211, 0, 12),
			[]Regression{{"shop/web", "replica_seconds_lost", 1000, 1051, false}, {"shop/web", "recovery_seconds", 200, 211, false}}},
		{"zero ready", wr(0, 118, 0, 0, 0, 0), wr(0, 211, 0, 0, 0, 0),
			[]Regression{{"shop/web", "seconds_zero_ready", 118, 211, false}}},
		{"one more Pod killed is worse", wr(0, 0, 0, 0, 2, 12), wr(0, 0, 0, 0, 3, 12),
			[]Regression{{"shop/web", "pods_killed_at_reclaim", 2, 3, false}}},
		{"one fewer ready is worse", wr(0, 0, 0, 0, 0, 10), wr(0, 0, 0, 0, 0, 9),
			[]Regression{{"shop/web", "min_ready", 10, 9, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Modes: map[string]*ModeResult{
				"baseline": {Workloads: map[string]*WorkloadResult{"shop/web": tt.base}},
				"lifeboat": {Workloads: map[string]*WorkloadResult{"shop/web": tt.lb}},
			}}
			got := rep.Worse()
			if got == nil {
				t.Fatal("Worse is nil with both modes present, want a (possibly empty) list")
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Worse = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("Worse[%d] = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}

	// Only workloads in both modes, sorted; no comparison without both modes.
	rep := &Report{Modes: map[string]*ModeResult{
		"baseline":         {Workloads: map[string]*WorkloadResult{"shop/web": ok, "shop/api": ok, "only/baseline": ok}},
		"lifeboat":         {Workloads: map[string]*WorkloadResult{"shop/web": wr(0, 0, 0, 0, 1, 12), "shop/api": wr(0, 0, 0, 0, 0, 11), "only/lifeboat": wr(99, 99, 99, 99, 9, 0)}},
		"overprovisioning": {Workloads: map[string]*WorkloadResult{"shop/web": wr(99, 99, 99, 99, 9, 0)}},
	}}
	want := []Regression{{"shop/api", "min_ready", 12, 11, false}, {"shop/web", "pods_killed_at_reclaim", 0, 1, false}}
	if got := rep.Worse(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Worse = %+v, want %+v", got, want)
	}
	delete(rep.Modes, "baseline")
	if got := rep.Worse(); got != nil {
		t.Errorf("Worse without a baseline = %+v, want nil", got)
	}
}

func TestOutcome(t *testing.T) {
	rep := &Report{Scenario: "s", Modes: map[string]*ModeResult{
		"baseline": {Workloads: map[string]*WorkloadResult{
			"shop/web":   {Replicas: 12, MinReady: 9, ReplicaSecondsLost: 2310, Protected: true},
			"shop/batch": {Replicas: 4, MinReady: 0, SecondsZeroReady: 118, ReplicaSecondsLost: 600, Protected: true},
			"shop/cache": {Replicas: 2, MinReady: 2},
		}},
		"lifeboat": {Workloads: map[string]*WorkloadResult{
			"shop/web":   {Replicas: 12, MinReady: 12, Protected: true},
			"shop/batch": {Replicas: 4, MinReady: 0, SecondsZeroReady: 211, ReplicaSecondsLost: 600, Protected: true},
			"shop/cache": {Replicas: 2, MinReady: 2},
		}},
	}}
	want := []string{
		"shop/batch: Lifeboat lost 600 replica-seconds (min ready 0/4), Karpenter alone 600 (min ready 0/4)",
		"shop/web: Lifeboat lost 0 replica-seconds (min ready 12/12), Karpenter alone 2,310 (min ready 9/12)",
		"WORSE with Lifeboat: shop/batch seconds_zero_ready 211 s vs 118 s (Karpenter alone)",
	}
	got := rep.Outcome()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Outcome:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if table := rep.String(); !strings.HasPrefix(table, strings.Join(want, "\n")+"\n\nscenario s\n") {
		t.Errorf("the table does not open with the outcome:\n%s", table)
	}

	rep.Modes["lifeboat"].Workloads["shop/batch"].SecondsZeroReady = 118
	if got := rep.Outcome(); got[len(got)-1] != "No workload did worse with Lifeboat than with Karpenter alone." {
		t.Errorf("Outcome without regressions ends %q", got[len(got)-1])
	}
	delete(rep.Modes, "lifeboat")
	if got := rep.Outcome(); got != nil {
		t.Errorf("Outcome with one mode = %q, want none", got)
	}
	if !strings.HasPrefix(rep.String(), "scenario s\n") {
		t.Errorf("a one-mode table must open with the scenario:\n%s", rep.String())
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 0.4: "0", -0.4: "0", 8: "8", 999.5: "1,000", 2310.4: "2,310",
		123456: "123,456", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestReportJSONRegressions(t *testing.T) {
	decode := func(rep *Report) map[string]any {
		t.Helper()
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	// baseline drops to 8 then 0 (lost 4 + 12); lifeboat loses one replica for 2 s (2).
	runs := []*Run{
		run("baseline", 2*time.Second, []int32{12, 12, 8, 0, 12}),
		run("lifeboat", 2*time.Second, []int32{12, 12, 11, 11, 12}),
	}
	doc := decode(New("s", nil, 0.35, runs))
	regs, ok := doc["regressions"].([]any)
	if !ok || len(regs) != 0 {
		t.Errorf("regressions = %#v, want an empty list", doc["regressions"])
	}
	w := doc["modes"].(map[string]any)["baseline"].(map[string]any)["workloads"].(map[string]any)["shop/web"].(map[string]any)
	if w["seconds_below_replicas"] != 2.0 || w["replica_seconds_lost"] != 16.0 {
		t.Errorf("baseline shop/web = %v", w)
	}

	// Swapped: lifeboat is the one that fell to zero.
	runs[0].Mode, runs[1].Mode = "lifeboat", "baseline"
	rep := New("s", nil, 0.35, runs)
	doc = decode(rep)
	regs, _ = doc["regressions"].([]any)
	var metrics []string
	for _, r := range regs {
		m := r.(map[string]any)
		if m["workload"] != "shop/web" {
			t.Errorf("regression %v", m)
		}
		metrics = append(metrics, m["metric"].(string))
	}
	// 2 s below floor and 1 s at zero are within the sampling slack (2 s); 16 replica-seconds
	// against 2 and a lowest ready of 0 against 11 are not.
	if got := strings.Join(metrics, ","); got != "replica_seconds_lost,min_ready" {
		t.Errorf("regressed metrics %s", got)
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, rep, runs); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	for _, want := range []string{"<h2>Outcome</h2>", `<li class="worse">WORSE with Lifeboat: shop/web replica_seconds_lost 16 replica-seconds vs 2 replica-seconds (Karpenter alone)</li>`,
		"<th>replica-seconds lost</th>", "<th>below replicas (s)</th>", `<td class="worse">16</td>`} {
		if !strings.Contains(h, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}

	// One mode: nothing to compare, no regressions key.
	doc = decode(New("s", nil, 0.35, runs[:1]))
	if _, ok := doc["regressions"]; ok {
		t.Errorf("a one-mode report has regressions: %v", doc["regressions"])
	}
}

func TestCautionsOnOvercommittedNodes(t *testing.T) {
	run := func(mode string, over ...int) *Run {
		r := &Run{Mode: mode, Interval: time.Second}
		for i, n := range over {
			r.Samples = append(r.Samples, Sample{At: time.Duration(i) * time.Second, Workloads: map[string]int32{}, Overcommitted: n})
		}
		return r
	}
	rep := New("s", nil, 0, []*Run{run("baseline", 0, 0, 0), run("lifeboat", 3, 117, 40)})
	if got := rep.Modes["lifeboat"].Nodes.OvercommittedNodesPeak; got != 117 {
		t.Errorf("lifeboat overcommitted peak = %d, want 117", got)
	}
	if got := rep.Modes["baseline"].Nodes.OvercommittedNodesPeak; got != 0 {
		t.Errorf("baseline overcommitted peak = %d, want 0", got)
	}
	got := rep.Cautions()
	if len(got) != 1 || !strings.HasPrefix(got[0], "CAUTION lifeboat: up to 117 node(s) held more Pods than they fit") {
		t.Fatalf("Cautions = %q, want one line for the lifeboat mode", got)
	}
	if table := rep.String(); !strings.Contains(table, got[0]+"\n\nscenario s\n") {
		t.Errorf("the table does not show the caution before the figures:\n%s", table)
	}
	var b strings.Builder
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"overcommitted_nodes_peak": 117`) {
		t.Errorf("report.json lacks overcommitted_nodes_peak:\n%s", b.String())
	}
	if New("s", nil, 0, []*Run{run("baseline", 0)}).Cautions() != nil {
		t.Error("a faithful run has no caution")
	}
}

// TestExposureDiffers: a workload the market hit differently in the two modes gets a line in
// Cautions, its regressions are marked (not dropped), and pods_noticed is in report.json, the
// table and the HTML table.
func TestExposureDiffers(t *testing.T) {
	run := func(mode string, infos map[string]WorkloadInfo) *Run {
		return &Run{Mode: mode, Interval: time.Second, Workloads: infos,
			Samples: []Sample{{At: 0, Workloads: map[string]int32{"shop/frontend-zero": 2, "shop/web": 4}}}}
	}
	rep := New("s", nil, 0, []*Run{
		run("baseline", map[string]WorkloadInfo{
			"shop/frontend-zero": {Replicas: 2, PDBFloor: 2, Noticed: 0},
			"shop/web":           {Replicas: 4, PDBFloor: 3, Noticed: 2, Killed: 1},
		}),
		run("lifeboat", map[string]WorkloadInfo{
			"shop/frontend-zero": {Replicas: 2, PDBFloor: 2, Noticed: 2, Killed: 1},
			"shop/web":           {Replicas: 4, PDBFloor: 3, Noticed: 2, Killed: 2},
		}),
	})
	if got := rep.Modes["lifeboat"].Workloads["shop/frontend-zero"].PodsNoticed; got != 2 {
		t.Errorf("lifeboat pods_noticed = %d, want 2", got)
	}
	want := "EXPOSURE differs: shop/frontend-zero 2 Pods noticed with Lifeboat, 0 with Karpenter alone — its comparison is not like for like"
	if got := rep.Cautions(); len(got) != 1 || got[0] != want {
		t.Errorf("Cautions = %q, want [%q]", got, want)
	}
	wantRegs := []Regression{
		{"shop/frontend-zero", "pods_killed_at_reclaim", 0, 1, true},
		{"shop/web", "pods_killed_at_reclaim", 1, 2, false},
	}
	if got := rep.Worse(); !slices.Equal(got, wantRegs) {
		t.Errorf("Worse = %+v, want %+v", got, wantRegs)
	}
	outcome := strings.Join(rep.Outcome(), "\n")
	for _, l := range []string{
		"WORSE with Lifeboat: shop/frontend-zero pods_killed_at_reclaim 1 vs 0 (Karpenter alone) — exposure differs, not like for like",
		"WORSE with Lifeboat: shop/web pods_killed_at_reclaim 2 vs 1 (Karpenter alone)\n",
	} {
		if !strings.Contains(outcome+"\n", l) {
			t.Errorf("Outcome lacks %q:\n%s", l, outcome)
		}
	}
	table := rep.String()
	if !strings.Contains(table, want) || !strings.Contains(table, "PODS NOTICED") {
		t.Errorf("the table lacks the exposure line or column:\n%s", table)
	}
	var b strings.Builder
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"pods_noticed": 2`, `"exposure_differs": true`} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report.json lacks %s:\n%s", s, b.String())
		}
	}
	var h strings.Builder
	if err := WriteHTML(&h, rep, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.String(), "<th>Pods noticed</th>") || !strings.Contains(h.String(), "EXPOSURE differs: shop/frontend-zero") {
		t.Errorf("report.html lacks the Pods noticed column or the exposure line")
	}

	// The same exposure: no line.
	same := New("s", nil, 0, []*Run{
		run("baseline", map[string]WorkloadInfo{"shop/web": {Replicas: 4, Noticed: 2}}),
		run("lifeboat", map[string]WorkloadInfo{"shop/web": {Replicas: 4, Noticed: 2}}),
	})
	if got := same.ExposureDiffs(); got != nil {
		t.Errorf("ExposureDiffs with equal exposure = %q", got)
	}
}

// TestBootLag: Karpenter's simulated boots apart between the modes (the machine lagged in one)
// give a caution; within max(5 s, 10 %) of each other, or missing in a mode, none. The median
// is in report.json and the table.
func TestBootLag(t *testing.T) {
	run := func(mode string, boots ...time.Duration) *Run {
		return &Run{Mode: mode, Interval: time.Second, KarpenterBoots: boots,
			Samples: []Sample{{At: 0, Workloads: map[string]int32{}}}}
	}
	s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	// many repeats the boots to bootLagMinNodes or more.
	many := func(ds ...time.Duration) []time.Duration {
		var out []time.Duration
		for len(out) < bootLagMinNodes {
			out = append(out, ds...)
		}
		return out
	}
	for _, tc := range []struct {
		name               string
		baseline, lifeboat []time.Duration
		wantCaution        bool
	}{
		{name: "both on time", baseline: many(s(58), s(60), s(63)), lifeboat: many(s(57), s(61), s(66))},
		{name: "within 10 %", baseline: many(s(60)), lifeboat: many(s(65.9))},
		{name: "lifeboat mode lagged (session 15's scale run)", baseline: many(s(59), s(59.8), s(78.7)), lifeboat: many(s(70), s(78.3), s(98.5)), wantCaution: true},
		{name: "baseline lagged", baseline: many(s(80)), lifeboat: many(s(60)), wantCaution: true},
		{name: "too few nodes for a median (make demo seed 7: 2 and 5 nodes)", baseline: []time.Duration{s(60), s(68), s(75), s(52), s(70)}, lifeboat: []time.Duration{s(49), s(57)}},
		{name: "no Karpenter node in one mode", baseline: many(s(60))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := New("s", nil, 0, []*Run{run("baseline", tc.baseline...), run("lifeboat", tc.lifeboat...)})
			var got []string
			for _, l := range rep.Cautions() {
				if strings.HasPrefix(l, "CAUTION the simulated kubelets lagged") {
					got = append(got, l)
				}
			}
			if (len(got) == 1) != tc.wantCaution || len(got) > 1 {
				t.Fatalf("boot cautions %q, want one: %v", got, tc.wantCaution)
			}
		})
	}
	rep := New("s", nil, 0, []*Run{run("baseline", many(s(59), s(59.8), s(78.7))...), run("lifeboat", many(s(70), s(78.3), s(98.5))...)})
	want := "CAUTION the simulated kubelets lagged: Karpenter's nodes turned Ready 78.3 s after launch (median) with Lifeboat, 59.8 s with Karpenter alone"
	if got := rep.Cautions(); len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("Cautions = %q, want one starting %q", got, want)
	}
	var b strings.Builder
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"karpenter_boot_p50_seconds": 78.3`) {
		t.Errorf("report.json lacks karpenter_boot_p50_seconds:\n%s", b.String())
	}
	if table := rep.String(); !strings.Contains(table, "NODE BOOT p50 (s)") || !strings.Contains(table, "59.8") {
		t.Errorf("the table lacks the node boot column:\n%s", table)
	}
}

// TestLayoutDiffs: a workload whose share of nodes shared with other workloads at t0 differs by
// more than a quarter between the modes gets a caution (session 28's scale-quarter run: 9 of 56
// with Lifeboat, 42 of 53 alone); closer shares, a workload missing in a mode, one with no
// layout recorded or on fewer than five nodes in a mode get none. The figures are in report.json.
func TestLayoutDiffs(t *testing.T) {
	run := func(mode string, nodes, shared int) *Run {
		return &Run{Mode: mode, Interval: time.Second,
			Workloads: map[string]WorkloadInfo{"jobs/workers": {Replicas: 400, NodesAtStart: nodes, SharedNodesAtStart: shared}},
			Samples:   []Sample{{At: 0, Workloads: map[string]int32{"jobs/workers": 400}}}}
	}
	for _, tc := range []struct {
		name            string
		bNodes, bShared int
		lNodes, lShared int
		wantCaution     bool
	}{
		{name: "session 28's scale-quarter layouts", bNodes: 53, bShared: 42, lNodes: 56, lShared: 9, wantCaution: true},
		{name: "alike", bNodes: 30, bShared: 3, lNodes: 31, lShared: 2},
		{name: "a quarter apart exactly", bNodes: 4, bShared: 2, lNodes: 4, lShared: 1},
		{name: "no layout recorded (an older run)", bNodes: 0, lNodes: 56, lShared: 9},
		{name: "too few nodes for a share (make demo seed 99's 4-Pod Job)", bNodes: 2, bShared: 1, lNodes: 4, lShared: 4},
		{name: "five nodes each", bNodes: 5, bShared: 1, lNodes: 5, lShared: 5, wantCaution: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := New("s", nil, 0, []*Run{run("baseline", tc.bNodes, tc.bShared), run("lifeboat", tc.lNodes, tc.lShared)})
			got := rep.LayoutDiffs()
			if (len(got) == 1) != tc.wantCaution || len(got) > 1 {
				t.Fatalf("LayoutDiffs = %q, want a line: %v", got, tc.wantCaution)
			}
		})
	}
	rep := New("s", nil, 0, []*Run{run("baseline", 53, 42), run("lifeboat", 56, 9)})
	want := "LAYOUT differs: jobs/workers shared 9 of its 56 nodes with other workloads at t0 with Lifeboat, 42 of 53 with Karpenter alone"
	if got := rep.Cautions(); len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("Cautions = %q, want one starting %q", got, want)
	}
	var b strings.Builder
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"nodes_at_start": 56`, `"shared_nodes_at_start": 9`} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report.json lacks %s", s)
		}
	}
	if New("s", nil, 0, []*Run{run("baseline", 53, 42)}).LayoutDiffs() != nil {
		t.Errorf("LayoutDiffs with one mode is not nil")
	}
}

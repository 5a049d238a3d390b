package report

import (
	"bytes"
	"encoding/json"
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
	rep := New("monday-reclaim", []string{"activeDuration 3m"}, runs)
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
	table := New("s", nil, []*Run{r}).String()
	if !strings.Contains(table, "0.020 / 0.040") || !strings.Contains(table, "ratio 0.07") {
		t.Errorf("table lacks resume latency or the monthly ratio:\n%s", table)
	}
}

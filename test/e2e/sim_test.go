// Package e2e runs the product end to end: the compressed monday-reclaim scenario on the real
// local control plane, once with Karpenter alone and once with Lifeboat's three binaries and
// the AWS emulator, and checks that Lifeboat turns the reclaim into a non-event.
package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

func TestMondayReclaimCompressed(t *testing.T) {
	s, rep, runs, out := runScenario(t, "monday-reclaim-compressed", 20*time.Minute)

	base, lb := rep.Modes["baseline"], rep.Modes["lifeboat"]
	bw, lw := base.Workloads["shop/web"], lb.Workloads["shop/web"]
	if bw.SecondsBelowFloor == 0 && bw.PodsKilledAtReclaim == 0 {
		t.Errorf("baseline survived (%+v): the scenario is not hard enough to prove anything", bw)
	}
	if lw.SecondsBelowFloor != 0 || lw.PodsKilledAtReclaim != 0 {
		t.Errorf("with Lifeboat the web service fell below its PDB floor for %.0f s and lost %d Pods at reclaim", lw.SecondsBelowFloor, lw.PodsKilledAtReclaim)
	}
	// The bridge: the warm pool covers the burst, so the protected Deployment keeps every
	// ready replica (Karpenter alone: its PDB floor).
	if lw.MinReady != lw.Replicas || lw.ReplicaSecondsLost > 0.05*bw.ReplicaSecondsLost {
		t.Errorf("with Lifeboat the web service fell to %d of %d ready and lost %.0f replica-seconds (Karpenter alone: %.0f)", lw.MinReady, lw.Replicas, lw.ReplicaSecondsLost, bw.ReplicaSecondsLost)
	}
	// A StatefulSet cannot surge: its held Pods move one at a time, never two down, and none is
	// alive at the reclaim.
	if st := lb.Workloads["shop/stream"]; st == nil || st.MinReady < st.Replicas-1 || st.PodsKilledAtReclaim != 0 || st.SecondsBelowFloor != 0 {
		t.Errorf("with Lifeboat the StatefulSet: %+v (at most one replica down at a time, none killed)", st)
	}
	// Per workload, the figures that do not depend on run-to-run timing noise: never more Pods
	// killed at the reclaim; for the workloads with a PDB, never fewer ready replicas at the
	// worst moment and no longer below the floor. The rest of the regression check
	// (report.Worse: zero-ready time, replica-seconds, recovery) is logged, not asserted: a
	// Job's figures move in steps of its re-creation back-off (10 s doubling) from run to run in
	// either mode (the same scenario measured 38 s and 222 s without a ready Pod with Karpenter
	// alone), and the StatefulSet's recovery includes the handoff's second move
	// (docs/WARMPOOL.md "Bridge"). docs/BENCHMARKS.md reports them over several seeds.
	for name, l := range lb.Workloads {
		b := base.Workloads[name]
		if b == nil {
			continue
		}
		if l.PodsKilledAtReclaim > b.PodsKilledAtReclaim {
			t.Errorf("%s: %d Pods killed at the reclaim with Lifeboat, %d with Karpenter alone", name, l.PodsKilledAtReclaim, b.PodsKilledAtReclaim)
		}
		if l.PDBFloor > 0 && (l.MinReady < b.MinReady || l.SecondsBelowFloor > b.SecondsBelowFloor+2) {
			t.Errorf("%s worse with Lifeboat: min ready %d (alone %d), below floor %.0f s (alone %.0f s)",
				name, l.MinReady, b.MinReady, l.SecondsBelowFloor, b.SecondsBelowFloor)
		}
	}
	for _, r := range rep.Worse() {
		t.Logf("regression check: %s %s %.1f with Lifeboat, %.1f with Karpenter alone", r.Workload, r.Metric, r.Lifeboat, r.Baseline)
	}
	// Logged, not asserted: the two schedulers' race for the same free room is a known open
	// defect (issue 13; docs/SIMULATION.md "Overcommitted nodes").
	t.Logf("overcommitted nodes at the worst sample: baseline %d, lifeboat %d", base.Nodes.OvercommittedNodesPeak, lb.Nodes.OvercommittedNodesPeak)
	if lb.Nodes.LifeboatResumed == 0 {
		t.Errorf("no lifeboat node was resumed")
	}
	if lb.Nodes.KarpenterLaunched == 0 {
		t.Errorf("Karpenter launched no replacement in lifeboat mode")
	}
	var lifeboatRun *report.Run
	for _, r := range runs {
		if r.Mode == "lifeboat" {
			lifeboatRun = r
		}
	}
	// Handed off and terminated, pool refilled: by the end no node is active or draining and
	// the pool is back to its standby size.
	last := lifeboatRun.Samples[len(lifeboatRun.Samples)-1]
	if last.Nodes["lifeboat-active"]+last.Nodes["lifeboat-draining"] != 0 {
		t.Errorf("lifeboat nodes still active/draining at the end: %v", last.Nodes)
	}
	sawDraining := false
	for _, smp := range lifeboatRun.Samples {
		if smp.Nodes["lifeboat-draining"] > 0 {
			sawDraining = true
		}
	}
	if !sawDraining {
		t.Errorf("no lifeboat node was ever handed off (draining)")
	}
	if got := last.Nodes["lifeboat-standby"]; got < 4 {
		t.Errorf("pool not refilled: %d standby nodes at the end, want 4", got)
	}

	// report.json has the documented fields; report.html one chart per workload.
	var doc struct {
		Scenario string `json:"scenario"`
		Modes    map[string]struct {
			Workloads map[string]map[string]any `json:"workloads"`
		} `json:"modes"`
	}
	jb, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jb, &doc); err != nil || doc.Scenario != s.Name || len(doc.Modes) != 2 {
		t.Fatalf("report.json: %v %+v", err, doc)
	}
	hb, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(hb), `aria-label="ready replicas of `); n != len(s.Workloads) {
		t.Errorf("report.html has %d workload charts, want %d", n, len(s.Workloads))
	}
}

// runScenario plays pkg/sim/testdata/<name>.yaml in every mode it lists, in parallel, with
// Lifeboat installed from bin/ in lifeboat mode, and logs the report.
func runScenario(t *testing.T, name string, timeout time.Duration) (*scenario.Scenario, *report.Report, []*report.Run, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs two full local control planes for minutes; run without -short (make test)")
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "pkg/sim/testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse(name, b)
	if err != nil {
		t.Fatal(err)
	}
	binDir := localcluster.DefaultBinDir()
	installer, err := sim.NewLifeboatInstaller(binDir)
	if err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), timeout)
	defer cancel()
	out := t.TempDir()
	rep, runs, err := sim.Run(ctx, s, sim.Options{BinDir: binDir, OutDir: out, Lifeboat: installer, Parallel: true, Progress: logWriter{t}})
	if err != nil {
		t.Fatalf("%v\n(component logs under %s)", err, out)
	}
	t.Logf("\n%s", rep.String())
	return s, rep, runs, out
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestLateLifeboat is the bridge's failure path on the real components: the lifeboats are not
// Ready by the bridge's resume timeout, so every hold is released and Karpenter drains as it
// would alone. Lifeboat may not do worse than Karpenter alone on any figure.
func TestLateLifeboat(t *testing.T) {
	s, rep, _, _ := runScenario(t, "late-lifeboat", 15*time.Minute)
	// The lifeboats were Ready only after the bridge's resume timeout (half the notice): the
	// holds were released, and the drain ran as without Lifeboat from then on.
	if n := rep.Modes["lifeboat"].Nodes; n.LifeboatResumed == 0 || n.ResumeReadyP50Seconds < s.Timing.Notice.Seconds()/2 {
		t.Errorf("the scenario does not exercise a late resume: %d resumed, Ready after %.1f s (p50)", n.LifeboatResumed, n.ResumeReadyP50Seconds)
	}
	base, lb := rep.Modes["baseline"].Workloads["shop/web"], rep.Modes["lifeboat"].Workloads["shop/web"]
	if lb.MinReady < base.MinReady || lb.PodsKilledAtReclaim > base.PodsKilledAtReclaim || lb.SecondsBelowFloor > base.SecondsBelowFloor+2 {
		t.Errorf("worse with a late lifeboat than with Karpenter alone: min ready %d (alone %d), killed %d (alone %d), below floor %.0f s (alone %.0f s)",
			lb.MinReady, base.MinReady, lb.PodsKilledAtReclaim, base.PodsKilledAtReclaim, lb.SecondsBelowFloor, base.SecondsBelowFloor)
	}
	// The unprotected workers: never more Pods killed at the reclaim than alone.
	if b, l := rep.Modes["baseline"].Workloads["jobs/workers"], rep.Modes["lifeboat"].Workloads["jobs/workers"]; l.PodsKilledAtReclaim > b.PodsKilledAtReclaim {
		t.Errorf("jobs/workers: %d Pods killed at the reclaim with Lifeboat, %d with Karpenter alone", l.PodsKilledAtReclaim, b.PodsKilledAtReclaim)
	}
	// Each mode recorded its starting layout (after the two waves of ramp: byPriority).
	for _, m := range []string{"baseline", "lifeboat"} {
		for name, w := range rep.Modes[m].Workloads {
			if w.NodesAtStart == 0 {
				t.Errorf("%s %s: no starting layout recorded (nodes_at_start 0)", m, name)
			}
		}
	}
	for _, l := range rep.LayoutDiffs() {
		t.Logf("starting layouts: %s", l)
	}
	for _, r := range rep.Worse() {
		t.Logf("regression check: %s %s %.1f with Lifeboat, %.1f with Karpenter alone", r.Workload, r.Metric, r.Lifeboat, r.Baseline)
	}
}

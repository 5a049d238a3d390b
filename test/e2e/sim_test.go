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

	"github.com/lifeboat-k8s/lifeboat/pkg/sim"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
	"github.com/lifeboat-k8s/lifeboat/test/cluster"
)

func TestMondayReclaimCompressed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two full local control planes for minutes; run without -short (make test)")
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "pkg/sim/testdata/monday-reclaim-compressed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse("monday-reclaim-compressed", b)
	if err != nil {
		t.Fatal(err)
	}
	binDir := cluster.DefaultBinDir()
	installer, err := sim.NewLifeboatInstaller(binDir)
	if err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 20*time.Minute)
	defer cancel()
	out := t.TempDir()
	rep, runs, err := sim.Run(ctx, s, sim.Options{BinDir: binDir, OutDir: out, Lifeboat: installer, Parallel: true, Progress: logWriter{t}})
	if err != nil {
		t.Fatalf("%v\n(component logs under %s)", err, out)
	}
	t.Logf("\n%s", rep.String())

	base, lb := rep.Modes["baseline"], rep.Modes["lifeboat"]
	bw, lw := base.Workloads["shop/web"], lb.Workloads["shop/web"]
	if bw.SecondsBelowFloor == 0 && bw.PodsKilledAtReclaim == 0 {
		t.Errorf("baseline survived (%+v): the scenario is not hard enough to prove anything", bw)
	}
	if lw.SecondsBelowFloor != 0 || lw.PodsKilledAtReclaim != 0 {
		t.Errorf("with Lifeboat the web service fell below its PDB floor for %.0f s and lost %d Pods at reclaim", lw.SecondsBelowFloor, lw.PodsKilledAtReclaim)
	}
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

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

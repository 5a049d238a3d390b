package sim

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// TestBaselineIsHardEnough runs the compressed monday-reclaim with Karpenter alone on the real
// local control plane: the scenario must be hard enough that the web service falls below its
// PDB floor or loses Pods at reclaim — otherwise it proves nothing about Lifeboat.
func TestBaselineIsHardEnough(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a full local control plane with Karpenter for minutes; run without -short")
	}
	b, err := os.ReadFile("testdata/monday-reclaim-compressed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse("monday-reclaim-compressed", b)
	if err != nil {
		t.Fatal(err)
	}
	s.Modes = []scenario.Mode{scenario.ModeBaseline}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 12*time.Minute)
	defer cancel()
	out := t.TempDir()
	rep, runs, err := Run(ctx, s, Options{OutDir: out, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep.String())
	web := rep.Modes["baseline"].Workloads["shop/web"]
	if web.SecondsBelowFloor == 0 && web.PodsKilledAtReclaim == 0 {
		t.Errorf("baseline survived the reclaim (%+v): the scenario is too easy to show anything", web)
	}
	if rep.Modes["baseline"].Nodes.KarpenterLaunched == 0 {
		t.Errorf("Karpenter launched no replacement")
	}
	if n := countKind(runs[0].Markers, "notice"); n != 6 {
		t.Errorf("%d notices, want 6", n)
	}
	if n := countKind(runs[0].Markers, "reclaim"); n != 6 {
		t.Errorf("%d reclaims, want 6", n)
	}
	for _, f := range []string{"report.json", "report.html"} {
		if _, err := os.Stat(out + "/" + f); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

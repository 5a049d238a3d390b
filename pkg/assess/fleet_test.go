package assess_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
	"github.com/lifeboat-k8s/lifeboat/pkg/assess/assesstest"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

var fixedNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestFleetScenario: the scenario written from the fixture fleet passes the scenario validator,
// keeps the eligible workloads only, and scales. ASSESS_SCENARIO_OUT=FILE keeps the file (the
// input of the by-hand `lifeboat sim run` in docs/ASSESS.md).
func TestFleetScenario(t *testing.T) {
	r := assess.Assess(assesstest.NewFleet().Snapshot(), assess.Options{Now: fixedNow})
	s, data, err := r.Scenario(assess.ScenarioOptions{Scale: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.Parse("fleet", data); err != nil {
		t.Fatalf("generated scenario does not validate: %v\n%s", err, data)
	}
	if out := os.Getenv("ASSESS_SCENARIO_OUT"); out != "" {
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]scenario.Workload{}
	for _, w := range s.Workloads {
		names[w.Namespace+"/"+w.Name] = w
	}
	for _, poor := range []string{"shop/orders-db", "shop/reports-db", "shop/local-data", "batch/debug-shell", "batch/legacy-rs"} {
		if _, ok := names[poor]; ok {
			t.Errorf("%s is in the scenario: poor-fit and unsupported kinds stay out", poor)
		}
	}
	if w := names["shop/web"]; w.Replicas != 3 || w.PDBMaxUnavailable != "20%" || w.CPU != "500m" || !w.Protected || w.CapacityType != "spot" {
		t.Errorf("web in the scenario = %+v", w)
	}
	if w := names["shop/api-nopdb"]; w.PDBMaxUnavailable != "20%" {
		t.Errorf("a workload without a PDB gets the suggested one, got %+v", w)
	}
	if w := names["shop/frontend-zero"]; w.PDBMaxUnavailable != "0" {
		t.Errorf("the zero-disruption PDB is kept (that is what the simulation should show), got %+v", w)
	}
	if w := names["batch/nightly-report-cron"]; w.Kind != "Job" || w.Tier != "best-effort" {
		t.Errorf("CronJob becomes a Job, got %+v", w)
	}
	if w := names["shop/norequests"]; w.CPU != "100m" || w.Memory != "128Mi" {
		t.Errorf("no requests → placeholders, got %+v", w)
	}
	if s.WarmPool == nil || s.WarmPool.Size != "4" || s.WarmPool.InstanceTypes[0] != "m5.large" {
		t.Errorf("warm pool = %+v", s.WarmPool)
	}
	if e := s.Events[0]; e.Kind != scenario.EventBurst || e.Count != 3 || e.Pool.CapacityType != "spot" {
		t.Errorf("burst = %+v", e)
	}
	if s.Cluster.SpotDiscount != 0.35 {
		t.Errorf("scenario spotDiscount (Spot's price fraction) = %v, want 0.35", s.Cluster.SpotDiscount)
	}

	half, data, err := r.Scenario(assess.ScenarioOptions{Scale: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.Parse("fleet-half", data); err != nil {
		t.Fatal(err)
	}
	for _, w := range half.Workloads {
		if w.Namespace+"/"+w.Name == "shop/web" && w.Replicas != 2 {
			t.Errorf("scale 0.5: web replicas %d, want ⌈1.5⌉ = 2", w.Replicas)
		}
	}
	if !strings.Contains(strings.Join(half.Shortened, "\n"), "scaled by 0.5") {
		t.Errorf("the scale is not in the shortened list: %v", half.Shortened)
	}
	if _, _, err := r.Scenario(assess.ScenarioOptions{Scale: 2}); err == nil {
		t.Error("scale 2 accepted")
	}
}

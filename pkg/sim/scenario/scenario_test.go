package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestBuiltinsParse(t *testing.T) {
	names := BuiltinNames()
	for _, want := range []string{"monday-reclaim", "regional-crunch", "single-node"} {
		if !strings.Contains(strings.Join(names, ","), want) {
			t.Errorf("built-in %s missing from %v", want, names)
		}
	}
	for _, n := range names {
		s, err := Load(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name != n {
			t.Errorf("%s: name field is %q", n, s.Name)
		}
	}
	s, err := Load("")
	if err != nil || s.Name != DefaultName {
		t.Fatalf("default scenario: %v %v", s, err)
	}
	web := s.Workloads[0]
	if web.Replicas != 12 || web.PDBMaxUnavailable != "20%" || !web.Protected {
		t.Errorf("monday-reclaim web = %+v", web)
	}
	if s.Events[0].Count != 9 || s.Events[0].Spread.Duration != 90*time.Second {
		t.Errorf("monday-reclaim event = %+v", s.Events[0])
	}
}

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	base := func(mut string) string {
		return `name: x
duration: 5m
cluster:
  zones: [a]
  instanceTypes:
  - {name: m5.large, cpu: "2", memory: 8Gi, onDemandPrice: 0.1}
timing:
  karpenterBoot: {mean: 40s}
workloads:
- name: web
  kind: Deployment
  replicas: 3
  cpu: 100m
  memory: 128Mi
` + mut
	}
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", base("colour: blue\n"), []string{"line 15", "colour"}},
		{"bad duration", strings.Replace(base(""), "duration: 5m", "duration: soon", 1), []string{"line 2", "not a duration"}},
		{"negative replicas", strings.Replace(base(""), "replicas: 3", "replicas: -1", 1), []string{"line 12", "workloads[0].replicas", "> 0"}},
		{"bad kind", strings.Replace(base(""), "kind: Deployment", "kind: DaemonSet", 1), []string{"line 11", "workloads[0].kind", "DaemonSet"}},
		{"bad pdb", base("  pdbMaxUnavailable: lots\n"), []string{"line 15", "pdbMaxUnavailable"}},
		{"negative pdb", base("  pdbMaxUnavailable: \"-1\"\n"), []string{"line 15", "workloads[0].pdbMaxUnavailable", "count ≥ 0"}},
		{"pdb above 100%", base("  pdbMaxUnavailable: 101%\n"), []string{"line 15", "workloads[0].pdbMaxUnavailable", "0%..100%"}},
		{"bad min available", base("  pdbMinAvailable: most\n"), []string{"line 15", "workloads[0].pdbMinAvailable", "most"}},
		{"min available percent above 100", base("  pdbMinAvailable: 120%\n"), []string{"line 15", "workloads[0].pdbMinAvailable", "0%..100%"}},
		{"min available above replicas", base("  pdbMinAvailable: 4\n"), []string{"line 15", "workloads[0].pdbMinAvailable", "more than replicas (3)", "\"100%\""}},
		{"both pdb fields", base("  pdbMaxUnavailable: \"1\"\n  pdbMinAvailable: \"2\"\n"),
			[]string{"line 16", "workloads[0].pdbMinAvailable", "mutually exclusive"}},
		{"lifeboat without pool", base("modes: [lifeboat]\n"), []string{"warmPool", "required"}},
		{"event outside duration", base("events:\n- {at: 9m, kind: notice}\n"), []string{"line 16", "events[0].at"}},
		{"event unknown pool type", base("events:\n- {at: 1m, kind: burst, count: 2, pool: {instanceType: x9.huge}}\n"), []string{"events[0].pool.instanceType", "x9.huge"}},
		{"ice needs for", base("events:\n- {at: 1m, kind: ice}\n"), []string{"events[0].for"}},
		{"placement score out of range", base("events:\n- {at: 1m, kind: placement-score, score: 11}\n"), []string{"line 16", "events[0].score", "1 to 10"}},
		{"score on a notice", base("events:\n- {at: 1m, kind: notice, score: 3}\n"), []string{"events[0].score", "only ice and placement-score"}},
		{"reclaim-back without lifeboat", base("reclaimBack: {}\n"), []string{"reclaimBack", "lifeboat mode"}},
		{"reclaim-back window past the end", base("reclaimBack:\n  window: {after: 6m, for: 2m}\n"), []string{"line 16", "reclaimBack.window.after", "duration (5m0s)"}},
		{"reclaim-back window too short", base("reclaimBack:\n  window: {after: 1m, for: 30s}\n"), []string{"reclaimBack.window.for", "at least 1m"}},
		{"reclaim-back bad in-flight", base("reclaimBack:\n  maxInFlight: lots\n"), []string{"line 16", "reclaimBack.maxInFlight", "lots"}},
		{"reclaim-back bad score", base("reclaimBack:\n  minPlacementScore: 12\n"), []string{"reclaimBack.minPlacementScore", "1 to 10"}},
		{"jitter above mean", strings.Replace(base(""), "{mean: 40s}", "{mean: 4s, jitter: 10s}", 1), []string{"line 8", "timing.karpenterBoot"}},
		{"unknown ramp", base("ramp: slowly\n"), []string{"line 15", "ramp", "together or byPriority", "slowly"}},
		{"empty", "", []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("accepted invalid scenario")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Parse("ok.yaml", []byte(base(""))); err != nil {
		t.Fatalf("valid base rejected: %v", err)
	}
	// Zero-disruption and minAvailable PDBs, quoted or not, are real-cluster configurations.
	for _, ok := range []string{
		"  pdbMaxUnavailable: \"0\"\n", "  pdbMaxUnavailable: 0\n", "  pdbMaxUnavailable: 0%\n",
		"  pdbMinAvailable: \"2\"\n", "  pdbMinAvailable: 2\n", "  pdbMinAvailable: 3\n",
		"  pdbMinAvailable: 80%\n", "  pdbMinAvailable: 100%\n", "  pdbMinAvailable: 0\n",
	} {
		if _, err := Parse("ok.yaml", []byte(base(ok))); err != nil {
			t.Errorf("%q rejected: %v", strings.TrimSpace(ok), err)
		}
	}
}

func TestReclaimBackDefaultsAndScores(t *testing.T) {
	s, err := Load("regional-crunch")
	if err != nil {
		t.Fatal(err)
	}
	rb := s.ReclaimBack
	if rb == nil || rb.Window == nil || rb.Window.After.Duration != 9*time.Minute || rb.MaxInFlight != "2" {
		t.Fatalf("regional-crunch reclaimBack = %+v", rb)
	}
	var ice, score *Event
	for i := range s.Events {
		switch s.Events[i].Kind {
		case EventICE:
			ice = &s.Events[i]
		case EventPlacementScore:
			score = &s.Events[i]
		}
	}
	if ice == nil || ice.PlacementScore() != 1 {
		t.Errorf("the crunch's placement score = %v, want the default 1", ice)
	}
	if score == nil || score.PlacementScore() != 4 || score.For.Duration != 2*time.Minute {
		t.Errorf("placement-score event = %+v", score)
	}
	d := &ReclaimBack{}
	d.applyDefaults()
	want := ReclaimBack{MinSpotStability: Duration{time.Minute}, MinPlacementScore: 7, MaxInFlight: "1", MoveTimeout: Duration{5 * time.Minute}, CoolDown: Duration{time.Minute}}
	if d.String() != want.String() || d.MoveTimeout != want.MoveTimeout || d.CoolDown != want.CoolDown {
		t.Errorf("defaults = %+v, want %+v", d, want)
	}
	for v, ok := range map[string]bool{"1": true, "10%": true, "100%": true, "0": false, "101%": false, "-1": false, "a%": false} {
		if validInFlight(v) != ok {
			t.Errorf("validInFlight(%q) = %v", v, !ok)
		}
	}
}

func TestPDBFloor(t *testing.T) {
	tests := []struct {
		name     string
		w        Workload
		want     int32
		wantSpec string // the value as the PDB gets it
	}{
		// maxUnavailable: replicas − ⌈pct × replicas⌉ (the number allowed unavailable rounds up).
		{"20% of 12", Workload{Replicas: 12, PDBMaxUnavailable: "20%"}, 9, "20%"}, // 2.4 → 3 unavailable
		{"20% of 5", Workload{Replicas: 5, PDBMaxUnavailable: "20%"}, 4, "20%"},
		{"10% of 12", Workload{Replicas: 12, PDBMaxUnavailable: "10%"}, 10, "10%"}, // 1.2 → 2
		{"1% of 3", Workload{Replicas: 3, PDBMaxUnavailable: "1%"}, 2, "1%"},       // any percentage > 0 allows one
		{"max 1 of 3", Workload{Replicas: 3, PDBMaxUnavailable: "1"}, 2, "1"},
		{"50% of 1", Workload{Replicas: 1, PDBMaxUnavailable: "50%"}, 0, "50%"},
		{"max 5 of 3", Workload{Replicas: 3, PDBMaxUnavailable: "5"}, 0, "5"},
		{"100% of 7", Workload{Replicas: 7, PDBMaxUnavailable: "100%"}, 0, "100%"},
		{"max 0", Workload{Replicas: 12, PDBMaxUnavailable: "0"}, 12, "0"},
		{"max 0%", Workload{Replicas: 12, PDBMaxUnavailable: "0%"}, 12, "0%"},
		// minAvailable: ⌈pct × replicas⌉ (the number required available rounds up).
		{"min 2 of 5", Workload{Replicas: 5, PDBMinAvailable: "2"}, 2, "2"},
		{"min 80% of 12", Workload{Replicas: 12, PDBMinAvailable: "80%"}, 10, "80%"}, // 9.6 → 10
		{"min 80% of 10", Workload{Replicas: 10, PDBMinAvailable: "80%"}, 8, "80%"},
		{"min 50% of 3", Workload{Replicas: 3, PDBMinAvailable: "50%"}, 2, "50%"}, // 1.5 → 2
		{"min 1% of 12", Workload{Replicas: 12, PDBMinAvailable: "1%"}, 1, "1%"},
		{"min 100%", Workload{Replicas: 12, PDBMinAvailable: "100%"}, 12, "100%"},
		{"min = replicas", Workload{Replicas: 12, PDBMinAvailable: "12"}, 12, "12"},
		{"min 0", Workload{Replicas: 12, PDBMinAvailable: "0"}, 0, "0"},
		{"min 0%", Workload{Replicas: 12, PDBMinAvailable: "0%"}, 0, "0%"},
		{"min above replicas is capped", Workload{Replicas: 3, PDBMinAvailable: "5"}, 3, "5"},
		{"no PDB", Workload{Replicas: 12}, 0, ""},
		{"invalid value", Workload{Replicas: 12, PDBMinAvailable: "x"}, 0, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.PDBFloor(); got != tt.want {
				t.Errorf("floor %d, want %d", got, tt.want)
			}
			if got := tt.w.HasPDB(); got != (tt.wantSpec != "") {
				t.Errorf("HasPDB = %v", got)
			}
			if tt.wantSpec == "" || tt.wantSpec == "x" {
				return
			}
			// The disruption controller's own arithmetic (desiredHealthy) agrees.
			v := intstr.Parse(tt.wantSpec)
			scaled, err := intstr.GetScaledValueFromIntOrPercent(&v, int(tt.w.Replicas), true)
			if err != nil {
				t.Fatal(err)
			}
			want := scaled
			if tt.w.PDBMaxUnavailable != "" {
				want = int(tt.w.Replicas) - scaled
			}
			want = max(0, min(want, int(tt.w.Replicas)))
			if int(tt.want) != want {
				t.Errorf("table says %d, the disruption controller's arithmetic %d", tt.want, want)
			}
		})
	}
}

func TestParsePDBValues(t *testing.T) {
	tests := []struct {
		in        string
		count     int
		percent   int
		isPercent bool
		wantErr   bool
	}{
		{in: "0", count: 0},
		{in: "1", count: 1},
		{in: "12", count: 12},
		{in: "0%", isPercent: true},
		{in: "20%", percent: 20, isPercent: true},
		{in: "100%", percent: 100, isPercent: true},
		{in: "-1", wantErr: true},
		{in: "-5%", wantErr: true},
		{in: "101%", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "2.5%", wantErr: true},
		{in: "%", wantErr: true},
		{in: "x", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		mu, errMax := ParseMaxUnavailable(tt.in)
		ma, errMin := ParseMinAvailable(tt.in)
		for what, err := range map[string]error{"maxUnavailable": errMax, "minAvailable": errMin} {
			if (err != nil) != tt.wantErr {
				t.Errorf("%s %q: error %v, want error %v", what, tt.in, err, tt.wantErr)
			}
		}
		if tt.wantErr {
			continue
		}
		want := MaxUnavailable{IntOrPercent{Count: tt.count, Percent: tt.percent, IsPercent: tt.isPercent}}
		if mu != want || MaxUnavailable(ma) != want {
			t.Errorf("%q: parsed %+v / %+v, want %+v", tt.in, mu, ma, want)
		}
	}
}

func TestRampWaves(t *testing.T) {
	w := func(name, tier string, protected bool) Workload {
		return Workload{Name: name, Tier: tier, Protected: protected}
	}
	web, api := w("web", "stateless", true), w("api", "stateless", true)
	pay, ledger := w("pay", "critical", true), w("ledger", "checkpointed", true)
	batch, workers := w("batch", "best-effort", true), w("workers", "stateless", false)
	names := func(waves [][]Workload) [][]string {
		var out [][]string
		for _, wave := range waves {
			var ns []string
			for _, x := range wave {
				ns = append(ns, x.Name)
			}
			out = append(out, ns)
		}
		return out
	}
	tests := []struct {
		name string
		ramp Ramp
		ws   []Workload
		want [][]string
	}{
		{"together is one wave", RampTogether, []Workload{workers, web, ledger}, [][]string{{"workers", "web", "ledger"}}},
		{"unset is together", "", []Workload{workers, web}, [][]string{{"workers", "web"}}},
		{"by priority, highest first, scenario order within a wave", RampByPriority,
			[]Workload{workers, web, ledger, pay, api}, [][]string{{"pay"}, {"web", "api"}, {"ledger"}, {"workers"}}},
		// Best-effort Pods keep the cluster's default priority under Lifeboat: they ramp with the
		// unprotected ones, as the scheduler would serve them.
		{"best-effort with the unprotected", RampByPriority, []Workload{batch, web, workers}, [][]string{{"web"}, {"batch", "workers"}}},
		{"one priority is one wave", RampByPriority, []Workload{web, api}, [][]string{{"web", "api"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Scenario{Ramp: tt.ramp, Workloads: tt.ws}
			if got := names(s.RampWaves()); !slices.EqualFunc(got, tt.want, slices.Equal[[]string]) {
				t.Errorf("RampWaves() = %v, want %v", got, tt.want)
			}
		})
	}
}

package scenario

import (
	"strings"
	"testing"
	"time"
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
		{"lifeboat without pool", base("modes: [lifeboat]\n"), []string{"warmPool", "required"}},
		{"event outside duration", base("events:\n- {at: 9m, kind: notice}\n"), []string{"line 16", "events[0].at"}},
		{"event unknown pool type", base("events:\n- {at: 1m, kind: burst, count: 2, pool: {instanceType: x9.huge}}\n"), []string{"events[0].pool.instanceType", "x9.huge"}},
		{"ice needs for", base("events:\n- {at: 1m, kind: ice}\n"), []string{"events[0].for"}},
		{"jitter above mean", strings.Replace(base(""), "{mean: 40s}", "{mean: 4s, jitter: 10s}", 1), []string{"line 8", "timing.karpenterBoot"}},
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
}

func TestPDBFloor(t *testing.T) {
	tests := []struct {
		mu       string
		replicas int32
		want     int32
	}{
		{"20%", 12, 9}, // 2.4 rounds up to 3 unavailable
		{"20%", 5, 4},
		{"1", 3, 2},
		{"50%", 1, 0},
		{"5", 3, 0},
	}
	for _, tt := range tests {
		m, err := ParseMaxUnavailable(tt.mu)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Floor(tt.replicas); got != tt.want {
			t.Errorf("%s of %d: floor %d, want %d", tt.mu, tt.replicas, got, tt.want)
		}
	}
	for _, bad := range []string{"0", "-1", "0%", "101%", "x"} {
		if _, err := ParseMaxUnavailable(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

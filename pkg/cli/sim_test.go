package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

func TestSimScenarios(t *testing.T) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"sim", "scenarios"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(scenario.BuiltinNames()) {
		t.Errorf("%d lines for %d built-ins:\n%s", len(lines), len(scenario.BuiltinNames()), out.String())
	}
	for i, n := range scenario.BuiltinNames() {
		s, err := scenario.Load(n)
		if err != nil {
			t.Fatal(err)
		}
		if i < len(lines) && lines[i] != strings.TrimRight(padRight(n, 18)+" "+s.Description, " ") {
			t.Errorf("line %d = %q, want %s and its description", i, lines[i], n)
		}
	}

	out.Reset()
	cmd.SetArgs([]string{"sim", "scenarios", scenario.DefaultName})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	src, _ := scenario.BuiltinSource(scenario.DefaultName)
	if out.String() != string(src) {
		t.Error("sim scenarios NAME does not print the built-in's YAML as is")
	}

	cmd.SetArgs([]string{"sim", "scenarios", "no-such"})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "built-ins:") {
		t.Errorf("unknown scenario: %v", err)
	}
}

func padRight(s string, n int) string {
	for len(s) < n {
		s += " "
	}
	return s
}

package scenario

import (
	"embed"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

//go:embed builtin/*.yaml
var builtins embed.FS

// DefaultName is the scenario `lifeboat sim run` uses without --scenario.
const DefaultName = "monday-reclaim"

// BuiltinNames lists the built-in scenarios.
func BuiltinNames() []string {
	entries, _ := builtins.ReadDir("builtin")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// BuiltinSource returns the YAML of a built-in scenario.
func BuiltinSource(name string) ([]byte, error) {
	b, err := builtins.ReadFile(path.Join("builtin", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("no built-in scenario %q (built-ins: %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	return b, nil
}

// Load resolves a built-in name or a file path.
func Load(nameOrFile string) (*Scenario, error) {
	if nameOrFile == "" {
		nameOrFile = DefaultName
	}
	if b, err := BuiltinSource(nameOrFile); err == nil {
		return Parse(nameOrFile, b)
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("scenario %q is neither a built-in (%s) nor a readable file: %w",
			nameOrFile, strings.Join(BuiltinNames(), ", "), err)
	}
	return Parse(nameOrFile, b)
}

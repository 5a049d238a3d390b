package scenario

import (
	"path/filepath"
	"testing"
)

// Every example scenario in the repository parses: examples cannot go stale.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../../../examples/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example scenarios found: %v", err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

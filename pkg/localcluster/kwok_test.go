package localcluster

import (
	"testing"
	"time"
)

func TestMatchDelay(t *testing.T) {
	rules := []DelayRule{
		{Selector: map[string]string{"lifeboat.dev/pool": "p"}, Delay: 15 * time.Second},
		{Selector: map[string]string{"karpenter.sh/nodepool": "default"}, Delay: 45 * time.Second, Jitter: 10 * time.Second},
	}
	if d := matchDelay(rules, map[string]string{"lifeboat.dev/pool": "p", "karpenter.sh/nodepool": "default"}, 1, "n"); d != 15*time.Second {
		t.Errorf("first match should win: %s", d)
	}
	if d := matchDelay(rules, map[string]string{"other": "x"}, 1, "n"); d != 0 {
		t.Errorf("no match should be 0: %s", d)
	}
	seen := map[time.Duration]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		d := matchDelay(rules, map[string]string{"karpenter.sh/nodepool": "default"}, 7, name)
		if d < 35*time.Second || d > 55*time.Second {
			t.Errorf("%s: %s outside 45s ± 10s", name, d)
		}
		if again := matchDelay(rules, map[string]string{"karpenter.sh/nodepool": "default"}, 7, name); again != d {
			t.Errorf("%s: jitter not deterministic (%s vs %s)", name, d, again)
		}
		seen[d] = true
	}
	if len(seen) < 3 {
		t.Errorf("jitter does not spread: %v", seen)
	}
}

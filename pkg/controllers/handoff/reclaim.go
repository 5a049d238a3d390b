package handoff

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// A Pod moves straight to its seat only where it will stay: not on a node the reclaim under way
// is likely to take next. A Spot reclaim takes many nodes of one capacity pool within minutes,
// so a node that ran in a pool being reclaimed before that pool's first notice is at risk; a
// node launched into the pool since is capacity EC2 granted during the reclaim (Karpenter's
// replacements usually go to the same, cheapest pool), no likelier to go than any other.

// ReclaimedPools maps the capacity pool (telemetry.PoolKey) of each interrupted node to the
// earliest notice among that pool's interrupted nodes (policy.DrainStart; now when a node shows
// none yet). Pure.
func ReclaimedPools(interrupted []*corev1.Node, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range interrupted {
		at, ok := policy.DrainStart(n)
		if !ok {
			at = now
		}
		key := telemetry.PoolKeyFromLabels(n.Labels)
		if first, seen := out[key]; !seen || at.Before(first) {
			out[key] = at
		}
	}
	return out
}

// AtRisk says whether node n is likely the next of a reclaim (reclaimed: ReclaimedPools): it
// is of a capacity pool being reclaimed and ran there before the pool's first notice. Pure.
func AtRisk(n *corev1.Node, reclaimed map[string]time.Time) bool {
	first, ok := reclaimed[telemetry.PoolKeyFromLabels(n.Labels)]
	return ok && n.CreationTimestamp.Time.Before(first)
}

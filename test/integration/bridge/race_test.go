package bridge

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// raceRounds is how often TestRaceKarpenterDrainVsHold repeats the interruption: 10, not the
// issue's 20, unless LIFEBOAT_BRIDGE_RACE_ROUNDS says otherwise. Each round is a whole
// interruption on the real components — Karpenter launches the round's Spot node (≈3 s), the
// bridge holds, surges onto the lifeboat and removes the held Pods (≈3.5 s), then the round
// waits until that lifeboat is handed off (a new protected Pod would land on an active lifeboat,
// not on a Spot node) — and measured 9–16 s on this shared 2-core machine although rounds reuse
// the cluster and the warm pool. 20 rounds (≈4.5 min) alone would take the package's whole
// 5-minute budget; 10 keep the package inside it. Every round races Karpenter's drain against
// the hold afresh (the webhook's log shows Karpenter's first evictions refused by the pending
// hold, before the bridge's annotation, in most rounds). LIFEBOAT_BRIDGE_RACE_ROUNDS=20 runs
// the count.
func raceRounds(t *testing.T) int {
	if v := os.Getenv("LIFEBOAT_BRIDGE_RACE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LIFEBOAT_BRIDGE_RACE_ROUNDS=%q: want a positive number", v)
		}
		return n
	}
	return 10
}

// raceFlags: a 40 s notice (AWS: 120 s). With the Pods' 1 s grace and a 5 s margin the holds
// end 34 s after the notice at the latest, and the reclaim comes at 40 s.
var raceFlags = bridgeFlags{notice: 40 * time.Second, margin: 5 * time.Second, resumeTimeout: 10 * time.Second}

// TestRaceKarpenterDrainVsHold: a protected 6-replica Deployment (PDB maxUnavailable 1) runs on
// one Karpenter Spot node; one Spot notice reaches Karpenter's path (the NodeClaim is deleted:
// Karpenter's terminator starts evicting at once) and Lifeboat's queue (the EventBridge
// message in the emulated SQS queue) at the same instant. Every round, whatever the order in
// which the two sides act:
//   - no protected Pod is evicted or deleted before Lifeboat decided its hold (the eviction-hold
//     annotation is written before the write that removes the Pod), and none is evicted while
//     its hold is in force;
//   - the ready count, sampled every 100 ms from the notice until the surge is over, never
//     drops below 6;
//   - the six old Pods are gone before the reclaim (notice + --bridge-notice); none is killed
//     by it;
//   - the surge ends: replicas back to 6, the bridge-surge record gone.
func TestRaceKarpenterDrainVsHold(t *testing.T) {
	e := shared(t)
	e.startController(t, raceFlags)
	began := time.Now()
	rounds := raceRounds(t)
	for r := 1; r <= rounds; r++ {
		if !t.Run(fmt.Sprintf("round-%02d", r), func(t *testing.T) { e.raceRound(t) }) {
			t.Fatalf("round %d failed; later rounds would start from its leftovers", r)
		}
	}
	t.Logf("%d rounds in %s", rounds, time.Since(began).Round(time.Second))
}

func (e *env) raceRound(t *testing.T) {
	const replicas = 6
	e.quiesce(t)
	ns := e.newNamespace(t, "race")
	w := workload{name: "web", replicas: replicas, graceSeconds: 1, maxUnavailable: 1}
	node, old := e.place(t, ns, replicas, w)
	id := e.prepareNotice(t, node)
	rec := e.recordPods(t, ns, w.selector())
	ready := e.sampleReady(t, ns, w.selector())
	// The instance-ID annotation must be in the controller's cache before the message is read.
	time.Sleep(300 * time.Millisecond)

	t0 := e.interrupt(t, node, id)
	reclaim := t0.Add(raceFlags.notice)
	killed := e.waitGoneBy(t, ns, old, reclaim)
	e.waitSurgeDone(t, ns, w.name, replicas, time.Until(reclaim)+30*time.Second)
	ready.stop()
	rec.stop()

	if len(killed) > 0 {
		t.Errorf("%d old Pods still alive at the reclaim (t0+%s): %v", len(killed), raceFlags.notice, killed)
	}
	min, samples, lowest := ready.result()
	if min < replicas {
		t.Errorf("ready count fell to %d (< %d replicas) over %d samples: first at %s", min, replicas, samples, lowest)
	}
	held := 0
	for _, p := range old {
		h := rec.history(p.UID)
		if v := holdViolation(h, false); v != "" {
			t.Error(v)
		}
		// Karpenter's eviction queue waits on do-not-disrupt instead of retrying refused
		// evictions against the API server.
		if h.unpaired != "" {
			t.Error(h.unpaired)
		}
		for _, v := range h.holds {
			if v != "" && v != v1alpha1.EvictionHoldReleased {
				held++
				break
			}
		}
	}
	if held != replicas {
		t.Errorf("%d of the %d Pods on the interrupted node were held; the lifeboat seats all of them", held, replicas)
	}
	t.Logf("node %s: old Pods gone, surge over %s after the notice; ready ≥ %d over %d samples", node, time.Since(t0).Round(100*time.Millisecond), min, samples)
}

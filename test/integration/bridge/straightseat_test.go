package bridge

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// straightFlags: a 75 s notice, and the lifeboats may take up to 60 s to be Ready
// (--bridge-resume-timeout) before the holds go. The test delays the lifeboat's Ready by
// straightResumeDelay, far past the ~5 s Karpenter's fast NodePool needs for a seat's node.
var straightFlags = bridgeFlags{notice: 75 * time.Second, margin: 5 * time.Second, resumeTimeout: 60 * time.Second}

const straightResumeDelay = 35 * time.Second

// TestStatefulSetStraightToSeat: a protected StatefulSet (3 replicas, PDB maxUnavailable 1) on
// one Karpenter Spot node, a lifeboat that resumes slowly (its Node Ready 35 s after the
// resume) and Karpenter capacity that comes at once. The seats the bridge makes at the hold get
// a node launched after the notice — not at risk — long before the lifeboat is Ready, so each
// replica moves straight from the interrupted node to its seat's node, where it stays, instead
// of waiting for the lifeboat and moving twice (docs/WARMPOOL.md, "Seats for the Pods the
// handoff evicts"):
//   - at least one replica moves straight (a BridgeMove event "Moved straight to its seat's
//     node"), and every old Pod deleted before a lifeboat seat was Ready moved that way;
//   - a straight-moved replica's new Pod prefers its seat's node (the webhook, from the bridge's
//     seat record on the lifeboat Node), is bound there, never runs on a lifeboat, and its seat
//     node was launched after the notice;
//   - never two down (the ready count, sampled every 100 ms, never below 2); every old Pod was
//     held, none was evicted before its hold was decided or while held; none is alive at the
//     reclaim; no hold is given up.
func TestStatefulSetStraightToSeat(t *testing.T) {
	const replicas = 3
	e := shared(t)
	r := e.startStatefulSetRound(t, straightFlags, "straight", replicas, straightResumeDelay)
	ns, w, node, old := r.ns, r.w, r.node, r.old
	boats, handoffSeats, rec, ready := r.boats, r.handoffSeats, r.rec, r.ready
	// No other Karpenter node with free room: a node launched for an earlier test's leftover
	// Pods, running before the notice, is at risk, and seats taking its room (the default
	// scheduler prefers the emptier node) could not be moved to straight (seen 2026-12-06).
	e.retireKarpenterNodes(t, node)
	t0 := e.interrupt(t, node, r.instanceID)
	killed := e.waitGoneBy(t, ns, old, t0.Add(straightFlags.notice))
	if len(killed) > 0 {
		t.Errorf("%d old Pods alive at the reclaim: %v", len(killed), killed)
	}
	e.checkHandoffToSeats(t, ns, w, replicas, node, boats, handoffSeats, rec)
	handoffSeats.stop()
	ready.stop()
	rec.stop()
	if min, samples, lowest := ready.result(); min < replicas-1 {
		t.Errorf("ready count fell to %d (two or more down) over %d samples: first at %s", min, samples, lowest)
	}

	straight, err := e.straightMoves(ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(straight) == 0 {
		t.Fatalf("no replica moved straight to its seat's node, though the lifeboat was Ready only %s after its resume", straightResumeDelay)
	}
	boatRV, boatNode := boats.first()
	if boatRV == 0 {
		boatRV = math.MaxInt64 // the lifeboat never turned Ready while watched: every move came before
	}
	for _, p := range old {
		h := rec.history(p.UID)
		if v := holdViolation(h, false); v != "" {
			t.Error(v)
		}
		if !heldOnce(h) {
			t.Errorf("%s was never held (hold annotations seen: %q)", h.name, h.holds)
		}
		if _, ok := straight[h.name]; h.deleting && h.deletingRV < boatRV && !ok {
			t.Errorf("%s was deleted (resourceVersion %d) before any lifeboat seat was Ready (%s at %d) but did not move straight to its seat", h.name, h.deletingRV, boatNode, boatRV)
		}
	}
	// Where each straight-moved replica went: never a lifeboat, a node launched after the notice.
	oldUIDs := map[types.UID]bool{}
	for _, p := range old {
		oldUIDs[p.UID] = true
	}
	for uid, h := range rec.all() {
		if _, moved := straight[h.name]; !moved || oldUIDs[uid] {
			continue
		}
		if boats.isBoat(h.node) || boats.isBoat(h.readyOn) {
			t.Errorf("%s moved straight to its seat, yet a new Pod of it (%s) ran on the lifeboat %s", h.name, uid, h.node)
			continue
		}
		if h.node == "" {
			continue
		}
		n, err := e.kube.CoreV1().Nodes().Get(context.Background(), h.node, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s's node %s: %v", h.name, h.node, err)
			continue
		}
		if !n.CreationTimestamp.After(t0.Add(-time.Second)) { // apiserver timestamps have second precision
			t.Errorf("%s moved straight to %s, created %s — before the notice (%s): a node at risk", h.name, h.node, n.CreationTimestamp, t0)
		}
	}
	e.checkNoneReleased(t, ns)
	t.Logf("straight moves: %v; first lifeboat seat Ready: %q (resourceVersion %s)", straight, boatNode, rvString(boatRV))
}

// heldOnce: a hold deadline was written at some point.
func heldOnce(h podHistory) bool {
	for _, v := range h.holds {
		if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return true
		}
	}
	return false
}

func rvString(rv int64) string {
	if rv == math.MaxInt64 {
		return "never"
	}
	return strconv.FormatInt(rv, 10)
}

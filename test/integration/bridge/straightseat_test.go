package bridge

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
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
	spare := e.spareNode(t, ns, w)
	t0 := e.interrupt(t, node, r.instanceID)
	waitFor(t, "the spare node of the reclaimed pool marked at risk", 20*time.Second, func(ctx context.Context) (bool, string) {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, spare, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Labels[v1alpha1.LabelReclaimAtRisk] == "true", fmt.Sprintf("labels %v", n.Labels)
	})
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
	for name, seat := range handoffSeats.all() {
		if seat.node == spare {
			t.Errorf("seat %s was placed on %s, a node at risk of the reclaim", name, spare)
		}
	}
	// The mark lasts while the pool has an interrupted node: it goes with the reclaimed node.
	waitFor(t, "the at-risk mark gone from the spare node once the interrupted node is", 3*time.Minute, func(ctx context.Context) (bool, string) {
		if _, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("interrupted node %s still there (%v)", node, err)
		}
		n, err := e.kube.CoreV1().Nodes().Get(ctx, spare, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, marked := n.Labels[v1alpha1.LabelReclaimAtRisk]
		return !marked, fmt.Sprintf("labels %v", n.Labels)
	})
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

// spareNode makes Karpenter launch a second Spot node of the reclaimed pool before the notice,
// with free room for every seat (a 100m Pod, in a namespace Lifeboat does not protect, that
// may not share a node with w's Pods), and returns its name. Left unmarked, the seats would
// take its room — the default scheduler prefers the emptier node — and, the node being at
// risk, no replica could move straight (seen 2026-12-06, before seats kept off such nodes).
func (e *env) spareNode(t *testing.T, ns string, w workload) string {
	t.Helper()
	ctx := context.Background()
	other, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spare-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.kube.CoreV1().Namespaces().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	away := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}, Namespaces: []string{ns}, TopologyKey: corev1.LabelHostname}
	_, err = e.kube.CoreV1().Pods(other.Name).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spare"},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{v1alpha1.LabelCapacityType: "spot"},
			Affinity:                      &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{away}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "app", Image: image, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var spare string
	waitFor(t, "the spare Pod running on a second Karpenter Spot node", 120*time.Second, func(ctx context.Context) (bool, string) {
		p, err := e.kube.CoreV1().Pods(other.Name).Get(ctx, "spare", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		spare = p.Spec.NodeName
		return spare != "" && nodeutil.PodReady(p), fmt.Sprintf("on %q, phase %s", spare, p.Status.Phase)
	})
	return spare
}

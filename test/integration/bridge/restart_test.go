package bridge

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// restartFlags: a 40 s notice and a 5 s margin. A Pod with a 20 s grace period is held until
// notice + 15 s at the latest, one with 2 s until notice + 33 s.
var restartFlags = bridgeFlags{notice: 40 * time.Second, margin: 5 * time.Second, resumeTimeout: 15 * time.Second}

// TestRestart: Lifeboat's parts fail while holds are in place, and the state in the objects is
// what counts.
func TestRestart(t *testing.T) {
	e := shared(t)
	t.Run("controller killed while holding", func(t *testing.T) { e.controllerKilledWhileHolding(t) })
	t.Run("webhook down fails open", func(t *testing.T) { e.webhookDownFailsOpen(t) })
}

// holdsDecided waits until every Pod carries a hold deadline and returns them by Pod name.
func (e *env) holdsDecided(t *testing.T, ns string, old []corev1.Pod) map[string]time.Time {
	t.Helper()
	until := map[string]time.Time{}
	waitFor(t, "every old Pod held", 15*time.Second, func(ctx context.Context) (bool, string) {
		for _, p := range old {
			cur, err := e.kube.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			raw := cur.Annotations[v1alpha1.AnnotationEvictionHold]
			u, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				return false, fmt.Sprintf("%s: hold %q", p.Name, raw)
			}
			until[p.Name] = u
		}
		return true, ""
	})
	return until
}

// controllerKilledWhileHolding: two protected Deployments share the interrupted node —
// "slow-exit" (2 replicas, 20 s grace: held until notice + 15 s) and "quick-exit" (3 replicas,
// 2 s grace: held until notice + 33 s). Right after the holds are written the controller is
// killed (SIGKILL, by PID) and stays down past slow-exit's deadline.
//   - While it is down, the holds are enforced from the Pods alone: quick-exit's evictions
//     are refused by lifeboat-webhook, slow-exit's (expired) are not.
//   - After the restart, the expired holds stay released — never extended — and their Pods
//     leave; the live holds continue unchanged until the bridge removes their Pods (deleted by
//     the bridge, never evicted while held), quick-exit never below 3 ready.
//   - No old Pod is alive at the reclaim; both surges are taken back.
func (e *env) controllerKilledWhileHolding(t *testing.T) {
	ctl := e.startController(t, restartFlags)
	e.quiesce(t)
	ns := e.newNamespace(t, "restart")
	slow := workload{name: "slow-exit", replicas: 2, graceSeconds: 20, maxUnavailable: 1}
	quick := workload{name: "quick-exit", replicas: 3, graceSeconds: 2, maxUnavailable: 1}
	node, old := e.place(t, ns, 5, slow, quick)
	id := e.prepareNotice(t, node)
	// The lifeboat's Node is Ready 3 s after its resume: the kill below comes first, so the
	// bridge is mid-way (holds written, nothing removed) when the controller dies.
	e.setResumeDelay(t, 3*time.Second)
	rec := e.recordPods(t, ns, "app in (slow-exit,quick-exit)")
	quickReady := e.sampleReady(t, ns, quick.selector())
	time.Sleep(300 * time.Millisecond) // the instance-ID annotation reaches the controller's cache

	t0 := e.interrupt(t, node, id)
	until := e.holdsDecided(t, ns, old)
	if err := ctl.kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller killed %s after the notice, holds: %v", time.Since(t0).Round(time.Millisecond), until)
	isQuick := map[string]bool{}
	var slowUntil time.Time
	for _, p := range old {
		if p.Labels["app"] == quick.name {
			isQuick[p.Name] = true
		} else if until[p.Name].After(slowUntil) {
			slowUntil = until[p.Name]
		}
		if _, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s already gone when the controller was killed (%v): the bridge finished before the kill; the test shows nothing", p.Name, err)
		}
	}

	// Down until slow-exit's holds have expired.
	time.Sleep(time.Until(slowUntil.Add(time.Second)))
	ctx := context.Background()
	for _, p := range old {
		err := e.evictDryRun(ctx, ns, p.Name)
		switch {
		case isQuick[p.Name] && !heldByLifeboat(err):
			t.Errorf("controller down: the eviction of %s (held until %s) was not refused by Lifeboat: %v", p.Name, until[p.Name].Format(time.StampMilli), err)
		case !isQuick[p.Name] && heldByLifeboat(err):
			t.Errorf("controller down: %s's hold expired at %s, yet Lifeboat refused its eviction: %v", p.Name, until[p.Name].Format(time.StampMilli), err)
		}
	}
	e.startController(t, restartFlags)
	t.Logf("controller restarted %s after the notice", time.Since(t0).Round(time.Millisecond))

	killed := e.waitGoneBy(t, ns, old, t0.Add(restartFlags.notice))
	e.waitSurgeDone(t, ns, slow.name, slow.replicas, 60*time.Second)
	e.waitSurgeDone(t, ns, quick.name, quick.replicas, 60*time.Second)
	quickReady.stop()
	rec.stop()
	if len(killed) > 0 {
		t.Errorf("%d old Pods alive at the reclaim: %v", len(killed), killed)
	}
	for _, p := range old {
		h := rec.history(p.UID)
		if v := holdViolation(h, false); v != "" {
			t.Error(v)
		}
		var deadlines []string
		for _, v := range h.holds {
			if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
				deadlines = append(deadlines, v)
			}
		}
		if len(deadlines) != 1 {
			t.Errorf("%s: hold deadlines written %q, want the one from before the crash (a restart must neither extend nor renew a hold)", p.Name, deadlines)
		}
		if isQuick[p.Name] {
			if h.evicted {
				t.Errorf("%s (live hold until %s) was evicted; the bridge should have removed it once its replacement was Ready", p.Name, until[p.Name].Format(time.StampMilli))
			}
			if _, err := time.Parse(time.RFC3339Nano, h.holdAtDeletion); err != nil {
				t.Errorf("%s: its hold was %q when it was deleted, want its live deadline (the bridge continued the hold after the restart)", p.Name, h.holdAtDeletion)
			}
		}
	}
	if min, samples, lowest := quickReady.result(); min < int(quick.replicas) {
		t.Errorf("quick-exit fell to %d ready (< %d) over %d samples: first at %s", min, quick.replicas, samples, lowest)
	}
}

// webhookDownFailsOpen: holds are in place when lifeboat-webhook stops (SIGTERM, by PID).
// failurePolicy Ignore: the API server lets evictions through without it — a held Pod's
// eviction succeeds — and the drain finishes before the reclaim.
func (e *env) webhookDownFailsOpen(t *testing.T) {
	e.startController(t, restartFlags)
	e.quiesce(t)
	ns := e.newNamespace(t, "failopen")
	// minAvailable, not maxUnavailable: the surge's Pending replicas would count as missing
	// against a maxUnavailable budget and the PDB, not the webhook, would refuse the eviction.
	w := workload{name: "web", replicas: 3, graceSeconds: 1, minAvailable: 1}
	node, old := e.place(t, ns, int(w.replicas), w)
	id := e.prepareNotice(t, node)
	// Nothing may end the holds before the webhook is down: the lifeboat is Ready 10 s after
	// its resume, Karpenter's new capacity in 30 s.
	e.setResumeDelay(t, 10*time.Second)
	e.capKarpenter(t)
	rec := e.recordPods(t, ns, w.selector())
	time.Sleep(300 * time.Millisecond)

	t0 := e.interrupt(t, node, id)
	until := e.holdsDecided(t, ns, old)
	victim := old[0].Name
	ctx := context.Background()
	if err := e.evictDryRun(ctx, ns, victim); !heldByLifeboat(err) {
		t.Fatalf("webhook up: the eviction of held %s was not refused by Lifeboat: %v", victim, err)
	}
	t.Cleanup(func() {
		if !e.webhook.running() {
			if err := e.webhook.start(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	if err := e.webhook.stop(); err != nil {
		t.Fatal(err)
	}
	if time.Now().After(until[victim]) {
		t.Fatalf("the hold of %s ended before the webhook was down; the test shows nothing", victim)
	}
	if err := e.kube.PolicyV1().Evictions(ns).Evict(ctx, evictionOf(ns, victim)); err != nil {
		t.Errorf("webhook down: the eviction of %s, held until %s, failed: %v (failurePolicy Ignore must let it through)", victim, until[victim].Format(time.StampMilli), err)
	}
	killed := e.waitGoneBy(t, ns, old, t0.Add(restartFlags.notice))
	rec.stop()
	if len(killed) > 0 {
		t.Errorf("webhook down: %d old Pods alive at the reclaim: %v", len(killed), killed)
	}
	for _, p := range old {
		if v := holdViolation(rec.history(p.UID), true); v != "" {
			t.Error(v)
		}
	}
	if h := rec.all()[old[0].UID]; !h.evicted {
		t.Errorf("%s was not removed by the Eviction API (hold annotations %q)", victim, h.holds)
	}
	if err := e.webhook.start(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitSurgeDone(t, ns, w.name, w.replicas, 60*time.Second)
}

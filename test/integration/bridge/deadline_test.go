package bridge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/bridge"
)

// deadlineFlags: a 60 s notice; the lifeboats must be Ready 10 s after it
// (--bridge-resume-timeout), or the holds go.
var deadlineFlags = bridgeFlags{notice: 60 * time.Second, margin: 5 * time.Second, resumeTimeout: 10 * time.Second}

// TestDeadlineLateLifeboat is pkg/sim/testdata/late-lifeboat.yaml on the real components: the
// lifeboat resumes, but its Node is Ready only 25 s after the resume — past the bridge's
// resume timeout (10 s) — and Karpenter's new capacity boots in 30 s, as on AWS. The
// protected Deployment (4 replicas, PDB minAvailable 2: a drain Karpenter alone finishes
// within the notice) must be no worse off than with Karpenter alone:
//   - every held Pod is released (annotation "released", an EvictionReleased event with reason
//     lifeboat_not_ready), none is evicted before its hold was decided or while it was in force;
//   - Karpenter's drain goes on after the release: it evicts old Pods through the Eviction API;
//   - no old Pod is alive at the reclaim (notice + 60 s);
//   - the surge is taken back once the old Pods are gone.
func TestDeadlineLateLifeboat(t *testing.T) {
	const replicas = 4
	e := shared(t)
	e.startController(t, deadlineFlags)
	e.quiesce(t)
	ns := e.newNamespace(t, "late")
	w := workload{name: "web", replicas: replicas, graceSeconds: 1, minAvailable: 2}
	node, old := e.place(t, ns, replicas, w)
	id := e.prepareNotice(t, node)
	e.capKarpenter(t)
	e.setResumeDelay(t, 25*time.Second)
	rec := e.recordPods(t, ns, w.selector())
	time.Sleep(300 * time.Millisecond) // the instance-ID annotation reaches the controller's cache

	t0 := e.interrupt(t, node, id)
	reclaim := t0.Add(deadlineFlags.notice)
	killed := e.waitGoneBy(t, ns, old, reclaim)
	rec.stop()
	if len(killed) > 0 {
		t.Errorf("%d old Pods alive at the reclaim (t0+%s): %v", len(killed), deadlineFlags.notice, killed)
	}
	evicted := 0
	for _, p := range old {
		h := rec.history(p.UID)
		if v := holdViolation(h, false); v != "" {
			t.Error(v)
		}
		released := false
		for _, v := range h.holds {
			released = released || v == v1alpha1.EvictionHoldReleased
		}
		if !released {
			t.Errorf("%s left without its hold being released (hold annotations seen: %q)", h.name, h.holds)
		}
		if h.evicted {
			evicted++
		}
	}
	if evicted == 0 {
		t.Errorf("Karpenter evicted none of the %d old Pods after the release: its drain did not go on", replicas)
	}
	waitFor(t, "an EvictionReleased event (lifeboat_not_ready) for every old Pod", 30*time.Second, func(ctx context.Context) (bool, string) {
		evs, err := e.events(ctx, ns, v1alpha1.EventEvictionReleased)
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for _, p := range old {
			found := false
			for _, ev := range evs {
				found = found || (strings.HasPrefix(ev, p.Name+": ") && strings.Contains(ev, bridge.ReleaseLifeboatNotReady))
			}
			if !found {
				missing++
			}
		}
		return missing == 0, strings.Join(evs, "; ")
	})
	e.waitSurgeDone(t, ns, w.name, replicas, 90*time.Second)
	t.Logf("old Pods: %d evicted by Karpenter after the release, %d removed otherwise; all gone before the reclaim", evicted, replicas-evicted)
}

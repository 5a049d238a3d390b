package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func rebalanceNotice(instanceID string, n int) string {
	return fmt.Sprintf(`{"version":"0","id":"rebalance-%d","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"%s","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/%s"],"detail":{"instance-id":"%s"}}`,
		n, time.Now().UTC().Format(time.RFC3339), instanceID, instanceID)
}

// queueDrained: every message sent so far was handled and deleted (the consumer deletes a
// message only after its handler succeeded, and the handler marks Nodes synchronously).
func (e *env) queueDrained(context.Context) (bool, string) {
	d := e.emu.QueueDepth("lifeboat-interruptions")
	return d == 0, fmt.Sprintf("queue depth %d", d)
}

// TestRebalanceRecommendation: with the default rebalanceRecommendation Ignore a rebalance
// recommendation for a Spot node with protected Pods is consumed and does nothing — the node is
// not marked, no standby node is resumed; after the pool switches to PreResume the same
// recommendation marks the node and resumes the standby capacity its protected Pods need, once
// however often it is delivered. A Spot interruption of that node while its pre-resumed lifeboat
// is active re-marks it and plans again: nothing more is resumed. A second node recommended while
// the only PreResume pool has no standby gets no lifeboat; its interruption then resumes one
// from the other pool.
func TestRebalanceRecommendation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	e.spotWithProtectedPod(ctx, "spot-1", "i-00000000000000a01", "3")
	if err := e.client.Create(ctx, e.warmPool(2, "1h")); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.waitFor("2 hibernated standby nodes", 90*time.Second, e.standbyConverged(2))
	wp := &v1alpha1.WarmPool{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: poolName}, wp); err != nil {
		t.Fatal(err)
	}
	if wp.Spec.RebalanceRecommendation != v1alpha1.RebalanceIgnore {
		t.Fatalf("rebalanceRecommendation defaulted to %q, want Ignore", wp.Spec.RebalanceRecommendation)
	}

	// --- Ignore: consumed, nothing happens.
	starts, deletes := e.emu.Calls("StartInstances", ""), e.emu.Calls("DeleteMessage", "")
	if _, err := e.emu.SendMessage("lifeboat-interruptions", rebalanceNotice("i-00000000000000a01", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the recommendation consumed", 30*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.queueDrained(ctx)
		return ok && e.emu.Calls("DeleteMessage", "") > deletes, desc
	})
	spot := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-1"}, spot); err != nil {
		t.Fatal(err)
	}
	if spot.Annotations[v1alpha1.AnnotationInterruptedAt] != "" || nodeutil.HasTaint(spot, v1alpha1.TaintInterrupted) {
		t.Fatalf("Ignore: spot-1 marked interrupted (annotations %v, taints %v)", spot.Annotations, spot.Spec.Taints)
	}
	if n := e.emu.Calls("StartInstances", "") - starts; n != 0 {
		t.Fatalf("Ignore: %d StartInstances for a rebalance recommendation, want 0", n)
	}
	if ok, desc := e.standbyConverged(2)(ctx); !ok {
		t.Fatalf("Ignore: pool no longer 2 standby: %s", desc)
	}

	// --- PreResume: the pool's controller has seen the change (observedGeneration) before the
	// recommendation comes, so the handler reads PreResume from the same cache.
	if err := e.client.Patch(ctx, &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rebalanceRecommendation":"PreResume"}}`))); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the manager to observe PreResume", 30*time.Second, func(ctx context.Context) (bool, string) {
		wp := &v1alpha1.WarmPool{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: poolName}, wp); err != nil {
			return false, err.Error()
		}
		return wp.Status.ObservedGeneration == wp.Generation, fmt.Sprintf("generation %d observed %d", wp.Generation, wp.Status.ObservedGeneration)
	})
	starts = e.emu.Calls("StartInstances", "")
	var standbyIDs []string
	for _, in := range e.liveInstances(poolName) {
		standbyIDs = append(standbyIDs, in.ID)
	}
	for i := 0; i < 3; i++ {
		if _, err := e.emu.SendMessage("lifeboat-interruptions", rebalanceNotice("i-00000000000000a01", 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("one lifeboat active and Ready for spot-1", 60*time.Second, e.activeReadyFor("spot-1", 1))
	e.waitFor("the recommendations consumed", 30*time.Second, e.queueDrained)
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-1"}, spot); err != nil {
		t.Fatal(err)
	}
	if src := spot.Annotations[v1alpha1.AnnotationInterruptionSource]; src != marks.SourceRebalance {
		t.Errorf("spot-1 interruption source %q, want %q", src, marks.SourceRebalance)
	}
	if !nodeutil.HasTaint(spot, v1alpha1.TaintInterrupted) {
		t.Errorf("spot-1 not tainted %s after a pre-resume", v1alpha1.TaintInterrupted)
	}
	if d := spot.Annotations[v1alpha1.AnnotationResumeDecision]; d != e.lifeboatsFor(ctx, "spot-1")[0].Name {
		t.Errorf("spot-1 decision %q, want the resumed lifeboat", d)
	}
	// Exactly one of the two standby instances started (3 CPU fit one standby node), however
	// often delivered; the other stays hibernated. (Counted on the instances: StartInstances
	// calls may be batched; the pool's refill of the claimed slot is a new instance.)
	var started, stillHibernated []string
	for _, id := range standbyIDs {
		in, _ := e.emu.Instance(id)
		switch {
		case in.State == cloud.StateRunning || in.State == cloud.StatePending:
			started = append(started, id)
		case in.State == cloud.StateStopped && in.StateReason == cloud.ReasonUserInitiatedHibernate:
			stillHibernated = append(stillHibernated, id)
		}
	}
	if len(started) != 1 || len(stillHibernated) != 1 || e.emu.Calls("StartInstances", "") == starts {
		t.Fatalf("PreResume: of the standby instances %v, started %v and still hibernated %v after 3 deliveries of a recommendation; want one each", standbyIDs, started, stillHibernated)
	}

	// --- The Spot interruption of spot-1 comes while the pre-resumed lifeboat is active: the
	// node is re-marked and decided again, counting that lifeboat — nothing more resumes,
	// however often the interruption is delivered.
	lifeboat := e.lifeboatsFor(ctx, "spot-1")[0].Name
	e.waitFor("the pool refilled to 2 standby nodes", 90*time.Second, e.standbyConverged(2))
	starts = e.emu.Calls("StartInstances", "")
	for i := 0; i < 3; i++ {
		if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a01", 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("spot-1 re-marked by the interruption and decided again", 30*time.Second, e.decidedFrom("spot-1", sourceSpotInterruption))
	e.waitFor("the interruptions consumed", 30*time.Second, e.queueDrained)
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-1"}, spot); err != nil {
		t.Fatal(err)
	}
	if d := spot.Annotations[v1alpha1.AnnotationResumeDecision]; d != lifeboat {
		t.Errorf("spot-1 decision after the interruption %q, want the pre-resumed %s", d, lifeboat)
	}
	if boats := e.lifeboatsFor(ctx, "spot-1"); len(boats) != 1 || boats[0].Name != lifeboat {
		t.Errorf("lifeboats for spot-1 after the interruption: %d, want only %s", len(boats), lifeboat)
	}
	if n := e.emu.Calls("StartInstances", "") - starts; n != 0 {
		t.Fatalf("interruption after a pre-resume: %d StartInstances, want 0 (the active lifeboat holds the Pods)", n)
	}
	if ok, desc := e.standbyConverged(2)(ctx); !ok {
		t.Fatalf("interruption after a pre-resume: pool no longer 2 standby: %s", desc)
	}

	// --- The only PreResume pool has no standby: spot-2's recommendation resumes nothing; its
	// interruption plans over every pool and resumes one from the pool that ignores
	// recommendations.
	pre := e.warmPool(0, "1h")
	pre.Name, pre.Spec.RebalanceRecommendation = "pre", v1alpha1.RebalancePreResume
	if err := e.client.Create(ctx, pre); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Patch(ctx, &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rebalanceRecommendation":"Ignore"}}`))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pre", poolName} {
		e.waitFor("the manager to observe pool "+name, 30*time.Second, func(ctx context.Context) (bool, string) {
			wp := &v1alpha1.WarmPool{}
			if err := e.client.Get(ctx, types.NamespacedName{Name: name}, wp); err != nil {
				return false, err.Error()
			}
			return wp.Status.ObservedGeneration == wp.Generation, fmt.Sprintf("generation %d observed %d", wp.Generation, wp.Status.ObservedGeneration)
		})
	}
	e.spotWithProtectedPod(ctx, "spot-2", "i-00000000000000a02", "3")
	starts = e.emu.Calls("StartInstances", "")
	if _, err := e.emu.SendMessage("lifeboat-interruptions", rebalanceNotice("i-00000000000000a02", 200)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("spot-2's recommendation decided", 30*time.Second, e.decidedFrom("spot-2", marks.SourceRebalance))
	spot2 := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-2"}, spot2); err != nil {
		t.Fatal(err)
	}
	if d := spot2.Annotations[v1alpha1.AnnotationResumeDecision]; d != "none" || e.emu.Calls("StartInstances", "")-starts != 0 {
		t.Fatalf("spot-2 recommendation with an empty PreResume pool: decision %q, %d StartInstances; want none", d, e.emu.Calls("StartInstances", "")-starts)
	}
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a02", 201)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("one lifeboat active and Ready for spot-2", 60*time.Second, e.activeReadyFor("spot-2", 1))
	e.waitFor("spot-2 re-marked by the interruption and decided again", 30*time.Second, e.decidedFrom("spot-2", sourceSpotInterruption))
	boats := e.lifeboatsFor(ctx, "spot-2")
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-2"}, spot2); err != nil {
		t.Fatal(err)
	}
	if d := spot2.Annotations[v1alpha1.AnnotationResumeDecision]; d != boats[0].Name || nodeutil.Pool(&boats[0]) != poolName {
		t.Errorf("spot-2 decision %q, lifeboat %s of pool %q; want the lifeboat of pool %s", d, boats[0].Name, nodeutil.Pool(&boats[0]), poolName)
	}
}

var sourceSpotInterruption = "sqs/" + string(interruptionqueue.KindSpotInterruption)

// decidedFrom: the node's mark comes from source and its decision is recorded.
func (e *env) decidedFrom(node, source string) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		n := &corev1.Node{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			return false, err.Error()
		}
		a := n.Annotations
		return a[v1alpha1.AnnotationInterruptionSource] == source && a[v1alpha1.AnnotationResumeDecision] != "",
			fmt.Sprintf("source %q decision %q", a[v1alpha1.AnnotationInterruptionSource], a[v1alpha1.AnnotationResumeDecision])
	}
}

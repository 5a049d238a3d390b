package reclaimback

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
)

// Wednesday 2026-12-02 23:00 UTC.
var now = time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	gv := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	metav1.AddToGroupVersion(s, gv)
	s.AddKnownTypes(gv, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	return s
}

func karpenterNode(name, capacity string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		reclaimplan.LabelNodePool: "default", v1alpha1.LabelCapacityType: capacity,
		v1alpha1.LabelInstanceType: "m5.large", reclaimplan.LabelZoneID: "use1-az1",
	}}}
}

func readyPod(name, node, owner string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "web"}, CreationTimestamp: metav1.NewTime(created),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: "rs", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

type harness struct {
	t      *testing.T
	c      client.Client
	clock  *clocktesting.FakeClock
	scorer *cloudtest.PlacementScorer
	rec    *events.FakeRecorder
	ctrl   *Controller
}

func policy(mutate func(*v1alpha1.ReclaimBackPolicySpec)) *v1alpha1.ReclaimBackPolicy {
	p := &v1alpha1.ReclaimBackPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: v1alpha1.ReclaimBackPolicySpec{
		Always: true, MinPlacementScore: 7,
		CoolDown: v1alpha1.CoolDownSpec{Initial: metav1.Duration{Duration: 10 * time.Minute}, Max: metav1.Duration{Duration: 4 * time.Hour}},
	}}
	if mutate != nil {
		mutate(&p.Spec)
	}
	return p
}

// newHarness: NodePool default (Spot and On-Demand); od-1 runs Deployment web's two Pods; od-2
// runs a critical Pod; spot-1 and od-3 have room.
func newHarness(t *testing.T, p *v1alpha1.ReclaimBackPolicy) *harness {
	t.Helper()
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	pool.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-rs",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d", Controller: ptr.To(true)}}}}
	critical := readyPod("pay-0", "od-2", "pay-rs", now.Add(-time.Hour))
	critical.Labels = map[string]string{v1alpha1.LabelTier: string(v1alpha1.TierCritical)}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "default-abc"}}
	claim.Status.NodeName = "od-1"
	objs := []client.Object{p, pool, dep, rs, claim,
		karpenterNode("od-1", "on-demand"), karpenterNode("od-2", "on-demand"), karpenterNode("od-3", "on-demand"), karpenterNode("spot-1", "spot"),
		readyPod("web-a", "od-1", "web-rs", now.Add(-time.Hour)), readyPod("web-b", "od-1", "web-rs", now.Add(-time.Hour)), critical,
	}
	c := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(objs...).WithStatusSubresource(p).
		WithIndex(&corev1.Pod{}, indexes.PodNodeName, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).
		Build()
	h := &harness{t: t, c: c, clock: clocktesting.NewFakeClock(now), scorer: cloudtest.NewPlacementScorer(map[string]int{"use1-az1": 9}), rec: events.NewFakeRecorder(100)}
	h.restart()
	return h
}

// restart builds a new controller on the same API state: nothing is kept in memory.
func (h *harness) restart() {
	h.ctrl = New(h.c, h.scorer, h.clock, h.rec, v1alpha1.DefaultNamespace, Options{})
}

func (h *harness) reconcile() reconcile.Result {
	h.t.Helper()
	res, err := h.ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "nightly"}})
	if err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (h *harness) node(name string) *corev1.Node {
	h.t.Helper()
	n := &corev1.Node{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) move(name string) (reclaimplan.Move, bool) {
	h.t.Helper()
	m, ok, err := reclaimplan.ParseMove(h.node(name).Annotations)
	if err != nil {
		h.t.Fatal(err)
	}
	return m, ok
}

func (h *harness) deployment() *appsv1.Deployment {
	d := &appsv1.Deployment{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: "web"}, d); err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *harness) policy() *v1alpha1.ReclaimBackPolicy {
	p := &v1alpha1.ReclaimBackPolicy{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: "nightly"}, p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) create(objs ...client.Object) {
	for _, o := range objs {
		if err := h.c.Create(context.Background(), o); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) pod(name string) *corev1.Pod {
	p := &corev1.Pod{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: name}, p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) events() string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func blocked(p *v1alpha1.ReclaimBackPolicy) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBlocked); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	return ""
}

// TestMoveSucceeds walks a move through its phases with a controller restarted before every
// pass: cordon → surge → (replacements Ready on Spot) → drain → (old Pods gone) → NodeClaim
// deleted.
func TestMoveSucceeds(t *testing.T) {
	h := newHarness(t, policy(nil))
	h.reconcile()
	m, ok := h.move("od-1")
	if !ok || m.Phase != reclaimplan.PhaseSurging || !h.node("od-1").Spec.Unschedulable {
		t.Fatalf("after the first pass: move %+v (%v), want od-1 cordoned and Surging", m, ok)
	}
	if len(m.Owners) != 1 || m.Owners[0] != (reclaimplan.Owner{Kind: reclaimplan.KindDeployment, Namespace: "shop", Name: "web", Pods: 2}) {
		t.Errorf("owners %+v, want Deployment shop/web with 2 Pods", m.Owners)
	}
	if _, moving := h.move("od-2"); moving {
		t.Error("od-2 runs a critical Pod and must never move")
	}
	if ev := h.events(); !strings.Contains(ev, v1alpha1.EventReclaimBackStarted) {
		t.Errorf("no %s event: %s", v1alpha1.EventReclaimBackStarted, ev)
	}
	if got := h.policy().Status; got.FallbackNodes != 1 || len(got.InFlight) != 1 {
		t.Errorf("status fallback %d inFlight %+v, want 1 (od-1, moving; od-2 runs a critical Pod, od-3 nothing)", got.FallbackNodes, got.InFlight)
	}

	h.restart()
	h.reconcile()
	d := h.deployment()
	if *d.Spec.Replicas != 4 || !strings.Contains(d.Annotations[v1alpha1.AnnotationHandoffSurge], `"by":"reclaim-back"`) {
		t.Fatalf("surge: replicas %d, record %q; want 4 and the reclaim-back record", *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	}
	h.restart()
	h.reconcile() // idempotent: no second surge
	if d := h.deployment(); *d.Spec.Replicas != 4 {
		t.Fatalf("a second pass surged again: replicas %d", *d.Spec.Replicas)
	}

	// The replacements start on Spot; one is Ready, then both.
	h.clock.Step(30 * time.Second)
	c1 := readyPod("web-c", "spot-1", "web-rs", h.clock.Now())
	c2 := readyPod("web-d", "spot-1", "web-rs", h.clock.Now())
	c2.Status.Conditions = nil
	h.create(c1, c2)
	h.restart()
	h.reconcile()
	if m, _ := h.move("od-1"); m.Phase != reclaimplan.PhaseSurging {
		t.Fatalf("one replacement not Ready: phase %s, want Surging", m.Phase)
	}
	c2 = h.pod("web-d")
	c2.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := h.c.Status().Update(context.Background(), c2); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.reconcile()
	if m, _ := h.move("od-1"); m.Phase != reclaimplan.PhaseDraining {
		t.Fatalf("replacements Ready on Spot: phase %s, want Draining", m.Phase)
	}
	d = h.deployment()
	if *d.Spec.Replicas != 2 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Fatalf("scale-back: replicas %d, record %q", *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	}
	for _, name := range []string{"web-a", "web-b"} {
		if got := h.pod(name).Annotations[corev1.PodDeletionCost]; got != handoff.DeletionCost {
			t.Errorf("old Pod %s deletion cost %q, want %s (removed first)", name, got, handoff.DeletionCost)
		}
	}
	if got := h.pod("web-c").Annotations[corev1.PodDeletionCost]; got != "" {
		t.Errorf("replacement web-c got deletion cost %q", got)
	}

	// The ReplicaSet removes the old Pods; the node is empty.
	for _, name := range []string{"web-a", "web-b"} {
		if err := h.c.Delete(context.Background(), h.pod(name)); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Step(10 * time.Second)
	h.restart()
	h.reconcile()
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: "default-abc"}, &karpv1.NodeClaim{}); err == nil {
		t.Fatal("the empty node's NodeClaim was not deleted")
	}
	if m, _ := h.move("od-1"); m.Phase != reclaimplan.PhaseDone {
		t.Errorf("phase %s, want Done", m.Phase)
	}
	st := h.policy().Status
	if st.Succeeded != 1 || st.ReturnedNodes != 1 || st.LastMove == nil || st.LastMove.Result != v1alpha1.MoveSucceeded || len(st.InFlight) != 0 {
		t.Errorf("status after success: %+v", st)
	}
	if ev := h.events(); !strings.Contains(ev, v1alpha1.EventReclaimBackSucceeded) {
		t.Errorf("no %s event: %s", v1alpha1.EventReclaimBackSucceeded, ev)
	}
	// Counted once, whatever the restarts; node-hours accrue from the move on.
	h.clock.Step(2 * time.Hour)
	h.restart()
	h.reconcile()
	st = h.policy().Status
	if st.Succeeded != 1 || st.OnDemandNodeHoursReturned != "2.000" {
		t.Errorf("2 h after one returned node: succeeded %d, node-hours %q; want 1 and 2.000", st.Succeeded, st.OnDemandNodeHoursReturned)
	}
}

// TestAbortOnDemandAgain: a replacement lands on On-Demand → the surge is taken back with the
// new Pods first, the node uncordoned, a failure counted, the cool-down doubles.
func TestAbortOnDemandAgain(t *testing.T) {
	h := newHarness(t, policy(nil))
	for round, wantCoolDown := range []time.Duration{10 * time.Minute, 20 * time.Minute} {
		h.reconcile() // start
		h.reconcile() // surge
		if _, ok := h.move("od-1"); !ok {
			t.Fatalf("round %d: no move started (status %+v)", round, h.policy().Status.Conditions)
		}
		name := fmt.Sprintf("web-od-%d", round)
		h.create(readyPod(name, "od-3", "web-rs", h.clock.Now()))
		h.restart()
		h.reconcile()
		if _, ok := h.move("od-1"); ok || h.node("od-1").Spec.Unschedulable {
			t.Fatalf("round %d: move not undone: record present %v, cordoned %v", round, ok, h.node("od-1").Spec.Unschedulable)
		}
		if d := h.deployment(); *d.Spec.Replicas != 2 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
			t.Errorf("round %d: replicas %d record %q after the abort", round, *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
		}
		if got := h.pod(name).Annotations[corev1.PodDeletionCost]; got != handoff.DeletionCost {
			t.Errorf("round %d: the On-Demand replacement has deletion cost %q, want it removed first", round, got)
		}
		if got := h.pod("web-a").Annotations[corev1.PodDeletionCost]; got != "" {
			t.Errorf("round %d: old Pod web-a got deletion cost %q on an abort", round, got)
		}
		st := h.policy().Status
		if st.Aborted != int32(round+1) || st.ConsecutiveFailures != int32(round+1) || st.CoolDownUntil == nil || !st.CoolDownUntil.Time.Equal(h.clock.Now().Add(wantCoolDown)) {
			t.Errorf("round %d: status %+v, want cool-down %s", round, st, wantCoolDown)
		}
		if ev := h.events(); !strings.Contains(ev, v1alpha1.EventReclaimBackAborted) {
			t.Errorf("round %d: no %s event: %s", round, v1alpha1.EventReclaimBackAborted, ev)
		}
		// Cooling down: nothing starts.
		h.reconcile()
		if _, ok := h.move("od-1"); ok || blocked(h.policy()) != v1alpha1.ReasonCoolingDown {
			t.Fatalf("round %d: during the cool-down: moving %v, blocked %q", round, ok, blocked(h.policy()))
		}
		if err := h.c.Delete(context.Background(), h.pod(name)); err != nil {
			t.Fatal(err)
		}
		h.clock.Step(wantCoolDown)
	}
}

// TestRestartWhileAborting: a controller that died right after recording
// Aborting finishes the undo once.
func TestRestartWhileAborting(t *testing.T) {
	h := newHarness(t, policy(nil))
	h.reconcile()
	h.reconcile()
	h.clock.Step(16 * time.Minute) // past moveTimeout (default 15m)
	m, _ := h.move("od-1")
	n := h.node("od-1")
	before := n.DeepCopy()
	m.Phase, m.Reason = reclaimplan.PhaseAborting, reclaimplan.AbortTimeout
	n.Annotations[v1alpha1.AnnotationReclaimBack] = m.Encode()
	if err := h.c.Patch(context.Background(), n, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.reconcile()
	h.restart()
	h.reconcile()
	st := h.policy().Status
	if _, ok := h.move("od-1"); ok || st.Aborted != 1 || st.LastMove == nil || st.LastMove.Reason != reclaimplan.AbortTimeout {
		t.Errorf("after the restart: moving %v, status %+v", ok, st)
	}
	if d := h.deployment(); *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d after the undo, want 2", *d.Spec.Replicas)
	}
}

func TestNothingMoves(t *testing.T) {
	for name, tc := range map[string]struct {
		policy *v1alpha1.ReclaimBackPolicy
		score  int
		want   string
	}{
		"outside the window": {
			policy: policy(func(s *v1alpha1.ReclaimBackPolicySpec) {
				s.Always = false
				s.Windows = []v1alpha1.MaintenanceWindow{{Days: []string{"Sat"}, Start: "02:00", Duration: metav1.Duration{Duration: time.Hour}}}
			}),
			score: 9, want: v1alpha1.ReasonWindowClosed,
		},
		"low placement score":     {policy: policy(nil), score: 5, want: v1alpha1.ReasonLowPlacementScore},
		"NodePool not selected":   {policy: policy(func(s *v1alpha1.ReclaimBackPolicySpec) { s.NodePools.Names = []string{"other"} }), score: 9, want: v1alpha1.ReasonNoFallbackNodes},
		"score at the minimum ok": {policy: policy(nil), score: 7},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, tc.policy)
			h.scorer.SetZoneScore("use1-az1", tc.score)
			h.reconcile()
			_, moving := h.move("od-1")
			if got := blocked(h.policy()); got != tc.want || moving != (tc.want == "") {
				t.Errorf("blocked %q, moving %v; want %q", got, moving, tc.want)
			}
			if tc.want == v1alpha1.ReasonWindowClosed {
				if nw := h.policy().Status.NextWindow; nw == nil || !nw.Time.Equal(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)) {
					t.Errorf("nextWindow %v, want Saturday 02:00 UTC", nw)
				}
			}
		})
	}
}

func TestSpotUnstable(t *testing.T) {
	h := newHarness(t, policy(nil))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: "lifeboat-pool-telemetry"},
		Data: map[string]string{"pools.json": fmt.Sprintf(`{"windowSeconds":3600,"pools":{"m5.large/us-east-1a/spot":{"interruptions":1,"lastInterruption":%q}}}`, now.Add(-5*time.Minute).Format(time.RFC3339))}}
	h.create(cm)
	h.reconcile()
	if _, moving := h.move("od-1"); moving || blocked(h.policy()) != v1alpha1.ReasonSpotUnstable {
		t.Errorf("an interruption 5 m ago: moving %v, blocked %q; want SpotUnstable", moving, blocked(h.policy()))
	}
	h.clock.Step(30 * time.Minute)
	h.reconcile()
	if _, moving := h.move("od-1"); !moving {
		t.Errorf("35 m after the interruption (minSpotStability 30m) nothing moves: %q", blocked(h.policy()))
	}
}

// TestKarpenterICEHoldsMoves: Karpenter's InsufficientCapacityError on a NodeClaim of the
// NodePool counts against minSpotStability like an interruption; another NodePool's does not.
func TestKarpenterICEHoldsMoves(t *testing.T) {
	h := newHarness(t, policy(nil))
	ice := func(name, claim string, at time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			InvolvedObject: corev1.ObjectReference{APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: claim},
			Reason:         reclaimplan.ReasonKarpenterICE, Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(at),
			Message: "NodeClaim " + claim + " event: insufficient capacity, all requested instance types were unavailable during launch"}
	}
	h.create(ice("other-pool", "batch-x7k2p", now.Add(-time.Minute)))
	h.create(ice("this-pool", "default-q8k2z", now.Add(-10*time.Minute)))
	h.reconcile()
	if _, moving := h.move("od-1"); moving || blocked(h.policy()) != v1alpha1.ReasonSpotUnstable {
		t.Errorf("an ICE 10 m ago: moving %v, blocked %q; want SpotUnstable", moving, blocked(h.policy()))
	}
	h.clock.Step(21 * time.Minute)
	h.reconcile()
	if _, moving := h.move("od-1"); !moving {
		t.Errorf("31 m after the ICE (minSpotStability 30m) nothing moves: %q", blocked(h.policy()))
	}
}

// TestOrphanSurgeSwept: the node of a move vanished mid-surge; its surge is taken back.
func TestOrphanSurgeSwept(t *testing.T) {
	h := newHarness(t, policy(nil))
	h.reconcile()
	h.reconcile()
	if err := h.c.Delete(context.Background(), h.node("od-1")); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.reconcile()
	if d := h.deployment(); *d.Spec.Replicas != 2 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Errorf("orphan surge left: replicas %d record %q", *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	}
}

// TestPolicyDeletedMidMove: the finalizer undoes the moves in flight before the policy goes.
func TestPolicyDeletedMidMove(t *testing.T) {
	h := newHarness(t, policy(nil))
	h.reconcile()
	h.reconcile()
	if d := h.deployment(); *d.Spec.Replicas != 4 {
		t.Fatalf("not surging: replicas %d", *d.Spec.Replicas)
	}
	if err := h.c.Delete(context.Background(), h.policy()); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.reconcile()
	if _, ok := h.move("od-1"); ok || h.node("od-1").Spec.Unschedulable {
		t.Errorf("the deleted policy's move was not undone")
	}
	if d := h.deployment(); *d.Spec.Replicas != 2 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Errorf("replicas %d record %q after the policy's deletion", *d.Spec.Replicas, d.Annotations[v1alpha1.AnnotationHandoffSurge])
	}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: "nightly"}, &v1alpha1.ReclaimBackPolicy{}); err == nil {
		t.Error("the policy is still there: its finalizer was not removed")
	}
}

// TestProbeCached: EC2 throttles GetSpotPlacementScores; a NodePool's score is reused for
// ProbeTTL (1m) however often Nodes change.
func TestProbeCached(t *testing.T) {
	h := newHarness(t, policy(nil))
	h.scorer.SetZoneScore("use1-az1", 3)
	h.reconcile()
	h.reconcile()
	if n := len(h.scorer.Requests); n != 1 {
		t.Fatalf("%d probes in two passes within a minute, want 1", n)
	}
	if r := h.scorer.Requests[0]; !r.SingleAZ || len(r.InstanceTypes) != 1 || r.InstanceTypes[0] != "m5.large" {
		t.Errorf("probe %+v, want single-AZ scores of the NodePool's instance type m5.large", r)
	}
	h.scorer.SetZoneScore("use1-az1", 8)
	h.clock.Step(61 * time.Second)
	h.reconcile()
	if _, moving := h.move("od-1"); !moving || len(h.scorer.Requests) != 2 {
		t.Errorf("after the TTL: probes %d, moving %v; want a new probe and a move", len(h.scorer.Requests), moving)
	}
}

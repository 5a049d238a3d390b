package reclaimplan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

var t0 = time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)

func TestGateDecide(t *testing.T) {
	nightly := Schedule{Windows: []Window{{Days: []time.Weekday{time.Wednesday}, Hour: 22, Duration: 2 * time.Hour, Location: time.UTC}}}
	tests := []struct {
		name       string
		g          Gate
		slots      int
		reason     string
		retryAt    time.Time
		nextWindow time.Time
	}{
		{name: "always, free slot", g: Gate{Now: t0, Schedule: Schedule{Always: true}, MaxInFlight: 1, Movable: 3}, slots: 1},
		{name: "inside the window", g: Gate{Now: t0, Schedule: nightly, MaxInFlight: 2, Movable: 3}, slots: 2},
		{name: "slots bounded by the movable nodes", g: Gate{Now: t0, Schedule: nightly, MaxInFlight: 5, Movable: 2}, slots: 2},
		{name: "slots left beside the moves in flight", g: Gate{Now: t0, Schedule: nightly, MaxInFlight: 3, InFlight: 2, Movable: 4}, slots: 1},
		{
			name: "outside the window: next opening", g: Gate{Now: t0.Add(2 * time.Hour), Schedule: nightly, MaxInFlight: 1, Movable: 1},
			reason: v1alpha1.ReasonWindowClosed, retryAt: time.Date(2026, 12, 9, 22, 0, 0, 0, time.UTC), nextWindow: time.Date(2026, 12, 9, 22, 0, 0, 0, time.UTC),
		},
		{name: "cooling down", g: Gate{Now: t0, Schedule: nightly, CoolDownUntil: t0.Add(10 * time.Minute), MaxInFlight: 1, Movable: 1}, reason: v1alpha1.ReasonCoolingDown, retryAt: t0.Add(10 * time.Minute)},
		{name: "cool-down over", g: Gate{Now: t0, Schedule: nightly, CoolDownUntil: t0, MaxInFlight: 1, Movable: 1}, slots: 1},
		{name: "max in flight", g: Gate{Now: t0, Schedule: nightly, MaxInFlight: 1, InFlight: 1, Movable: 1}, reason: v1alpha1.ReasonMaxInFlight},
		{name: "nothing to move", g: Gate{Now: t0, Schedule: nightly, MaxInFlight: 1}, reason: v1alpha1.ReasonNoFallbackNodes},
		{name: "nothing to move, closed: still says the next window", g: Gate{Now: t0.Add(2 * time.Hour), Schedule: nightly, MaxInFlight: 1}, reason: v1alpha1.ReasonNoFallbackNodes, nextWindow: time.Date(2026, 12, 9, 22, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.g.Decide()
			if r.Slots != tt.slots || r.Reason != tt.reason || !r.RetryAt.Equal(tt.retryAt) || !r.NextWindow.Equal(tt.nextWindow) {
				t.Errorf("Decide() = %+v; want slots %d reason %q retryAt %s next %s", r, tt.slots, tt.reason, tt.retryAt, tt.nextWindow)
			}
			if (r.Slots == 0) != (r.Message != "") {
				t.Errorf("a block needs a message, a pass none: %+v", r)
			}
		})
	}
}

func TestMaxInFlight(t *testing.T) {
	for _, tt := range []struct {
		v        *intstr.IntOrString
		fallback int
		want     int
	}{
		{nil, 10, 1},
		{ptr.To(intstr.FromInt32(3)), 10, 3},
		{ptr.To(intstr.FromString("25%")), 10, 3}, // rounded up
		{ptr.To(intstr.FromString("10%")), 3, 1},
		{ptr.To(intstr.FromString("50%")), 0, 1}, // never 0
		{ptr.To(intstr.FromString("bad")), 4, 1},
	} {
		if got := MaxInFlight(tt.v, tt.fallback); got != tt.want {
			t.Errorf("MaxInFlight(%v, %d) = %d, want %d", tt.v, tt.fallback, got, tt.want)
		}
	}
}

func TestSpotStable(t *testing.T) {
	tel := &telemetry.Telemetry{Pools: map[string]telemetry.PoolStats{
		telemetry.PoolKey("m5.large", "us-east-1a", "spot"):      {Interruptions: 2, LastInterruption: t0.Add(-40 * time.Minute)},
		telemetry.PoolKey("c5.large", "us-east-1b", "spot"):      {Interruptions: 1, LastInterruption: t0.Add(-10 * time.Minute)},
		telemetry.PoolKey("r5.large", "us-east-1a", "on-demand"): {Interruptions: 1, LastInterruption: t0.Add(-time.Minute)},
		"garbage": {Interruptions: 5, LastInterruption: t0},
	}}
	for _, tt := range []struct {
		name   string
		types  []string
		stable bool
		last   time.Time
	}{
		{"interrupted 40 m ago: stable for 30 m", []string{"m5.large"}, true, t0.Add(-40 * time.Minute)},
		{"one type interrupted 10 m ago", []string{"m5.large", "c5.large"}, false, t0.Add(-10 * time.Minute)},
		{"On-Demand pools do not count", []string{"r5.large"}, true, time.Time{}},
		{"types never interrupted", []string{"m6i.large"}, true, time.Time{}},
	} {
		stable, last := SpotStable(tel, tt.types, t0, 30*time.Minute)
		if stable != tt.stable || !last.Equal(tt.last) {
			t.Errorf("%s: SpotStable = %v, %s; want %v, %s", tt.name, stable, last, tt.stable, tt.last)
		}
	}
	if ok, _ := SpotStable(nil, []string{"m5.large"}, t0, time.Hour); !ok {
		t.Error("no telemetry yet must read as stable")
	}
}

func TestProbeScope(t *testing.T) {
	node := func(typ, zoneID string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelInstanceType: typ, LabelZoneID: zoneID}}}
	}
	nodes := []*corev1.Node{node("m5.large", "use1-az2"), node("c5.large", "use1-az1"), node("m5.large", "use1-az1"), node("", "")}
	types, zones := ProbeScope(nil, nodes)
	if !equal(types, []string{"c5.large", "m5.large"}) || !equal(zones, []string{"use1-az1", "use1-az2"}) {
		t.Errorf("from nodes: %v %v", types, zones)
	}
	reqs := []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelInstanceType, Operator: corev1.NodeSelectorOpIn, Values: []string{"r5.large", "m6i.large", "m5.large"}}}
	if types, _ := ProbeScope(reqs, nodes); !equal(types, []string{"m5.large", "m6i.large", "r5.large"}) {
		t.Errorf("the NodePool's In requirement wins over the nodes: %v", types)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOwnersOf(t *testing.T) {
	ctl := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: name, UID: "u", Controller: ptr.To(true)}}
	}
	pod := func(name string, owners []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, OwnerReferences: owners}}
	}
	done := pod("done", ctl("Job", "j"))
	done.Status.Phase = corev1.PodSucceeded
	pods := []*corev1.Pod{
		pod("web-1", ctl("ReplicaSet", "web-abc")), pod("web-2", ctl("ReplicaSet", "web-abc")),
		pod("db-0", ctl("StatefulSet", "db")), pod("orphan-rs", ctl("ReplicaSet", "loose")),
		pod("bare", nil), pod("ds", ctl("DaemonSet", "agent")), done,
	}
	got := OwnersOf(pods, map[string]string{"shop/web-abc": "web", "shop/loose": ""})
	want := []Owner{
		{Kind: KindDeployment, Namespace: "shop", Name: "web", Pods: 2},
		{Kind: KindPod, Namespace: "shop", Name: "bare", Pods: 1},
		{Kind: KindPod, Namespace: "shop", Name: "orphan-rs", Pods: 1},
		{Kind: KindStatefulSet, Namespace: "shop", Name: "db", Pods: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("OwnersOf = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("owner %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDecideMove(t *testing.T) {
	web := Owner{Kind: KindDeployment, Namespace: "shop", Name: "web", Pods: 2}
	api := Owner{Kind: KindDeployment, Namespace: "shop", Name: "api", Pods: 1}
	db := Owner{Kind: KindStatefulSet, Namespace: "shop", Name: "db", Pods: 1}
	surging := Move{Phase: PhaseSurging, Started: t0, Owners: []Owner{api, db, web}}
	draining := surging
	draining.Phase = PhaseDraining
	aborting := surging
	aborting.Phase, aborting.Reason = PhaseAborting, AbortOnDemandAgain
	ready := DeploymentState{Surged: true, ReadyElsewhere: 3, Target: 3}
	tests := []struct {
		name   string
		o      Observed
		action Action
		reason string
		evict  string
	}{
		{name: "fresh move: surge", o: Observed{Now: t0, Move: surging, Deployments: map[string]DeploymentState{web.Key(): {Target: 0}, api.Key(): {}}}, action: ActionSurge},
		{name: "one surged, one not yet: surge the rest", o: Observed{Now: t0, Move: surging, Deployments: map[string]DeploymentState{web.Key(): ready, api.Key(): {}}}, action: ActionSurge},
		{name: "another surge holds a Deployment: wait", o: Observed{Now: t0, Move: surging, Deployments: map[string]DeploymentState{web.Key(): ready, api.Key(): {Busy: true}}}, action: ActionWait},
		{name: "replacements not Ready yet: wait", o: Observed{Now: t0, Move: surging, Deployments: map[string]DeploymentState{web.Key(): {Surged: true, ReadyElsewhere: 2, Target: 3}, api.Key(): ready}}, action: ActionWait},
		{name: "every replacement Ready on Spot: drain", o: Observed{Now: t0.Add(time.Minute), Move: surging, Deployments: map[string]DeploymentState{web.Key(): ready, api.Key(): ready}}, action: ActionDrain},
		{name: "a Deployment deleted meanwhile does not hold the move", o: Observed{Now: t0, Move: surging, Deployments: map[string]DeploymentState{web.Key(): ready}}, action: ActionDrain},
		{
			name: "a replacement on On-Demand: abort", o: Observed{Now: t0, Move: surging, OffSpot: []string{"shop/web-x"}, Deployments: map[string]DeploymentState{web.Key(): ready, api.Key(): ready}},
			action: ActionAbort, reason: AbortOnDemandAgain,
		},
		{name: "timed out: abort", o: Observed{Now: t0.Add(16 * time.Minute), Timeout: 15 * time.Minute, Move: surging, Deployments: map[string]DeploymentState{web.Key(): {Surged: true, Target: 3}}}, action: ActionAbort, reason: AbortTimeout},
		{name: "aborting stays aborting (restart)", o: Observed{Now: t0, Move: aborting}, action: ActionAbort, reason: AbortOnDemandAgain},
		{name: "draining, a surge left (restart after the phase change): drain again", o: Observed{Now: t0, Move: draining, Deployments: map[string]DeploymentState{web.Key(): ready}}, action: ActionDrain},
		{name: "draining: evict the StatefulSet Pod", o: Observed{Now: t0, Move: draining, Evictable: []string{"shop/db-0"}, Remaining: 3}, action: ActionEvict, evict: "shop/db-0"},
		{name: "draining: the evicted Pod's replacement not Ready: wait", o: Observed{Now: t0, Move: draining, Replacing: true, Evictable: []string{"shop/db-1"}, Remaining: 2}, action: ActionWait},
		{name: "draining: old Pods still terminating: wait", o: Observed{Now: t0, Move: draining, Remaining: 2}, action: ActionWait},
		{name: "draining: an evicted replacement on On-Demand: abort", o: Observed{Now: t0, Move: draining, OffSpot: []string{"shop/db-0"}}, action: ActionAbort, reason: AbortOnDemandAgain},
		{name: "empty: delete the NodeClaim", o: Observed{Now: t0, Move: draining}, action: ActionDeleteNodeClaim},
		{name: "done: nothing", o: Observed{Now: t0, Move: Move{Phase: PhaseDone}}, action: ActionWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DecideMove(tt.o)
			if s.Action != tt.action || s.Reason != tt.reason || s.Evict != tt.evict {
				t.Errorf("DecideMove = %+v; want %s reason %q evict %q", s, tt.action, tt.reason, tt.evict)
			}
		})
	}
}

func TestMoveRecordRoundTrip(t *testing.T) {
	m := Move{Policy: "nightly", NodePool: "default", Phase: PhaseSurging, Started: t0, Owners: []Owner{{Kind: KindDeployment, Namespace: "shop", Name: "web", Pods: 2}}}
	got, ok, err := ParseMove(map[string]string{v1alpha1.AnnotationReclaimBack: m.Encode()})
	if err != nil || !ok || got.Policy != m.Policy || !got.Started.Equal(t0) || len(got.Owners) != 1 || got.Owners[0] != m.Owners[0] {
		t.Errorf("round trip: %+v %v %v", got, ok, err)
	}
	if _, ok, err := ParseMove(nil); ok || err != nil {
		t.Errorf("no annotation: ok %v err %v", ok, err)
	}
	if _, ok, err := ParseMove(map[string]string{v1alpha1.AnnotationReclaimBack: "{"}); !ok || err == nil {
		t.Errorf("bad annotation: ok %v err %v", ok, err)
	}
}

func TestAccrue(t *testing.T) {
	if got := Accrue(1.5, 2, t0, t0.Add(90*time.Minute)); got != 4.5 {
		t.Errorf("2 nodes for 1.5 h on top of 1.5 = %g, want 4.5", got)
	}
	if got := Accrue(1.5, 0, t0, t0.Add(time.Hour)); got != 1.5 {
		t.Errorf("no returned node adds nothing: %g", got)
	}
	if got := Accrue(1, 3, time.Time{}, t0); got != 1 {
		t.Errorf("never accounted adds nothing: %g", got)
	}
}

func TestSelectedAndSchedule(t *testing.T) {
	sel := v1alpha1.NodePoolSelector{Names: []string{"batch"}, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{{"batch", nil, true}, {"web-pool", map[string]string{"team": "web"}, true}, {"other", map[string]string{"team": "ml"}, false}} {
		if got, err := Selected(sel, tt.name, tt.labels); err != nil || got != tt.want {
			t.Errorf("Selected(%s) = %v, %v", tt.name, got, err)
		}
	}
	if ok, _ := Selected(v1alpha1.NodePoolSelector{}, "any", nil); !ok {
		t.Error("an empty selector selects every NodePool")
	}
	s, err := ScheduleOf(v1alpha1.ReclaimBackPolicySpec{Windows: []v1alpha1.MaintenanceWindow{{Days: []string{"Wed"}, Start: "22:00", Duration: metav1.Duration{Duration: 2 * time.Hour}, TimeZone: "UTC"}}})
	if err != nil || len(s.Windows) != 1 {
		t.Fatalf("ScheduleOf: %+v %v", s, err)
	}
	if open, _, _ := s.Open(t0); !open {
		t.Error("Wednesday 23:00 UTC is inside Wed 22:00 + 2h")
	}
	if _, err := ScheduleOf(v1alpha1.ReclaimBackPolicySpec{Windows: []v1alpha1.MaintenanceWindow{{Days: []string{"Wed"}, Start: "22:00", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Base"}}}); err == nil {
		t.Error("a bad time zone must fail")
	}
}

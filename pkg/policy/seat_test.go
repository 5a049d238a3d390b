package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestSeatRecord(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	r, err := ParseSeatRecord("")
	if err != nil || len(r) != 0 {
		t.Fatalf(`ParseSeatRecord("") = %v, %v; want an empty record`, r, err)
	}
	r, changed := r.With(map[string]string{"app/db-0": "ip-10-0-1-5"}, t0)
	if !changed || r.Host("app/db-0", t0) != "ip-10-0-1-5" {
		t.Errorf("adding an entry: %v, changed %v", r, changed)
	}
	back, err := ParseSeatRecord(r.String())
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("round trip %q → %v, %v; want %v", r.String(), back, err, r)
	}
	if again, changed := back.With(map[string]string{"app/db-0": "ip-10-0-1-5"}, t0.Add(time.Minute)); changed || !again["app/db-0"].At.Equal(t0) {
		t.Errorf("the same entry again: changed %v, entry %+v (would write the Node for nothing)", changed, again["app/db-0"])
	}
	moved, changed := back.With(map[string]string{"app/db-0": "ip-10-0-2-9", "app/db-1": "ip-10-0-2-9"}, t0.Add(time.Minute))
	if !changed || moved.Host("app/db-0", t0.Add(time.Minute)) != "ip-10-0-2-9" || len(moved) != 2 || back.Host("app/db-0", t0) != "ip-10-0-1-5" {
		t.Errorf("With = %v (changed %v), receiver %v: want both entries, the receiver unchanged", moved, changed, back)
	}
	// Entries of a past handoff expire: the webhook ignores them, the next write drops them.
	late := t0.Add(SeatRecordTTL + 2*time.Minute)
	if h := moved.Host("app/db-0", late); h != "" {
		t.Errorf("an entry older than %s still counts: %q", SeatRecordTTL, h)
	}
	pruned, changed := moved.With(nil, late)
	if !changed || len(pruned) != 0 {
		t.Errorf("With(nil) after the TTL = %v (changed %v), want the old entries dropped", pruned, changed)
	}
	if _, err := ParseSeatRecord("{not json"); err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationSeats) {
		t.Errorf("a malformed record: err %v, want one naming the annotation", err)
	}
}

func TestApplyPlacementPrefersSeatNode(t *testing.T) {
	c := DefaultConfig()
	pod := &corev1.Pod{}
	p := Placement{Tier: v1alpha1.TierCheckpointed, TierClass: tierClasses[v1alpha1.TierCheckpointed], SeatHost: "ip-10-0-1-5"}
	c.ApplyPlacement(pod, p)
	seat := corev1.PreferredSchedulingTerm{Weight: SeatPreferenceWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"ip-10-0-1-5"}}}}}
	terms := pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 2 || !reflect.DeepEqual(terms[1], seat) {
		t.Fatalf("preferred terms %+v, want the Spot preference and then %+v", terms, seat)
	}
	// Idempotent: the webhook may be called again on the same Pod (reinvocation).
	c.ApplyPlacement(pod, p)
	if n := len(pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); n != 2 {
		t.Errorf("applied twice: %d preferred terms, want 2", n)
	}
	if got := pod.Labels[v1alpha1.LabelSeatHost]; got != "ip-10-0-1-5" {
		t.Errorf("label %s = %q, want the seat's host", v1alpha1.LabelSeatHost, got)
	}
	// A Pod with a seat goes to the lifeboat scheduler, which binds it to its seat's node,
	// whatever the routing and whether or not a lifeboat is active; without a scheduler name
	// it keeps the default scheduler (and the preference).
	for _, tc := range []struct {
		name    string
		routing SchedulerRouting
		sched   string
		active  bool
		want    string
	}{
		{"no lifeboat active", RouteWhileLifeboatActive, v1alpha1.SchedulerName, false, v1alpha1.SchedulerName},
		{"a lifeboat active", RouteWhileLifeboatActive, v1alpha1.SchedulerName, true, v1alpha1.SchedulerName},
		{"routing Always", RouteAlways, v1alpha1.SchedulerName, false, v1alpha1.SchedulerName},
		{"no lifeboat scheduler", RouteWhileLifeboatActive, "", true, ""},
	} {
		c := DefaultConfig()
		c.SchedulerRouting, c.SchedulerName = tc.routing, tc.sched
		routed := &corev1.Pod{}
		c.ApplyPlacement(routed, Placement{Tier: v1alpha1.TierCheckpointed, TierClass: tierClasses[v1alpha1.TierCheckpointed], SeatHost: "ip-10-0-1-5", LifeboatActive: tc.active})
		if routed.Spec.SchedulerName != tc.want {
			t.Errorf("%s: a Pod with a seat got schedulerName %q, want %q", tc.name, routed.Spec.SchedulerName, tc.want)
		}
	}
	// No seat: no preference.
	plain := &corev1.Pod{}
	c.ApplyPlacement(plain, Placement{Tier: v1alpha1.TierCheckpointed, TierClass: tierClasses[v1alpha1.TierCheckpointed]})
	if n := len(plain.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); n != 1 {
		t.Errorf("without a seat: %d preferred terms, want the Spot preference only", n)
	}
	if _, ok := plain.Labels[v1alpha1.LabelSeatHost]; ok || plain.Spec.SchedulerName != "" {
		t.Errorf("without a seat: labels %v, schedulerName %q; want no seat host and the default scheduler (no lifeboat active)", plain.Labels, plain.Spec.SchedulerName)
	}
}

package bridge

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

var noticeAt = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

// tpod is a protected Pod on spot-1 owned by kind/owner, requesting cpu and memory.
type tpod struct {
	name, kind, owner, cpu, mem string
	hold                        string // the hold annotation, if any
	grace                       *int64
	tier                        v1alpha1.Tier
	extra                       corev1.ResourceList
}

func (tp tpod) build() *corev1.Pod {
	kind, owner := tp.kind, tp.owner
	if kind == "" {
		kind, owner = "ReplicaSet", "api-1"
	}
	cpu, mem := tp.cpu, tp.mem
	if cpu == "" {
		cpu = "1"
	}
	if mem == "" {
		mem = "1Gi"
	}
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	for k, v := range tp.extra {
		req[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: tp.name, UID: types.UID("uid-" + tp.name),
			Labels:          map[string]string{v1alpha1.LabelProtected: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "spot-1", TerminationGracePeriodSeconds: tp.grace,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if tp.tier != "" {
		p.Labels[v1alpha1.LabelTier] = string(tp.tier)
	}
	if tp.hold != "" {
		p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: tp.hold}
	}
	return p
}

// lifeboat is an active pool node resumed for spot-1, with cpu, mem and 110 pods allocatable.
func lifeboat(name string, ready bool, cpu, mem string) *corev1.Node {
	return buildtest.Node(name, buildtest.Pool("pool", v1alpha1.NodeStateActive), buildtest.Labels(map[string]string{v1alpha1.LabelResumedFor: "spot-1"}),
		buildtest.Allocatable(cpu, mem, "110"), buildtest.Ready(ready))
}

func heldUntil(t time.Time) string { return nodeutil.FormatTime(t) }

// planSummary is a PlanNode result in names: "pod@until" for holds, "pod:reason" for releases.
type planSummary struct {
	Hold, Release, Move, SeatMove []string
	Busy                          bool
}

func summarize(p NodePlan) planSummary {
	var s planSummary
	for _, a := range p.Hold {
		s.Hold = append(s.Hold, a.Pod.Name+"@"+a.Until.UTC().Format(time.RFC3339Nano))
		if a.Reason != "" {
			s.Hold[len(s.Hold)-1] += " reason " + a.Reason
		}
	}
	for _, a := range p.Release {
		s.Release = append(s.Release, a.Pod.Name+":"+a.Reason)
		if !a.Until.IsZero() {
			s.Release[len(s.Release)-1] += " until " + a.Until.String()
		}
	}
	for _, m := range p.Move {
		s.Move = append(s.Move, m.Name)
	}
	for _, m := range p.SeatMove {
		s.SeatMove = append(s.SeatMove, m.Name)
	}
	s.Busy = p.Busy
	return s
}

func TestPlanNode(t *testing.T) {
	o := DefaultOptions()
	now := noticeAt.Add(5 * time.Second)
	deadline30 := HoldDeadline(noticeAt, 30*time.Second, o) // the default grace period
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	held := heldUntil(deadline30)
	pods := func(tps ...tpod) []*corev1.Pod {
		out := make([]*corev1.Pod, len(tps))
		for i, tp := range tps {
			out[i] = tp.build()
		}
		return out
	}
	ready := []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}
	notReady := []*corev1.Node{lifeboat("lb-1", false, "4", "16Gi")}
	tests := []struct {
		name  string
		state NodeState
		want  planSummary
	}{
		{name: "not decided: busy and nothing else",
			state: NodeState{Now: now, NoticeAt: noticeAt, Lifeboats: ready, Protected: pods(tpod{name: "a"}, tpod{name: "b", hold: held})},
			want:  planSummary{Busy: true}},
		// A node Lifeboat resumed nothing for may still seat its Pods on the lifeboats of the
		// burst's other nodes (hold.go: the controller writes a hold or "released").
		{name: "decided none, a lifeboat of another node: hold",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, None: true, Lifeboats: ready, Protected: pods(tpod{name: "a"}, tpod{name: "b", hold: held})},
			want:  planSummary{Hold: []string{"a@" + at(deadline30)}, Busy: true}},
		{name: "decided none, no lifeboat anywhere: released no_lifeboat",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, None: true, Protected: pods(tpod{name: "a"}, tpod{name: "b", hold: held})},
			want:  planSummary{Release: []string{"a:" + ReleaseNoLifeboat, "b:" + ReleaseNoLifeboat}}},
		{name: "one Ready lifeboat, Pods fit: hold until the deadline",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready, Protected: pods(tpod{name: "a"}, tpod{name: "b"})},
			want:  planSummary{Hold: []string{"a@" + at(deadline30), "b@" + at(deadline30)}, Busy: true}},
		{name: "lifeboat not Ready yet, within the resume timeout: hold",
			state: NodeState{Now: noticeAt.Add(o.ResumeTimeout - time.Millisecond), NoticeAt: noticeAt, Decided: true, Lifeboats: notReady, Protected: pods(tpod{name: "a"})},
			want:  planSummary{Hold: []string{"a@" + at(deadline30)}, Busy: true}},
		{name: "one of two lifeboats Ready is enough",
			state: NodeState{Now: noticeAt.Add(o.ResumeTimeout + time.Second), NoticeAt: noticeAt, Decided: true,
				Lifeboats: []*corev1.Node{lifeboat("lb-1", false, "4", "16Gi"), lifeboat("lb-2", true, "4", "16Gi")}, Protected: pods(tpod{name: "a"})},
			want: planSummary{Hold: []string{"a@" + at(deadline30)}, Busy: true}},
		{name: "the deadline follows the Pod's grace period",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready, Protected: pods(tpod{name: "a", grace: ptr.To[int64](60)}, tpod{name: "b", grace: ptr.To[int64](0)})},
			want:  planSummary{Hold: []string{"a@" + at(noticeAt.Add(45*time.Second)), "b@" + at(noticeAt.Add(105*time.Second))}, Busy: true}},
		{name: "already held Pods: busy, not held again",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready, Protected: pods(tpod{name: "a", hold: held}, tpod{name: "b", hold: held})},
			want:  planSummary{Busy: true}},

		// First-fit decreasing by CPU: in the given order (0.5, 1, 1.5 on 2 CPUs) first-fit
		// would seat 0.5 and 1; decreasing seats 1.5 and 0.5 and lets the 1-CPU Pod go.
		{name: "Pods that do not fit: FFD by CPU, the rest released no_seat",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: []*corev1.Node{lifeboat("lb-1", true, "2", "16Gi")},
				Protected: pods(tpod{name: "small", cpu: "500m"}, tpod{name: "mid", cpu: "1"}, tpod{name: "big", cpu: "1500m"})},
			want: planSummary{Hold: []string{"small@" + at(deadline30), "big@" + at(deadline30)}, Release: []string{"mid:" + ReleaseNoSeat}, Busy: true}},
		{name: "FFD over two lifeboats",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true,
				Lifeboats: []*corev1.Node{lifeboat("lb-1", true, "2", "16Gi"), lifeboat("lb-2", false, "2", "16Gi")},
				Protected: pods(tpod{name: "c", cpu: "1"}, tpod{name: "a", cpu: "1500m"}, tpod{name: "b", cpu: "1500m"}, tpod{name: "d", cpu: "500m"})},
			want: planSummary{Hold: []string{"a@" + at(deadline30), "b@" + at(deadline30), "d@" + at(deadline30)}, Release: []string{"c:" + ReleaseNoSeat}, Busy: true}},
		{name: "memory decides between equal CPU requests",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "4Gi")},
				Protected: pods(tpod{name: "a", mem: "1Gi"}, tpod{name: "b", mem: "3Gi"}, tpod{name: "c", mem: "2Gi"})},
			want: planSummary{Hold: []string{"a@" + at(deadline30), "b@" + at(deadline30)}, Release: []string{"c:" + ReleaseNoSeat}, Busy: true}},
		{name: "a resource the lifeboat lacks: no seat",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "gpu", extra: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}, tpod{name: "a"})},
			want: planSummary{Hold: []string{"a@" + at(deadline30)}, Release: []string{"gpu:" + ReleaseNoSeat}, Busy: true}},
		{name: "grace too long: no_time_left",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "slow", grace: ptr.To[int64](110)}, tpod{name: "a"})},
			want: planSummary{Hold: []string{"a@" + at(deadline30)}, Release: []string{"slow:" + ReleaseNoTimeLeft}, Busy: true}},
		{name: "deadline exactly now: no_time_left",
			state: NodeState{Now: noticeAt.Add(75 * time.Second), NoticeAt: noticeAt, Decided: true, Lifeboats: ready, Protected: pods(tpod{name: "a"})},
			want:  planSummary{Release: []string{"a:" + ReleaseNoTimeLeft}}},
		{name: "no lifeboat Ready by the resume timeout: held and undecided Pods released",
			state: NodeState{Now: noticeAt.Add(o.ResumeTimeout), NoticeAt: noticeAt, Decided: true, Lifeboats: notReady,
				Protected: pods(tpod{name: "held", hold: held}, tpod{name: "new"})},
			want: planSummary{Release: []string{"held:" + ReleaseLifeboatNotReady, "new:" + ReleaseLifeboatNotReady}}},
		{name: "no lifeboat Ready just before the resume timeout: still held",
			state: NodeState{Now: noticeAt.Add(o.ResumeTimeout - time.Nanosecond), NoticeAt: noticeAt, Decided: true, Lifeboats: notReady,
				Protected: pods(tpod{name: "held", hold: held}, tpod{name: "new"})},
			want: planSummary{Hold: []string{"new@" + at(deadline30)}, Busy: true}},
		{name: "no lifeboats: no_lifeboat",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true,
				Protected: pods(tpod{name: "held", hold: held}, tpod{name: "new"}, tpod{name: "sts", kind: "StatefulSet", owner: "db"})},
			want: planSummary{Release: []string{"held:" + ReleaseNoLifeboat, "new:" + ReleaseNoLifeboat, "sts:" + ReleaseNoLifeboat}}},
		{name: "no lifeboats beats no_seat and no_time_left",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true,
				Protected: pods(tpod{name: "slow", grace: ptr.To[int64](110)}, tpod{name: "huge", cpu: "64"})},
			want: planSummary{Release: []string{"slow:" + ReleaseNoLifeboat, "huge:" + ReleaseNoLifeboat}}},
		{name: "released, expired and unparsable holds are left alone",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "released", hold: v1alpha1.EvictionHoldReleased}, tpod{name: "expired", hold: heldUntil(now.Add(-time.Second))},
					tpod{name: "expired-now", hold: heldUntil(now)}, tpod{name: "junk", hold: "soon"})},
			want: planSummary{}},
		{name: "released and expired holds are left alone when giving up",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true,
				Protected: pods(tpod{name: "released", hold: v1alpha1.EvictionHoldReleased}, tpod{name: "expired", hold: heldUntil(now.Add(-time.Second))})},
			want: planSummary{}},
		{name: "Job, critical and bare Pods are untouched",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "job", kind: "Job", owner: "train"}, tpod{name: "crit", tier: v1alpha1.TierCritical}, tpod{name: "ds", kind: "DaemonSet", owner: "agent"})},
			want: planSummary{}},
		{name: "Job Pods untouched when giving up",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Protected: pods(tpod{name: "job", kind: "Job", owner: "train"})},
			want:  planSummary{}},

		{name: "held StatefulSet Pods: one per settled StatefulSet moves once a lifeboat is Ready",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}, tpod{name: "db-1", kind: "StatefulSet", owner: "db", hold: held},
					tpod{name: "cache-0", kind: "StatefulSet", owner: "cache", hold: held}, tpod{name: "queue-0", kind: "StatefulSet", owner: "queue", hold: held},
					tpod{name: "api-a", hold: held}),
				SettledStatefulSets: map[string]bool{"app/db": true, "app/cache": false, "app/queue": true}},
			want: planSummary{Move: []string{"db-0", "queue-0"}, Busy: true}},
		{name: "held StatefulSet Pods do not move while no lifeboat is Ready",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: notReady,
				Protected:           pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}),
				SettledStatefulSets: map[string]bool{"app/db": true}},
			want: planSummary{Busy: true}},
		{name: "held StatefulSet Pods do not move while their StatefulSet is not settled",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held})},
			want: planSummary{Busy: true}},
		{name: "undecided StatefulSet Pods are held first, not moved",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected:           pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db"}),
				SettledStatefulSets: map[string]bool{"app/db": true}},
			want: planSummary{Hold: []string{"db-0@" + at(deadline30)}, Busy: true}},
		// Straight to the seat: the room Karpenter launched at the hold is up.
		{name: "a held StatefulSet Pod whose seat is usable moves straight to it, before one that has none",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected: pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}, tpod{name: "db-1", kind: "StatefulSet", owner: "db", hold: held},
					tpod{name: "queue-0", kind: "StatefulSet", owner: "queue", hold: held}),
				SettledStatefulSets: map[string]bool{"app/db": true, "app/queue": true},
				SeatHosts:           map[types.UID]string{"uid-db-1": "ip-10-0-0-9"}},
			want: planSummary{Move: []string{"queue-0"}, SeatMove: []string{"db-1"}, Busy: true}},
		{name: "straight to the seat while no lifeboat is Ready yet; the others wait",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: notReady,
				Protected: pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}, tpod{name: "db-1", kind: "StatefulSet", owner: "db", hold: held},
					tpod{name: "queue-0", kind: "StatefulSet", owner: "queue", hold: held}),
				SettledStatefulSets: map[string]bool{"app/db": true, "app/queue": true},
				SeatHosts:           map[types.UID]string{"uid-db-0": "ip-10-0-0-9", "uid-db-1": "ip-10-0-0-8"}},
			want: planSummary{SeatMove: []string{"db-0"}, Busy: true}},
		{name: "a usable seat does not move a StatefulSet that is not settled",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected:           pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}),
				SettledStatefulSets: map[string]bool{"app/db": false},
				SeatHosts:           map[types.UID]string{"uid-db-0": "ip-10-0-0-9"}},
			want: planSummary{Busy: true}},
		{name: "a usable seat does not move a Pod whose hold is not written yet",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected:           pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db"}),
				SettledStatefulSets: map[string]bool{"app/db": true},
				SeatHosts:           map[types.UID]string{"uid-db-0": "ip-10-0-0-9"}},
			want: planSummary{Hold: []string{"db-0@" + at(deadline30)}, Busy: true}},
		{name: "a same-named StatefulSet in another namespace does not settle it",
			state: NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: ready,
				Protected:           pods(tpod{name: "db-0", kind: "StatefulSet", owner: "db", hold: held}),
				SettledStatefulSets: map[string]bool{"other/db": true, "db": true}},
			want: planSummary{Busy: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(PlanNode(tt.state, o))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanNode:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestPlanNodeKeepsThePodObjects(t *testing.T) {
	p := tpod{name: "a"}.build()
	plan := PlanNode(NodeState{Now: noticeAt, NoticeAt: noticeAt, Decided: true,
		Lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}, Protected: []*corev1.Pod{p}}, DefaultOptions())
	if len(plan.Hold) != 1 || plan.Hold[0].Pod != p {
		t.Fatalf("plan %+v: want a hold of the given Pod object", plan)
	}
	if p.Annotations != nil {
		t.Errorf("PlanNode wrote the Pod: %v", p.Annotations)
	}
}

func TestSeatsFor(t *testing.T) {
	build := func(tps ...tpod) []*corev1.Pod {
		var out []*corev1.Pod
		for _, tp := range tps {
			out = append(out, tp.build())
		}
		return out
	}
	names := func(pods []*corev1.Pod, seats map[types.UID]bool) []string {
		var out []string
		for _, p := range pods {
			if seats[p.UID] {
				out = append(out, p.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		lifeboats []*corev1.Node
		want      []string
	}{
		{name: "no lifeboats", pods: build(tpod{name: "a"})},
		{name: "no Pods", lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}},
		{name: "all fit", pods: build(tpod{name: "a"}, tpod{name: "b"}, tpod{name: "c"}, tpod{name: "d"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}, want: []string{"a", "b", "c", "d"}},
		{name: "exactly full", pods: build(tpod{name: "a", cpu: "2", mem: "8Gi"}, tpod{name: "b", cpu: "2", mem: "8Gi"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}, want: []string{"a", "b"}},
		{name: "memory bound", pods: build(tpod{name: "a", cpu: "100m", mem: "10Gi"}, tpod{name: "b", cpu: "200m", mem: "10Gi"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}, want: []string{"b"}},
		{name: "decreasing by CPU", pods: build(tpod{name: "s", cpu: "500m"}, tpod{name: "m", cpu: "1"}, tpod{name: "l", cpu: "1500m"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "2", "16Gi")}, want: []string{"l", "s"}},
		{name: "equal requests: by name", pods: build(tpod{name: "z", cpu: "1"}, tpod{name: "y", cpu: "1"}, tpod{name: "x", cpu: "1"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "2", "16Gi")}, want: []string{"x", "y"}},
		{name: "spills to the second lifeboat", pods: build(tpod{name: "a", cpu: "3"}, tpod{name: "b", cpu: "3"}, tpod{name: "c", cpu: "1"}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi"), lifeboat("lb-2", true, "4", "16Gi")}, want: []string{"a", "b", "c"}},
		{name: "zero request of an unknown resource fits", pods: build(tpod{name: "a", extra: corev1.ResourceList{"example.com/x": resource.MustParse("0")}}),
			lifeboats: []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}, want: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]corev1.ResourceList, len(tt.lifeboats))
			for i, n := range tt.lifeboats {
				before[i] = n.Status.Allocatable.DeepCopy()
			}
			free := make([]corev1.ResourceList, len(tt.lifeboats))
			for i, n := range tt.lifeboats {
				free[i] = n.Status.Allocatable
			}
			got := names(tt.pods, seatsFor(tt.pods, free))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("seats %v, want %v", got, tt.want)
			}
			for i, n := range tt.lifeboats {
				if !reflect.DeepEqual(n.Status.Allocatable, before[i]) {
					t.Errorf("seatsFor changed the free capacity of %s: %v, was %v", n.Name, n.Status.Allocatable, before[i])
				}
			}
		})
	}
}

func TestHoldDeadlineAndGrace(t *testing.T) {
	o := DefaultOptions()
	if got, want := HoldDeadline(noticeAt, 30*time.Second, o), noticeAt.Add(75*time.Second); !got.Equal(want) {
		t.Errorf("HoldDeadline(30s) = %s, want %s", got, want)
	}
	if got, want := HoldDeadline(noticeAt, 0, Options{Notice: 2 * time.Minute, Margin: 10 * time.Second}), noticeAt.Add(110*time.Second); !got.Equal(want) {
		t.Errorf("HoldDeadline(0) = %s, want %s", got, want)
	}
	if got := HoldDeadline(noticeAt, 110*time.Second, o); !got.Before(noticeAt) {
		t.Errorf("HoldDeadline(110s) = %s, want before the notice", got)
	}
	if g := Grace(&corev1.Pod{}); g != 30*time.Second {
		t.Errorf("Grace(unset) = %s, want 30s", g)
	}
	if g := Grace(&corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0)}}); g != 0 {
		t.Errorf("Grace(0) = %s, want 0", g)
	}
	if g := Grace(&corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](90)}}); g != 90*time.Second {
		t.Errorf("Grace(90) = %s, want 90s", g)
	}
}

func TestHoldState(t *testing.T) {
	until := noticeAt.Add(75 * time.Second)
	tests := []struct {
		name                    string
		annotations             map[string]string
		until                   time.Time
		released, decided, zero bool
	}{
		{name: "no annotation"},
		{name: "other annotations", annotations: map[string]string{"a": "b"}},
		{name: "a deadline", annotations: map[string]string{v1alpha1.AnnotationEvictionHold: nodeutil.FormatTime(until)}, until: until, decided: true},
		{name: "released", annotations: map[string]string{v1alpha1.AnnotationEvictionHold: v1alpha1.EvictionHoldReleased}, released: true, decided: true},
		{name: "unparsable counts as released", annotations: map[string]string{v1alpha1.AnnotationEvictionHold: "later"}, released: true, decided: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, r, d := HoldState(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}})
			if !u.Equal(tt.until) || r != tt.released || d != tt.decided {
				t.Errorf("HoldState = %s, %v, %v; want %s, %v, %v", u, r, d, tt.until, tt.released, tt.decided)
			}
		})
	}
}

// spod is a running Pod of the surging Deployment on node.
func spod(name, node string, ready bool, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := buildtest.Pod("app", name, buildtest.UID(name), buildtest.OnNode(node), buildtest.Running(), buildtest.Ready(ready))
	for _, m := range mods {
		m(p)
	}
	return p
}

func terminating(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: noticeAt} }

func readyOn(node string, n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		out = append(out, spod(fmt.Sprintf("%s-%d", node, i), node, true))
	}
	return out
}

func concat(lists ...[]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func TestPlanSurge(t *testing.T) {
	tests := []struct {
		name       string
		surge      Surge
		pods       []*corev1.Pod
		gone       []string
		remove     string
		removePods []string
	}{
		{name: "empty surge", surge: Surge{Base: 6, Nodes: map[string]int32{}}, pods: readyOn("od-1", 6)},
		{name: "no live Pods on the node: gone", surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: readyOn("od-1", 4),
			gone: []string{"spot-1"}},
		{name: "no Pods at all: gone", surge: Surge{Base: 6, Nodes: map[string]int32{"spot-2": 1, "spot-1": 2}},
			gone: []string{"spot-1", "spot-2"}},
		{name: "terminating and finished Pods on the node do not keep it",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 3}},
			pods: concat(readyOn("od-1", 2), []*corev1.Pod{spod("t", "spot-1", true, terminating),
				spod("s", "spot-1", false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				spod("f", "spot-1", false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })}),
			gone: []string{"spot-1"}},
		{name: "replacements Ready: remove",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: concat(readyOn("spot-1", 2), readyOn("od-1", 6)),
			remove: "spot-1", removePods: []string{"spot-1-0", "spot-1-1"}},
		{name: "the node's not-Ready Pods go too",
			surge: Surge{Base: 2, Nodes: map[string]int32{"spot-1": 2}}, pods: concat([]*corev1.Pod{spod("x", "spot-1", false), spod("y", "spot-1", true)}, readyOn("od-1", 2)),
			remove: "spot-1", removePods: []string{"x", "y"}},
		{name: "one replacement short: wait",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: concat(readyOn("spot-1", 2), readyOn("od-1", 5), []*corev1.Pod{spod("starting", "lb-1", false)})},
		{name: "terminating Ready Pods elsewhere do not count",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: concat(readyOn("spot-1", 2), readyOn("od-1", 5), []*corev1.Pod{spod("leaving", "od-2", true, terminating)})},
		{name: "finished Pods elsewhere do not count",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: concat(readyOn("spot-1", 2), readyOn("od-1", 5),
				[]*corev1.Pod{spod("done", "od-2", true, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })})},
		{name: "unscheduled Pods do not count",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2}}, pods: concat(readyOn("spot-1", 2), readyOn("od-1", 5), []*corev1.Pod{spod("pending", "", false)})},
		{name: "at most one remove per step: the first in sorted order",
			surge: Surge{Base: 4, Nodes: map[string]int32{"spot-b": 1, "spot-a": 1}}, pods: concat(readyOn("spot-a", 1), readyOn("spot-b", 1), readyOn("od-1", 6)),
			remove: "spot-a", removePods: []string{"spot-a-0"}},
		{name: "the first removable node, not the first node",
			surge: Surge{Base: 7, Nodes: map[string]int32{"spot-a": 3, "spot-b": 1}}, pods: concat(readyOn("spot-a", 3), readyOn("spot-b", 1), readyOn("od-1", 5)),
			remove: "spot-b", removePods: []string{"spot-b-0"}},
		{name: "gone and remove in one step",
			surge: Surge{Base: 6, Nodes: map[string]int32{"spot-1": 2, "spot-2": 2, "spot-3": 1}}, pods: concat(readyOn("spot-2", 2), readyOn("od-1", 6)),
			gone: []string{"spot-1", "spot-3"}, remove: "spot-2", removePods: []string{"spot-2-0", "spot-2-1"}},
		{name: "base 0: remove at once",
			surge: Surge{Base: 0, Nodes: map[string]int32{"spot-1": 1}}, pods: readyOn("spot-1", 1),
			remove: "spot-1", removePods: []string{"spot-1-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step := PlanSurge(tt.surge, tt.pods)
			var removed []string
			for _, p := range step.RemovePods {
				removed = append(removed, p.Name)
			}
			if !reflect.DeepEqual(step.Gone, tt.gone) || step.Remove != tt.remove || !reflect.DeepEqual(removed, tt.removePods) {
				t.Errorf("PlanSurge = gone %v remove %q %v; want gone %v remove %q %v", step.Gone, step.Remove, removed, tt.gone, tt.remove, tt.removePods)
			}
		})
	}
}

func TestParseSurge(t *testing.T) {
	s, err := ParseSurge("")
	if err != nil || s.Base != 0 || s.Nodes == nil || len(s.Nodes) != 0 || s.Total() != 0 {
		t.Errorf(`ParseSurge("") = %+v, %v; want an empty surge with a writable map`, s, err)
	}
	orig := Surge{Base: 6, Nodes: map[string]int32{"spot-2": 1, "spot-1": 2}}
	raw := orig.String()
	if raw != `{"base":6,"nodes":{"spot-1":2,"spot-2":1}}` {
		t.Errorf("String = %s", raw)
	}
	back, err := ParseSurge(raw)
	if err != nil || !reflect.DeepEqual(back, orig) {
		t.Errorf("round trip = %+v, %v; want %+v", back, err, orig)
	}
	if back.Total() != 3 {
		t.Errorf("Total = %d, want 3", back.Total())
	}
	noNodes, err := ParseSurge(`{"base":3}`)
	if err != nil || noNodes.Base != 3 || noNodes.Nodes == nil {
		t.Errorf(`ParseSurge({"base":3}) = %+v, %v; want base 3 and a writable map`, noNodes, err)
	}
	noNodes.Nodes["x"] = 1 // must not panic
	nullNodes, err := ParseSurge(`{"base":3,"nodes":null}`)
	if err != nil || nullNodes.Nodes == nil {
		t.Errorf("ParseSurge(nodes null) = %+v, %v; want a writable map", nullNodes, err)
	}
	if got := (Surge{Base: 2}).String(); got != `{"base":2,"nodes":null}` && got != `{"base":2,"nodes":{}}` {
		t.Errorf("String of a surge without nodes = %s", got)
	}
	for _, bad := range []string{"{", "not json", `{"base":"six"}`, `{"nodes":{"a":"b"}}`, `[]`} {
		if _, err := ParseSurge(bad); err == nil {
			t.Errorf("ParseSurge(%q): no error", bad)
		} else if !strings.Contains(err.Error(), v1alpha1.AnnotationBridgeSurge) {
			t.Errorf("ParseSurge(%q) error %q does not name the annotation", bad, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	mod := func(f func(o *Options)) Options {
		o := DefaultOptions()
		f(&o)
		return o
	}
	tests := []struct {
		name     string
		opts     Options
		contains string // "" = valid
	}{
		{name: "zero margin", opts: mod(func(o *Options) { o.Margin = 0 })},
		{name: "tight", opts: mod(func(o *Options) { o.Margin, o.ResumeTimeout = 119*time.Second, 119*time.Second })},
		{name: "zero notice", opts: mod(func(o *Options) { o.Notice = 0 }), contains: "notice"},
		{name: "negative notice", opts: mod(func(o *Options) { o.Notice = -time.Second }), contains: "notice"},
		{name: "negative margin", opts: mod(func(o *Options) { o.Margin = -time.Second }), contains: "margin"},
		{name: "margin equal to the notice", opts: mod(func(o *Options) { o.Margin = o.Notice }), contains: "margin"},
		{name: "margin above the notice", opts: mod(func(o *Options) { o.Margin = 3 * time.Minute }), contains: "margin"},
		{name: "zero resume timeout", opts: mod(func(o *Options) { o.ResumeTimeout = 0 }), contains: "resume timeout"},
		{name: "negative resume timeout", opts: mod(func(o *Options) { o.ResumeTimeout = -time.Second }), contains: "resume timeout"},
		{name: "resume timeout equal to the notice", opts: mod(func(o *Options) { o.ResumeTimeout = o.Notice }), contains: "resume timeout"},
		{name: "zero poll", opts: mod(func(o *Options) { o.Poll = 0 }), contains: "poll"},
		{name: "negative poll", opts: mod(func(o *Options) { o.Poll = -time.Second }), contains: "poll"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.contains == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.contains != "" && err == nil:
				t.Errorf("Validate: nil, want an error about %s", tt.contains)
			case tt.contains != "" && !strings.Contains(err.Error(), tt.contains):
				t.Errorf("Validate: %v, want it to mention %s", err, tt.contains)
			}
		})
	}
}

// With Free set (the controller's case), Pods already held are booked in it: only the node's
// undecided Pods compete for what is left.
func TestPlanNodeWithFree(t *testing.T) {
	o := DefaultOptions()
	now := noticeAt.Add(5 * time.Second)
	deadline := HoldDeadline(noticeAt, 30*time.Second, o).UTC().Format(time.RFC3339Nano)
	held := heldUntil(HoldDeadline(noticeAt, 30*time.Second, o))
	res := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	boats := []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}
	tests := []struct {
		name string
		free []corev1.ResourceList
		pods []tpod
		want planSummary
	}{
		{name: "held Pods are not packed again", free: []corev1.ResourceList{res("1", "16Gi")},
			pods: []tpod{{name: "a", hold: held}, {name: "b"}, {name: "c"}},
			want: planSummary{Hold: []string{"b@" + deadline}, Release: []string{"c:" + ReleaseNoSeat}, Busy: true}},
		{name: "released and expired Pods are not packed", free: []corev1.ResourceList{res("1", "16Gi")},
			pods: []tpod{{name: "a", cpu: "2", hold: v1alpha1.EvictionHoldReleased}, {name: "b", cpu: "2", hold: heldUntil(now)}, {name: "c"}},
			want: planSummary{Hold: []string{"c@" + deadline}, Busy: true}},
		{name: "nothing free: no seat", free: []corev1.ResourceList{},
			pods: []tpod{{name: "a"}},
			want: planSummary{Release: []string{"a:" + ReleaseNoSeat}}},
		{name: "the node's Job Pods compete for the seats too", free: []corev1.ResourceList{res("2", "16Gi")},
			pods: []tpod{{name: "api", cpu: "1"}, {name: "train", kind: "Job", owner: "train", cpu: "2"}},
			want: planSummary{Release: []string{"api:" + ReleaseNoSeat}}},
		{name: "free over several lifeboats", free: []corev1.ResourceList{res("1", "16Gi"), res("1", "16Gi")},
			pods: []tpod{{name: "a"}, {name: "b"}, {name: "c"}},
			want: planSummary{Hold: []string{"a@" + deadline, "b@" + deadline}, Release: []string{"c:" + ReleaseNoSeat}, Busy: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var protected []*corev1.Pod
			for _, tp := range tt.pods {
				protected = append(protected, tp.build())
			}
			got := summarize(PlanNode(NodeState{Now: now, NoticeAt: noticeAt, Decided: true, Lifeboats: boats, Free: tt.free, Protected: protected}, o))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanNode:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFreeSeats(t *testing.T) {
	// boatPod is a Pod of owner (a ReplicaSet) requesting cpu, bound to node.
	boatPod := func(name, owner, cpu, node string) *corev1.Pod {
		p := tpod{name: name, owner: owner, kind: "ReplicaSet", cpu: cpu, mem: "1Gi"}.build()
		p.Spec.NodeName = node
		return p
	}
	cpuOf := func(free []corev1.ResourceList) []string {
		var out []string
		for _, f := range free {
			out = append(out, f.Cpu().String())
		}
		return out
	}
	lb1, lb2 := lifeboat("lb-1", true, "4", "16Gi"), lifeboat("lb-2", false, "4", "16Gi")
	tests := []struct {
		name      string
		lifeboats []*corev1.Node
		bound     map[string][]*corev1.Pod
		held      []*corev1.Pod
		pending   []*corev1.Pod
		wantCPU   []string
	}{
		{name: "no lifeboats", held: []*corev1.Pod{boatPod("h", "api-1", "1", "spot-1")}},
		{name: "empty lifeboats: their allocatable", lifeboats: []*corev1.Node{lb1, lb2}, wantCPU: []string{"4", "4"}},
		{name: "bound Pods take their requests", lifeboats: []*corev1.Node{lb1, lb2},
			bound:   map[string][]*corev1.Pod{"lb-2": {boatPod("x", "other-1", "1500m", "lb-2"), boatPod("y", "other-1", "500m", "lb-2")}},
			wantCPU: []string{"4", "2"}},
		{name: "held Pods without a replacement on a lifeboat are booked", lifeboats: []*corev1.Node{lb1},
			held:    []*corev1.Pod{boatPod("h1", "api-1", "1", "spot-1"), boatPod("h2", "api-1", "1", "spot-2")},
			wantCPU: []string{"2"}},
		{name: "a held Pod whose replacement is bound counts once", lifeboats: []*corev1.Node{lb1},
			bound:   map[string][]*corev1.Pod{"lb-1": {boatPod("r1", "api-1", "1", "lb-1")}},
			held:    []*corev1.Pod{boatPod("h1", "api-1", "1", "spot-1"), boatPod("h2", "api-1", "1", "spot-1")},
			wantCPU: []string{"2"}},
		{name: "replacements of another controller do not seat a held Pod", lifeboats: []*corev1.Node{lb1},
			bound:   map[string][]*corev1.Pod{"lb-1": {boatPod("r1", "web-1", "1", "lb-1")}},
			held:    []*corev1.Pod{boatPod("h1", "api-1", "1", "spot-1")},
			wantCPU: []string{"2"}},
		{name: "pending protected Pods are booked", lifeboats: []*corev1.Node{lb1},
			pending: []*corev1.Pod{boatPod("job-x", "train", "1500m", "")},
			wantCPU: []string{"2500m"}},
		{name: "a pending replacement of a held Pod is not booked twice", lifeboats: []*corev1.Node{lb1},
			held:    []*corev1.Pod{boatPod("h1", "api-1", "1", "spot-1")},
			pending: []*corev1.Pod{boatPod("r1", "api-1", "1", "")},
			wantCPU: []string{"3"}},
		{name: "what does not fit takes nothing", lifeboats: []*corev1.Node{lb1, lb2},
			held:    []*corev1.Pod{boatPod("huge", "big-1", "6", "spot-1"), boatPod("h1", "api-1", "3", "spot-1"), boatPod("h2", "api-1", "3", "spot-1"), boatPod("s", "small-1", "1", "spot-1")},
			wantCPU: []string{"0", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]corev1.ResourceList, len(tt.lifeboats))
			for i, n := range tt.lifeboats {
				before[i] = n.Status.Allocatable.DeepCopy()
			}
			free := FreeSeats(tt.lifeboats, tt.bound, tt.held, tt.pending)
			if len(free) != len(tt.lifeboats) {
				t.Fatalf("FreeSeats returned %d lists for %d lifeboats", len(free), len(tt.lifeboats))
			}
			if got := cpuOf(free); !reflect.DeepEqual(got, tt.wantCPU) {
				t.Errorf("free CPU %v, want %v", got, tt.wantCPU)
			}
			for i, n := range tt.lifeboats {
				if !reflect.DeepEqual(n.Status.Allocatable, before[i]) {
					t.Errorf("FreeSeats changed the allocatable of %s: %v, was %v", n.Name, n.Status.Allocatable, before[i])
				}
			}
		})
	}
}

// A StatefulSet's held Pods move one at a time: the moved Pod is released, evicted and
// recreated under its own name. That recreated Pod is the replacement of the moved Pod, not of
// the StatefulSet's Pods still held — they need their own seats when their turn comes.
func TestFreeSeatsStatefulSetMove(t *testing.T) {
	dbPod := func(name, node string) *corev1.Pod {
		p := tpod{name: name, kind: "StatefulSet", owner: "db", cpu: "1", mem: "1Gi"}.build()
		p.Spec.NodeName = node
		return p
	}
	boats := []*corev1.Node{lifeboat("lb-1", true, "4", "16Gi")}
	// db-0 and db-1 held on spot-1: two seats booked.
	if got := FreeSeats(boats, nil, []*corev1.Pod{dbPod("db-0", "spot-1"), dbPod("db-1", "spot-1")}, nil)[0].Cpu().String(); got != "2" {
		t.Fatalf("two held StatefulSet Pods: free CPU %s, want 2", got)
	}
	// db-0 moved: recreated, waiting for a node; db-1 still held.
	if got := FreeSeats(boats, nil, []*corev1.Pod{dbPod("db-1", "spot-1")}, []*corev1.Pod{dbPod("db-0", "")})[0].Cpu().String(); got != "2" {
		t.Errorf("BUG: db-0 moved and pending, db-1 held: free CPU %s, want 2 (db-0's seat now, db-1's seat for its move)", got)
	}
	// db-0 bound to the lifeboat; db-1 still held.
	bound := map[string][]*corev1.Pod{"lb-1": {dbPod("db-0", "lb-1")}}
	if got := FreeSeats(boats, bound, []*corev1.Pod{dbPod("db-1", "spot-1")}, nil)[0].Cpu().String(); got != "2" {
		t.Errorf("BUG: db-0 moved onto lb-1, db-1 held: free CPU %s, want 2 (db-1 still needs a seat for its move)", got)
	}
}

// A lifeboat runs out of Pod slots (maxPods) before CPU when the Pods are small: seats count
// slots too, and a node that reports no slot count is not limited by it.
func TestSeatsCountPodSlots(t *testing.T) {
	small := func(name, node string) *corev1.Pod {
		p := tpod{name: name, owner: "api-1", kind: "ReplicaSet", cpu: "100m", mem: "128Mi"}.build()
		p.Spec.NodeName = node
		return p
	}
	slots := buildtest.Node("lb-1", buildtest.Pool("pool", v1alpha1.NodeStateActive), buildtest.Allocatable("16", "64Gi", "3"), buildtest.Ready(true))
	bound := map[string][]*corev1.Pod{"lb-1": {small("ds", "lb-1"), small("other", "lb-1")}}
	free := FreeSeats([]*corev1.Node{slots}, bound, nil, nil)
	if got := free[0][corev1.ResourcePods]; got.Value() != 1 {
		t.Fatalf("pods left on a 3-slot lifeboat with 2 bound: %s, want 1", got.String())
	}
	seated := seatsFor([]*corev1.Pod{small("h1", "spot-1"), small("h2", "spot-1")}, free)
	if len(seated) != 1 {
		t.Errorf("seats for 2 small Pods with 1 slot left: %d, want 1 (the other is released at once)", len(seated))
	}

	noSlots := slots.DeepCopy()
	delete(noSlots.Status.Allocatable, corev1.ResourcePods)
	free = FreeSeats([]*corev1.Node{noSlots}, bound, nil, nil)
	if _, tracked := free[0][corev1.ResourcePods]; tracked {
		t.Errorf("a lifeboat without a slot count got one: %v", free[0])
	}
	if seated := seatsFor([]*corev1.Pod{small("h1", "spot-1"), small("h2", "spot-1")}, free); len(seated) != 2 {
		t.Errorf("seats on a lifeboat without a slot count: %d, want 2", len(seated))
	}
}

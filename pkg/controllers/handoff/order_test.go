package handoff

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(ns, name, ownerKind, owner string, prio int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Priority: ptr.To(prio)}}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: owner, Controller: ptr.To(true)}}
	}
	return p
}

func names(g Group) []string {
	var out []string
	for _, p := range g.Pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestGroupPods(t *testing.T) {
	pods := []*corev1.Pod{
		pod("b", "web-2", "ReplicaSet", "web-abc", 10000),
		pod("a", "db-0", "StatefulSet", "db", 1000),
		pod("b", "web-1", "ReplicaSet", "web-abc", 10000),
		pod("a", "api-1", "ReplicaSet", "api-xyz", 10000),
		pod("a", "batch-2", "Job", "batch", -100),
		pod("a", "orphan-rs-1", "ReplicaSet", "no-deployment", 0),
		pod("a", "bare", "", "", 0),
		pod("a", "batch-1", "Job", "batch", -100),
		pod("a", "lowest", "", "", -1000),
	}
	rs := map[string]string{"b/web-abc": "web", "a/api-xyz": "api"}
	got := GroupPods(pods, rs)
	if len(got) != 4 {
		t.Fatalf("groups = %d, want 4: %+v", len(got), got)
	}
	if got[0].Kind != KindDeployment || got[0].Name != "api" || !reflect.DeepEqual(names(got[0]), []string{"a/api-1"}) {
		t.Errorf("first group = %s %s %v", got[0].Kind, got[0].Name, names(got[0]))
	}
	if got[1].Name != "web" || !reflect.DeepEqual(names(got[1]), []string{"b/web-1", "b/web-2"}) {
		t.Errorf("second group = %s %v", got[1].Name, names(got[1]))
	}
	wantEvict := []string{"a/lowest", "a/bare", "a/orphan-rs-1", "a/db-0"}
	if got[2].Kind != KindEvict || !reflect.DeepEqual(names(got[2]), wantEvict) {
		t.Errorf("evict group = %v, want %v (lowest priority first)", names(got[2]), wantEvict)
	}
	// Job Pods are never evicted by the drain: each eviction would grow the Job's back-off.
	if got[3].Kind != KindWait || !reflect.DeepEqual(names(got[3]), []string{"a/batch-1", "a/batch-2"}) {
		t.Errorf("wait group = %s %v, want the Job Pods by name", got[3].Kind, names(got[3]))
	}
	if n := Waiting(got); n != 2 {
		t.Errorf("Waiting = %d, want 2", n)
	}
}

func TestGroupPodsNonControllerOwner(t *testing.T) {
	// Only the controller reference decides: a Pod merely referencing a Job is evicted.
	p := pod("a", "x", "", "", 0)
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "j"}}
	got := GroupPods([]*corev1.Pod{p}, nil)
	if len(got) != 1 || got[0].Kind != KindEvict {
		t.Errorf("groups = %+v, want one Evict group", got)
	}
}

func TestSurgeDone(t *testing.T) {
	for _, tt := range []struct {
		elsewhere, before int32
		want              bool
	}{{3, 4, false}, {4, 4, true}, {5, 4, true}, {0, 0, true}} {
		if got := SurgeDone(tt.elsewhere, tt.before); got != tt.want {
			t.Errorf("SurgeDone(%d, %d) = %v", tt.elsewhere, tt.before, got)
		}
	}
}

func TestHandoffDue(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const active = time.Minute
	for _, tt := range []struct {
		name   string
		others []time.Time
		want   time.Time
	}{
		{"alone", nil, t0.Add(active)},
		{"claimed before it: no wait", []time.Time{t0.Add(-30 * time.Second)}, t0.Add(active)},
		{"burst: waits for the last claim", []time.Time{t0.Add(5 * time.Second), t0.Add(20 * time.Second), t0.Add(12 * time.Second)}, t0.Add(20*time.Second + active)},
		{"at most one more activeDuration", []time.Time{t0.Add(active), t0.Add(active + time.Second)}, t0.Add(2 * active)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := HandoffDue(t0, active, tt.others); !got.Equal(tt.want) {
				t.Errorf("HandoffDue = %s, want %s", got, tt.want)
			}
		})
	}
}

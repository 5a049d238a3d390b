package localcluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestPodWorkload(t *testing.T) {
	owned := func(kind, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "x-abcde", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{
				{Kind: "Other", Name: "not-the-controller"},
				{Kind: kind, Name: name, Controller: ptr.To(true)},
			}}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a Deployment's Pod: named by the Deployment, not the template hash",
			owned("ReplicaSet", "web-7d9f8b6c4", map[string]string{"pod-template-hash": "7d9f8b6c4"}), "shop/ReplicaSet/web"},
		{"a ReplicaSet of its own (no hash label)", owned("ReplicaSet", "web-7d9f8b6c4", nil), "shop/ReplicaSet/web-7d9f8b6c4"},
		{"a StatefulSet's Pod", owned("StatefulSet", "db", nil), "shop/StatefulSet/db"},
		{"a Job's Pod", owned("Job", "batch", nil), "shop/Job/batch"},
		{"a bare Pod is itself", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "seat-1",
			OwnerReferences: []metav1.OwnerReference{{Kind: "Node", Name: "n"}}}}, "shop/Pod/seat-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := podWorkload(c.pod); got != c.want {
				t.Errorf("podWorkload = %q, want %q", got, c.want)
			}
		})
	}
}

// Two runs whose Pods and Nodes got different names draw the same keys in the same order; a
// retried object keeps its key until done; keys count per workload and per NodePool.
func TestDrawKeysAreCommonAcrossRuns(t *testing.T) {
	pod := func(uid, name, hash string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "shop", Name: name,
			Labels:          map[string]string{"pod-template-hash": hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-" + hash, Controller: ptr.To(true)}}}}
	}
	node := func(uid, name, pool string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name}}
		if pool != "" {
			n.Labels = map[string]string{karpenterNodePoolLabel: pool}
		}
		return n
	}
	keys := func(names []string, hash string) []string {
		var k drawKeys
		var out []string
		for i, name := range names {
			p := pod(name, name, hash)
			out = append(out, k.podKey(p))
			if i == 0 {
				// A failed patch: the retry draws the same.
				if again := k.podKey(p); again != out[0] {
					t.Errorf("retried Pod drew %q, then %q", out[0], again)
				}
			}
			k.done(p.UID)
		}
		return out
	}
	a := keys([]string{"web-7d9f8b6c4-aaaaa", "web-7d9f8b6c4-bbbbb", "web-7d9f8b6c4-ccccc"}, "7d9f8b6c4")
	b := keys([]string{"web-55f6d7c8b-zzzzz", "web-55f6d7c8b-yyyyy", "web-55f6d7c8b-xxxxx"}, "55f6d7c8b")
	want := []string{"shop/ReplicaSet/web#1", "shop/ReplicaSet/web#2", "shop/ReplicaSet/web#3"}
	for i := range want {
		if a[i] != want[i] || b[i] != want[i] {
			t.Errorf("draw %d: run A %q, run B %q, want %q in both", i, a[i], b[i], want[i])
		}
	}

	var k drawKeys
	for _, c := range []struct {
		node *corev1.Node
		want string
	}{
		{node("u1", "default-x7k2p", "default"), "nodepool/default#1"},
		{node("u2", "lifeboat-0", ""), "lifeboat-0"},
		{node("u3", "gpu-q9w8e", "gpu"), "nodepool/gpu#1"},
		{node("u4", "default-m3n4b", "default"), "nodepool/default#2"},
	} {
		if got := k.nodeKey(c.node); got != c.want {
			t.Errorf("node %s drew %q, want %q", c.node.Name, got, c.want)
		}
		k.done(c.node.UID)
	}
	if len(k.pending) != 0 {
		t.Errorf("keys of done objects are still held: %v", k.pending)
	}
}

// Two runs whose ramps created different numbers of Nodes and Pods draw alike from the draw
// epoch (t0) on: the first replacement after t0 is #1 of its sequence in both; an object
// created before t0 but annotated after it stays in the ramp's sequence.
func TestDrawOrderRestartsAtEpoch(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	run := func(ramp int) []string {
		var epoch atomic.Pointer[time.Time]
		nodes, pods := drawKeys{epoch: &epoch}, drawKeys{epoch: &epoch}
		node := func(i int, created time.Time) string {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("n%d", i)), Name: fmt.Sprintf("default-%d", i),
				Labels: map[string]string{karpenterNodePoolLabel: "default"}, CreationTimestamp: metav1.NewTime(created)}}
			defer nodes.done(n.UID)
			return nodes.nodeKey(n)
		}
		pod := func(i int, created time.Time) string {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("p%d", i)), Namespace: "jobs", Name: fmt.Sprintf("workers-%d", i),
				OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "workers", Controller: ptr.To(true)}}, CreationTimestamp: metav1.NewTime(created)}}
			defer pods.done(p.UID)
			return pods.podKey(p)
		}
		for i := range ramp {
			node(i, t0.Add(-time.Minute))
			pod(i, t0.Add(-time.Minute))
		}
		epoch.Store(&t0)
		late := node(ramp, t0.Add(-time.Second)) // created before t0, booted after
		return []string{late, node(ramp+1, t0), node(ramp+2, t0.Add(time.Second)), pod(ramp, t0.Add(30*time.Second)), pod(ramp+1, t0.Add(31*time.Second))}
	}
	a, b := run(160), run(200)
	want := []string{"", "nodepool/default@t0#1", "nodepool/default@t0#2", "jobs/StatefulSet/workers@t0#1", "jobs/StatefulSet/workers@t0#2"}
	if a[0] != "nodepool/default#161" || b[0] != "nodepool/default#201" {
		t.Errorf("a Node created before t0 drew %q and %q, want the ramp's #161 and #201", a[0], b[0])
	}
	for i := 1; i < len(want); i++ {
		if a[i] != want[i] || b[i] != want[i] {
			t.Errorf("draw %d after t0: run A %q, run B %q, want %q in both", i, a[i], b[i], want[i])
		}
	}
	// No epoch (a cluster outside a simulation): one sequence.
	var k drawKeys
	if got := k.inEpoch("nodepool/default", t0); got != "nodepool/default" {
		t.Errorf("without an epoch: %q", got)
	}
}

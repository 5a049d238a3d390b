package resumeplan

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

func milli(v string) int64 {
	q := resource.MustParse(v)
	return q.MilliValue()
}

func cpu(v string) sizing.Resources {
	return sizing.Resources{MilliCPU: milli(v), Memory: 1 << 30, Pods: 1}
}

// pn is a 16 GiB pool node of pool with the lifeboat taint; ds are DaemonSet requests already
// bound to it.
func pn(name, pool, cpus string, ds map[string]sizing.Resources) PoolNode {
	return PoolNode{
		Name: name, Pool: pool,
		Allocatable: sizing.Resources{MilliCPU: milli(cpus), Memory: 16 << 30, Pods: 110},
		Labels:      map[string]string{v1alpha1.LabelPool: pool, "kubernetes.io/os": "linux"},
		Taints:      []corev1.Taint{{Key: v1alpha1.TaintLifeboat, Value: pool, Effect: corev1.TaintEffectNoSchedule}},
		DaemonSets:  ds,
	}
}

func items(node string, cpus ...string) []sizing.Item {
	var out []sizing.Item
	for i, c := range cpus {
		out = append(out, sizing.Item{Name: fmt.Sprintf("app/%s-%d", node, i), Resources: cpu(c)})
	}
	return out
}

var tolerateAll = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}

// dsPod is a DaemonSet Pod on an interrupted node, pinned to it the way the DaemonSet
// controller pins its Pods (required node affinity on metadata.name).
func dsPod(ds, cpus string, tolerations []corev1.Toleration, selector map[string]string) DaemonSetPod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: ds + "-x", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds, APIVersion: "apps/v1"}}},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Tolerations:  tolerations,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot-a"}}}}},
			}}},
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpus), corev1.ResourceMemory: resource.MustParse("128Mi")}}}},
		},
	}
	out, ok := DaemonSetPodOf(p)
	if !ok {
		panic("not a DaemonSet Pod")
	}
	return out
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		demands    []Demand
		candidates []PoolNode
		// want maps interrupted node → resumed candidates (sorted), unplaced counts in
		// wantUnplaced.
		want         map[string][]string
		wantUnplaced map[string]int
	}{{
		name:       "a burst of equal nodes shares the candidates: one lifeboat each, none twice",
		demands:    []Demand{{Node: "spot-a", Items: items("a", "3")}, {Node: "spot-b", Items: items("b", "3")}, {Node: "spot-c", Items: items("c", "3")}},
		candidates: []PoolNode{pn("sb-1", "p", "4", nil), pn("sb-2", "p", "4", nil), pn("sb-3", "p", "4", nil)},
		want:       nil, // checked by the invariants below: three distinct single resumes
	}, {
		name:       "the largest demand is planned first and takes the largest node",
		demands:    []Demand{{Node: "spot-a", Items: items("a", "3")}, {Node: "spot-b", Items: items("b", "3", "3")}},
		candidates: []PoolNode{pn("sb-small", "p", "4", nil), pn("sb-big", "p", "8", nil)},
		want:       map[string][]string{"spot-a": {"sb-small"}, "spot-b": {"sb-big"}},
	}, {
		name:         "too few candidates: equal demands are served in name order, the rest is unplaced",
		demands:      []Demand{{Node: "spot-c", Items: items("c", "3")}, {Node: "spot-a", Items: items("a", "3")}, {Node: "spot-b", Items: items("b", "3")}},
		candidates:   []PoolNode{pn("sb-1", "p", "4", nil), pn("sb-2", "p", "4", nil)},
		want:         nil,
		wantUnplaced: map[string]int{"spot-c": 1},
	}, {
		name:       "a node already claimed for the interrupted node is used before any candidate",
		demands:    []Demand{{Node: "spot-a", Items: items("a", "3"), Claimed: []PoolNode{pn("sb-claimed", "p", "4", nil)}}},
		candidates: []PoolNode{pn("sb-1", "p", "8", nil)},
		want:       map[string][]string{"spot-a": nil},
	}, {
		name:       "a rebalance resumes only from its PreResume pools",
		demands:    []Demand{{Node: "spot-a", Items: items("a", "1"), Pools: map[string]bool{"pre": true}}},
		candidates: []PoolNode{pn("sb-other", "other", "8", nil), pn("sb-pre", "pre", "4", nil)},
		want:       map[string][]string{"spot-a": {"sb-pre"}},
	}, {
		name: "DaemonSet overhead: a tolerating DaemonSet's Pod takes room on the lifeboat",
		// 4 CPU − 1.5 CPU DaemonSet leaves 2.5: the 3-CPU Pod needs the 8-CPU node.
		demands:    []Demand{{Node: "spot-a", Items: items("a", "3"), DaemonSets: []DaemonSetPod{dsPod("agent", "1500m", tolerateAll, nil)}}},
		candidates: []PoolNode{pn("sb-4", "p", "4", nil), pn("sb-8", "p", "8", nil)},
		want:       map[string][]string{"spot-a": {"sb-8"}},
	}, {
		name: "DaemonSet overhead: Pods already bound to the standby node count, once per DaemonSet",
		// sb-4 already runs agent (1 CPU): 3 left, the 3-CPU Pod fits; the agent Pod of the
		// interrupted node is the same DaemonSet and is not counted again. sb-3 (3 CPU) with
		// another DaemonSet of 1 CPU bound has 2 left.
		demands: []Demand{{Node: "spot-a", Items: items("a", "3"), DaemonSets: []DaemonSetPod{dsPod("agent", "1", tolerateAll, nil)}}},
		candidates: []PoolNode{
			pn("sb-4", "p", "4", map[string]sizing.Resources{"kube-system/agent": cpu("1")}),
			pn("sb-3", "p", "3.5", map[string]sizing.Resources{"kube-system/other": cpu("1")}),
		},
		want: map[string][]string{"spot-a": {"sb-4"}},
	}, {
		name: "DaemonSet overhead: a DaemonSet that does not tolerate the lifeboat taint does not land",
		demands: []Demand{{Node: "spot-a", Items: items("a", "3"), DaemonSets: []DaemonSetPod{
			dsPod("spot-only", "2", []corev1.Toleration{{Key: "lifeboat.dev/spot", Operator: corev1.TolerationOpExists}}, nil),
		}}},
		candidates: []PoolNode{pn("sb-4", "p", "4", nil)},
		want:       map[string][]string{"spot-a": {"sb-4"}},
	}, {
		name: "DaemonSet overhead: a DaemonSet whose nodeSelector does not match the pool node does not land",
		demands: []Demand{{Node: "spot-a", Items: items("a", "3"), DaemonSets: []DaemonSetPod{
			dsPod("gpu", "2", tolerateAll, map[string]string{"nvidia.com/gpu": "true"}),
			dsPod("linux", "500m", tolerateAll, map[string]string{"kubernetes.io/os": "linux"}),
		}}},
		// 4 − 0.5 (linux lands, gpu does not) = 3.5 ≥ 3.
		candidates: []PoolNode{pn("sb-4", "p", "4", nil)},
		want:       map[string][]string{"spot-a": {"sb-4"}},
	}, {
		name: "DaemonSet overhead applies to nodes already claimed too",
		demands: []Demand{{Node: "spot-a", Items: items("a", "3"), DaemonSets: []DaemonSetPod{dsPod("agent", "1500m", tolerateAll, nil)},
			Claimed: []PoolNode{pn("sb-claimed", "p", "4", nil)}}},
		candidates: []PoolNode{pn("sb-8", "p", "8", nil)},
		want:       map[string][]string{"spot-a": {"sb-8"}},
	}, {
		name:       "nothing to place resumes nothing",
		demands:    []Demand{{Node: "spot-a"}},
		candidates: []PoolNode{pn("sb-1", "p", "4", nil)},
		want:       map[string][]string{"spot-a": nil},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := Plan(tt.demands, tt.candidates)
			// Invariants: a plan per Demand; no candidate resumed twice; only candidates.
			if len(plans) != len(tt.demands) {
				t.Fatalf("%d plans for %d demands", len(plans), len(tt.demands))
			}
			isCandidate := map[string]bool{}
			for _, c := range tt.candidates {
				isCandidate[c.Name] = true
			}
			used := map[string]string{}
			for node, p := range plans {
				for _, name := range p.Resume {
					if !isCandidate[name] {
						t.Errorf("%s resumes %s, not a candidate", node, name)
					}
					if other, dup := used[name]; dup {
						t.Errorf("%s resumed for %s and %s", name, other, node)
					}
					used[name] = node
				}
				if got, want := len(p.Unplaced), tt.wantUnplaced[node]; got != want {
					t.Errorf("%s: %d unplaced (%v), want %d", node, got, p.Unplaced, want)
				}
			}
			for node, want := range tt.want {
				got := append([]string(nil), plans[node].Resume...)
				sort.Strings(got)
				if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("%s resumes %v, want %v", node, got, want)
				}
			}
			// Deterministic, whatever the order of the inputs.
			rev := append([]Demand(nil), tt.demands...)
			slices.Reverse(rev)
			revC := append([]PoolNode(nil), tt.candidates...)
			slices.Reverse(revC)
			if again := Plan(rev, revC); !reflect.DeepEqual(again, plans) {
				t.Errorf("plans depend on the input order:\n%v\n%v", plans, again)
			}
		})
	}
}

// TestPlanBatchBurst: ten interrupted nodes, ten equal candidates: every node gets exactly one
// distinct lifeboat.
func TestPlanBurst(t *testing.T) {
	var demands []Demand
	var candidates []PoolNode
	for i := range 10 {
		demands = append(demands, Demand{Node: fmt.Sprintf("spot-%d", i), Items: items(fmt.Sprint(i), "3")})
		candidates = append(candidates, pn(fmt.Sprintf("sb-%d", i), "p", "4", nil))
	}
	plans := Plan(demands, candidates)
	used := map[string]bool{}
	for _, d := range demands {
		p := plans[d.Node]
		if len(p.Resume) != 1 || len(p.Unplaced) != 0 || used[p.Resume[0]] {
			t.Fatalf("%s: %+v (used %v)", d.Node, p, used)
		}
		used[p.Resume[0]] = true
	}
}

func TestFreeFor(t *testing.T) {
	node := pn("sb", "p", "4", map[string]sizing.Resources{"kube-system/proxy": cpu("250m")})
	node.Taints = append(node.Taints, corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoExecute}, corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule})
	tests := []struct {
		name string
		ds   []DaemonSetPod
		want int64 // millicores free
	}{
		{"no DaemonSets: allocatable minus what is bound", nil, 3750},
		{"a DaemonSet already bound is not counted twice", []DaemonSetPod{dsPod("proxy", "250m", tolerateAll, nil)}, 3750},
		{"two Pods of one DaemonSet count once", []DaemonSetPod{dsPod("agent", "1", tolerateAll, nil), dsPod("agent", "1", tolerateAll, nil)}, 2750},
		{"PreferNoSchedule needs no toleration, NoExecute does", []DaemonSetPod{dsPod("agent", "1", []corev1.Toleration{
			{Key: v1alpha1.TaintLifeboat, Operator: corev1.TolerationOpExists}}, nil)}, 3750},
		{"tolerating every NoSchedule/NoExecute taint lands", []DaemonSetPod{dsPod("agent", "1", []corev1.Toleration{
			{Key: v1alpha1.TaintLifeboat, Operator: corev1.TolerationOpExists}, {Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x"}}, nil)}, 2750},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := freeFor(Demand{Node: "spot-a", DaemonSets: tt.ds}, node); got.MilliCPU != tt.want {
				t.Errorf("free CPU = %dm, want %dm", got.MilliCPU, tt.want)
			}
		})
	}
}

func TestPoolNodeOf(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Labels: map[string]string{v1alpha1.LabelPool: "p"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintLifeboat, Value: "p", Effect: corev1.TaintEffectNoSchedule},
			{Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute},
		}},
		Status: corev1.NodeStatus{Allocatable: alloc},
	}
	ds := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "proxy-1", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "proxy"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	done := *ds.DeepCopy()
	done.Name, done.Status.Phase = "proxy-old", corev1.PodSucceeded
	got := PoolNodeOf(n, []corev1.Pod{ds, done})
	if len(got.Taints) != 1 || got.Taints[0].Key != v1alpha1.TaintLifeboat {
		t.Errorf("taints once active = %v, want the lifeboat taint only", got.Taints)
	}
	if r := got.DaemonSets["kube-system/proxy"]; r.MilliCPU != 100 || len(got.DaemonSets) != 1 {
		t.Errorf("DaemonSets = %v, want kube-system/proxy 100m (the terminated Pod left out)", got.DaemonSets)
	}
	if got.Pool != "p" || got.Allocatable.MilliCPU != 4000 {
		t.Errorf("pool node = %+v", got)
	}
}

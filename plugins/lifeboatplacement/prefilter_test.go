package lifeboatplacement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

var lifeboatTaint = v1.Taint{Key: v1alpha1.TaintLifeboat, Value: "pool-a", Effect: v1.TaintEffectNoSchedule}

// lifeboatNode is a pool node in a state with the lifeboat taint, 4 CPU, 16 Gi and 32 pods
// unless capacity says otherwise.
func lifeboatNode(name string, state v1alpha1.NodeState, capacity map[v1.ResourceName]string, taints ...v1.Taint) *v1.Node {
	if capacity == nil {
		capacity = map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourceMemory: "16Gi"}
	}
	return buildtest.Node(name, buildtest.Pool("pool-a", state), stPods, buildtest.Resources(capacity),
		buildtest.Taints(append([]v1.Taint{lifeboatTaint}, taints...)...))
}

// bigNode is an ordinary Spot node of 64 CPU and 256 Gi.
func bigNode(name string) *v1.Node {
	return buildtest.Node(name, buildtest.CapacityType(buildtest.Spot), buildtest.Capacity("64", "256Gi", "32"))
}

func protectedPod(name string) *st.PodWrapper {
	return st.MakePod().Name(name).Namespace("ns").UID(name).Label(v1alpha1.LabelProtected, "true").
		Req(map[v1.ResourceName]string{v1.ResourceCPU: "500m", v1.ResourceMemory: "1Gi"})
}

// runningOn is a Pod already bound to the node, using its resources.
func runningOn(node, name string, req map[v1.ResourceName]string) *v1.Pod {
	return st.MakePod().Name(name).Namespace("ns").UID(name).Node(node).Req(req).Obj()
}

func TestPreFilterNarrowing(t *testing.T) {
	gpu := v1.ResourceName("example.com/gpu")
	gpuTaint := v1.Taint{Key: "example.com/gpu", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		name  string
		pod   *v1.Pod
		nodes []*v1.Node
		pods  []*v1.Pod
		want  sets.Set[string] // nil = no narrowing
	}{
		{
			name:  "narrowed to the active lifeboat nodes that can take the pod",
			pod:   protectedPod("p").Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil), lifeboatNode("lb-2", v1alpha1.NodeStateActive, nil)},
			want:  sets.New("lb-1", "lb-2"),
		},
		{
			name: "pool nodes that are no target are left out",
			pod:  protectedPod("p").Obj(),
			nodes: []*v1.Node{
				bigNode("ordinary"),
				lifeboatNode("lb-active", v1alpha1.NodeStateActive, nil),
				lifeboatNode("lb-standby", v1alpha1.NodeStateStandby, nil, v1.Taint{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule}),
				lifeboatNode("lb-draining", v1alpha1.NodeStateDraining, nil),
				lifeboatNode("lb-disrupted", v1alpha1.NodeStateActive, nil, disrupted),
				lifeboatNode("lb-interrupted", v1alpha1.NodeStateActive, nil, interrupted),
				lifeboatNode("lb-still-standby-tainted", v1alpha1.NodeStateActive, nil, v1.Taint{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule}),
				func() *v1.Node {
					n := lifeboatNode("lb-cordoned", v1alpha1.NodeStateActive, nil)
					n.Spec.Unschedulable = true
					return n
				}(),
			},
			want: sets.New("lb-active"),
		},
		{
			name: "full lifeboat nodes (CPU, memory, pod count) are left out",
			pod:  protectedPod("p").Obj(),
			nodes: []*v1.Node{
				bigNode("ordinary"),
				lifeboatNode("lb-cpu-full", v1alpha1.NodeStateActive, nil),
				lifeboatNode("lb-memory-full", v1alpha1.NodeStateActive, nil),
				lifeboatNode("lb-pods-full", v1alpha1.NodeStateActive, map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourceMemory: "16Gi", v1.ResourcePods: "1"}),
				lifeboatNode("lb-room", v1alpha1.NodeStateActive, nil),
			},
			pods: []*v1.Pod{
				runningOn("lb-cpu-full", "cpu-hog", map[v1.ResourceName]string{v1.ResourceCPU: "3800m"}),
				runningOn("lb-memory-full", "memory-hog", map[v1.ResourceName]string{v1.ResourceMemory: "15.5Gi"}),
				runningOn("lb-pods-full", "tiny", map[v1.ResourceName]string{v1.ResourceCPU: "10m"}),
				runningOn("lb-room", "half", map[v1.ResourceName]string{v1.ResourceCPU: "2", v1.ResourceMemory: "8Gi"}),
			},
			want: sets.New("lb-room"),
		},
		{
			name:  "no narrowing when every active lifeboat node is full",
			pod:   protectedPod("p").Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
			pods:  []*v1.Pod{runningOn("lb-1", "hog", map[v1.ResourceName]string{v1.ResourceCPU: "4"})},
		},
		{
			name:  "no narrowing when the pod is larger than any lifeboat node",
			pod:   protectedPod("p").Req(map[v1.ResourceName]string{v1.ResourceCPU: "8"}).Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name:  "no narrowing when the pod's required affinity excludes lifeboat nodes (critical tier: on-demand only)",
			pod:   protectedPod("p").NodeAffinityIn(v1alpha1.LabelCapacityType, []string{"on-demand"}, st.NodeSelectorTypeMatchExpressions).Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name:  "no narrowing when the pod's nodeSelector excludes lifeboat nodes",
			pod:   protectedPod("p").NodeSelector(map[string]string{"example.com/team": "a"}).Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name: "best-effort tier: required Spot or a pool node matches lifeboat nodes",
			pod: func() *v1.Pod {
				p := protectedPod("p").Obj()
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
					NodeSelectorTerms: []v1.NodeSelectorTerm{
						{MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1alpha1.LabelCapacityType, Operator: v1.NodeSelectorOpIn, Values: []string{"spot"}}}},
						{MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1alpha1.LabelPool, Operator: v1.NodeSelectorOpExists}}},
					},
				}}}
				return p
			}(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
			want:  sets.New("lb-1"),
		},
		{
			name:  "an untolerated taint other than the lifeboat taint leaves the node out",
			pod:   protectedPod("p").Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-gpu", v1alpha1.NodeStateActive, nil, gpuTaint), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
			want:  sets.New("lb-1"),
		},
		{
			name:  "a tolerated taint does not",
			pod:   protectedPod("p").Toleration(gpuTaint.Key).Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-gpu", v1alpha1.NodeStateActive, nil, gpuTaint)},
			want:  sets.New("lb-gpu"),
		},
		{
			name: "extended resources count",
			pod:  protectedPod("p").Req(map[v1.ResourceName]string{gpu: "1"}).Obj(),
			nodes: []*v1.Node{
				bigNode("ordinary"),
				lifeboatNode("lb-no-gpu", v1alpha1.NodeStateActive, nil),
				lifeboatNode("lb-gpu", v1alpha1.NodeStateActive, map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourceMemory: "16Gi", gpu: "1"}),
			},
			want: sets.New("lb-gpu"),
		},
		{
			name:  "unprotected pods are never narrowed",
			pod:   st.MakePod().Name("u").Namespace("ns").UID("u").Req(map[v1.ResourceName]string{v1.ResourceCPU: "500m"}).Obj(),
			nodes: []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name: "no narrowing without an active lifeboat node",
			pod:  protectedPod("p").Obj(),
			nodes: []*v1.Node{
				bigNode("ordinary"),
				lifeboatNode("lb-standby", v1alpha1.NodeStateStandby, nil, v1.Taint{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule}),
				lifeboatNode("lb-draining", v1alpha1.NodeStateDraining, nil),
			},
		},
		{
			name:  "no narrowing without pool nodes",
			pod:   protectedPod("p").Obj(),
			nodes: []*v1.Node{bigNode("ordinary-1"), bigNode("ordinary-2")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkPreFilter(t, tt.pod, tt.nodes, tt.pods, tt.want)
		})
	}
}

// checkPreFilter runs PreFilter for pod with nodes and pods (bound) and checks that it narrowed
// the cycle to want (nil: not at all, and the cycle is not marked as narrowed), and that the
// nodes it narrowed to pass the plugin's Filter. It returns the cycle's state.
func checkPreFilter(t *testing.T, pod *v1.Pod, nodes []*v1.Node, pods []*v1.Pod, want sets.Set[string]) fwk.CycleState {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	f := newTestFramework(t, nil, nodes, pods)
	state := framework.NewCycleState()
	res, s, _ := f.fwk.RunPreFilterPlugins(ctx, state, pod)
	if !s.IsSuccess() {
		t.Fatalf("PreFilter = %v, want success", s)
	}
	if want == nil {
		if !res.AllNodes() {
			t.Fatalf("PreFilter narrowed to %v, want all nodes", sets.List(res.NodeNames))
		}
		if _, err := state.Read(narrowedStateKey); err == nil {
			t.Error("cycle marked as narrowed without narrowing")
		}
		return state
	}
	if res.AllNodes() {
		t.Fatalf("PreFilter = all nodes, want %v", sets.List(want))
	}
	if diff := cmp.Diff(sets.List(want), sets.List(res.NodeNames)); diff != "" {
		t.Errorf("PreFilter nodes (-want +got):\n%s", diff)
	}
	for name := range res.NodeNames {
		ni, err := f.plugin.handle.SnapshotSharedLister().NodeInfos().Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if s := f.fwk.RunFilterPlugins(ctx, state, pod, ni); !s.IsSuccess() {
			t.Errorf("narrowed to %s, which the Filter rejects: %v", name, s)
		}
	}
	return state
}

// TestPostFilterFallback: a narrowed cycle that finds no feasible node requeues the Pod for one
// cycle on all nodes and keeps preemption from running; cycles that did not narrow are left to
// the other PostFilter plugins.
func TestPostFilterFallback(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newTestFramework(t, nil, []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)}, nil)
	pod := protectedPod("p").Obj()
	nodeToStatus := framework.NewDefaultNodeToStatus()

	narrowed := func() (*fwk.PreFilterResult, fwk.CycleState) {
		state := framework.NewCycleState()
		res, s, _ := f.fwk.RunPreFilterPlugins(ctx, state, pod)
		if !s.IsSuccess() {
			t.Fatal(s)
		}
		return res, state
	}

	res, state := narrowed()
	if res.AllNodes() {
		t.Fatal("first cycle not narrowed")
	}
	// Say a filter PreFilter does not mirror (host port, anti-affinity) rejected lb-1.
	_, s := f.fwk.RunPostFilterPlugins(ctx, state, pod, nodeToStatus)
	if s.Code() != fwk.UnschedulableAndUnresolvable || s.Plugin() != Name {
		t.Fatalf("PostFilter after a narrowed cycle = %v from %q, want UnschedulableAndUnresolvable from %s (no preemption)", s.Code(), s.Plugin(), Name)
	}
	if diff := cmp.Diff([]string{"ns/p"}, f.activated); diff != "" {
		t.Errorf("activated pods (-want +got):\n%s", diff)
	}

	res, state = narrowed()
	if !res.AllNodes() {
		t.Fatalf("retry narrowed to %v, want all nodes", sets.List(res.NodeNames))
	}
	_, s = f.fwk.RunPostFilterPlugins(ctx, state, pod, nodeToStatus)
	if s.Code() != fwk.Unschedulable {
		t.Errorf("PostFilter after a cycle on all nodes = %v, want Unschedulable (preemption may run)", s)
	}
	if len(f.activated) != 1 {
		t.Errorf("activated again: %v", f.activated)
	}

	// The retry consumed the mark: later cycles narrow again.
	if res, _ := narrowed(); res.AllNodes() {
		t.Error("cycle after the retry not narrowed")
	}
}

func TestWidenMarksExpire(t *testing.T) {
	p := newPlugin(t, nil)
	p.setWidenMark("deleted-before-its-retry")
	p.widen["deleted-before-its-retry"] = time.Now().Add(-2 * widenAfter)
	p.setWidenMark("fresh")
	if _, ok := p.widen["deleted-before-its-retry"]; ok {
		t.Error("stale mark kept")
	}
	if !p.takeWidenMark("fresh") || p.takeWidenMark("fresh") {
		t.Error("a mark must be taken exactly once")
	}
}

// TestPoolNodeIndexFollowsNodes: the index learns pool nodes from the shared Node informer —
// added, relabelled, deleted — so PreFilter never walks the whole snapshot.
func TestPoolNodeIndexFollowsNodes(t *testing.T) {
	f := newTestFramework(t, nil, []*v1.Node{bigNode("ordinary"), lifeboatNode("lb-1", v1alpha1.NodeStateStandby, nil)}, nil)
	nodes := f.client.CoreV1().Nodes()
	ctx := context.Background()
	waitIndex := func(want ...string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = nil
			f.plugin.poolNodes.each(func(name string) { got = append(got, name) })
			return sets.New(got...).Equal(sets.New(want...)), nil
		})
		if err != nil {
			t.Fatalf("index = %v, want %v", got, want)
		}
	}
	waitIndex("lb-1")
	if _, err := nodes.Create(ctx, lifeboatNode("lb-2", v1alpha1.NodeStateActive, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIndex("lb-1", "lb-2")
	relabelled := bigNode("ordinary")
	relabelled.Labels[v1alpha1.LabelPool] = "pool-a"
	if _, err := nodes.Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIndex("lb-1", "lb-2", "ordinary")
	if err := nodes.Delete(ctx, "lb-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(relabelled.Labels, v1alpha1.LabelPool)
	if _, err := nodes.Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIndex("lb-2")
}

// BenchmarkPreFilter measures PreFilter for a protected Pod in the scheduler benchmark's
// cluster shape: 1000 nodes, 100 of them active lifeboat nodes, each already holding 20 Pods.
func BenchmarkPreFilter(b *testing.B) {
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range 1000 {
		name := fmt.Sprintf("node-%04d", i)
		if i >= 100 {
			nodes = append(nodes, bigNode(name))
			continue
		}
		nodes = append(nodes, lifeboatNode(name, v1alpha1.NodeStateActive, map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourceMemory: "32Gi", v1.ResourcePods: "110"}))
		for j := range 20 {
			pods = append(pods, runningOn(name, fmt.Sprintf("%s-%d", name, j), map[v1.ResourceName]string{v1.ResourceCPU: "100m", v1.ResourceMemory: "500Mi"}))
		}
	}
	f := newTestFramework(b, nil, nodes, pods)
	ctx := klog.NewContext(context.Background(), logr.Discard()) // measure the work, not test logging
	pod := protectedPod("p").Obj()
	b.ReportAllocs()
	for b.Loop() {
		res, s := f.plugin.PreFilter(ctx, framework.NewCycleState(), pod, nil)
		if !s.IsSuccess() || res.AllNodes() || len(res.NodeNames) != 100 {
			b.Fatalf("PreFilter = %v, %v", res, s)
		}
	}
}

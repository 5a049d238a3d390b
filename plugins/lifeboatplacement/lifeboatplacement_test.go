package lifeboatplacement

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
)

var (
	disrupted   = v1.Taint{Key: v1alpha1.TaintKarpenterDisrupted, Effect: v1.TaintEffectNoSchedule}
	interrupted = v1.Taint{Key: v1alpha1.TaintInterrupted, Effect: v1.TaintEffectNoSchedule}
)

// stPods is the 32 pods of capacity the scheduler's test wrappers (st.MakeNode) give a node.
var stPods = buildtest.Capacity("", "", "32")

// poolNode is a node of pool-a in state, with taints.
func poolNode(name string, state v1alpha1.NodeState, taints ...v1.Taint) *v1.Node {
	return buildtest.Node(name, buildtest.Pool("pool-a", state), stPods, buildtest.Taints(taints...))
}

func ordinaryNode(name string, taints ...v1.Taint) *v1.Node {
	return buildtest.Node(name, stPods, buildtest.Taints(taints...))
}

var (
	protected   = st.MakePod().Name("p").Namespace("ns").Label(v1alpha1.LabelProtected, "true").Obj()
	unprotected = st.MakePod().Name("u").Namespace("ns").Obj()
)

func newPlugin(t testing.TB, args runtime.Object) *LifeboatPlacement {
	t.Helper()
	return newTestFramework(t, args, nil, nil).plugin
}

// testFramework is a framework built by the scheduler's test utilities around the plugin:
// a snapshot of the nodes and pods, the shared informer factory of a fake clientset holding
// the nodes (the plugin's pool node index), and a recording PodActivator.
type testFramework struct {
	fwk       framework.Framework
	plugin    *LifeboatPlacement
	client    *fake.Clientset
	activated []string
}

func (f *testFramework) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	for key := range pods {
		f.activated = append(f.activated, key)
	}
}

// testWeight is the plugin's score weight in test frameworks.
const testWeight = 20

func newTestFramework(t testing.TB, args runtime.Object, nodes []*v1.Node, pods []*v1.Pod) *testFramework {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	tfw := &testFramework{}
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	tfw.client = fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(tfw.client, 0)
	capture := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, args, h)
		if err == nil {
			tfw.plugin = p.(*LifeboatPlacement)
		}
		return p, err
	}
	fh, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensionsWithWeight(Name, testWeight, capture, "PreFilter", "Filter", "PostFilter", "PreScore", "Score"),
	}, "lifeboat-scheduler",
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithPodActivator(tfw),
	)
	if err != nil {
		t.Fatalf("NewFramework: %v", err)
	}
	tfw.fwk = fh
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	if !toolscache.WaitForCacheSync(stop, tfw.plugin.nodeIndexesSynced) {
		t.Fatal("node indexes never synced")
	}
	return tfw
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name       string
		pod        *v1.Pod
		node       *v1.Node
		args       runtime.Object
		wantReason string // "" = passes
	}{
		{name: "ordinary node", pod: unprotected, node: ordinaryNode("n")},
		{name: "active pool node", pod: protected, node: poolNode("n", v1alpha1.NodeStateActive)},
		{name: "draining pool node is no target after handoff starts", pod: protected, node: poolNode("n", v1alpha1.NodeStateDraining), wantReason: ErrReasonPoolNodeNotActive},
		{name: "standby pool node", pod: protected, node: poolNode("n", v1alpha1.NodeStateStandby), wantReason: ErrReasonPoolNodeNotActive},
		{name: "warming pool node", pod: protected, node: poolNode("n", v1alpha1.NodeStateWarming), wantReason: ErrReasonPoolNodeNotActive},
		{name: "pool node without state", pod: protected, node: st.MakeNode().Name("n").Label(v1alpha1.LabelPool, "a").Obj(), wantReason: ErrReasonPoolNodeNotActive},
		{name: "Karpenter is disrupting the node", pod: unprotected, node: ordinaryNode("n", disrupted), wantReason: ErrReasonInterrupted},
		{name: "Lifeboat marked the node interrupted", pod: protected, node: ordinaryNode("n", interrupted), wantReason: ErrReasonInterrupted},
		{
			name: "an interruption taint counts whatever its effect", pod: protected,
			node: ordinaryNode("n", v1.Taint{Key: v1alpha1.TaintInterrupted, Effect: v1.TaintEffectPreferNoSchedule}), wantReason: ErrReasonInterrupted,
		},
		{name: "active pool node under interruption", pod: protected, node: poolNode("n", v1alpha1.NodeStateActive, disrupted), wantReason: ErrReasonInterrupted},
		{
			name: "custom interruption taints", pod: protected, node: ordinaryNode("n", v1.Taint{Key: "example.com/reclaim", Effect: v1.TaintEffectNoSchedule}),
			args: &config.LifeboatPlacementArgs{InterruptionTaintKeys: []string{"example.com/reclaim"}}, wantReason: ErrReasonInterrupted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			p := newPlugin(t, tt.args)
			ni := framework.NewNodeInfo()
			ni.SetNode(tt.node)
			got := p.Filter(ctx, nil, tt.pod, ni)
			if tt.wantReason == "" {
				if !got.IsSuccess() {
					t.Fatalf("Filter = %v, want success", got)
				}
				return
			}
			if got.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(strings.Join(got.Reasons(), ";"), tt.wantReason) {
				t.Fatalf("Filter = %v %v, want UnschedulableAndUnresolvable %q", got.Code(), got.Reasons(), tt.wantReason)
			}
		})
	}
}

func TestScore(t *testing.T) {
	nodes := []*v1.Node{ordinaryNode("ordinary"), poolNode("active", v1alpha1.NodeStateActive)}
	tests := []struct {
		name     string
		pod      *v1.Pod
		wantSkip bool
		want     map[string]int64
	}{
		{name: "protected pods prefer active lifeboat nodes", pod: protected, want: map[string]int64{"ordinary": 0, "active": fwk.MaxNodeScore}},
		{name: "unprotected pods are not scored", pod: unprotected, wantSkip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			p := newPlugin(t, nil)
			state := framework.NewCycleState()
			infos := tf.BuildNodeInfos(nodes)
			s := p.PreScore(ctx, state, tt.pod, infos)
			if tt.wantSkip {
				if !s.IsSkip() {
					t.Fatalf("PreScore = %v, want Skip", s)
				}
				return
			}
			for _, ni := range infos {
				got, s := p.Score(ctx, state, tt.pod, ni)
				if !s.IsSuccess() {
					t.Fatal(s)
				}
				if got != tt.want[ni.Node().Name] {
					t.Errorf("Score(%s) = %d, want %d", ni.Node().Name, got, tt.want[ni.Node().Name])
				}
			}
		})
	}
}

// TestScoreInFramework runs the plugin inside a framework built by the test utilities:
// filters drop the draining node and the weighted score puts the active lifeboat node first.
func TestScoreInFramework(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := []*v1.Node{ordinaryNode("ordinary"), poolNode("active", v1alpha1.NodeStateActive), poolNode("draining", v1alpha1.NodeStateDraining)}
	fh := newTestFramework(t, nil, nodes, nil).fwk
	state := framework.NewCycleState()
	infos := tf.BuildNodeInfos(nodes)
	var feasible []fwk.NodeInfo
	for _, ni := range infos {
		if fh.RunFilterPlugins(ctx, state, protected, ni).IsSuccess() {
			feasible = append(feasible, ni)
		}
	}
	if len(feasible) != 2 {
		t.Fatalf("feasible nodes = %d, want 2 (the draining node filtered)", len(feasible))
	}
	if s := fh.RunPreScorePlugins(ctx, state, protected, feasible); !s.IsSuccess() {
		t.Fatal(s)
	}
	scores, s := fh.RunScorePlugins(ctx, state, protected, feasible)
	if !s.IsSuccess() {
		t.Fatal(s)
	}
	got := map[string]int64{}
	for _, sc := range scores {
		got[sc.Name] = sc.TotalScore
	}
	if got["active"] != testWeight*fwk.MaxNodeScore || got["ordinary"] != 0 {
		t.Errorf("total scores = %v, want active=%d ordinary=0", got, testWeight*fwk.MaxNodeScore)
	}
}

func TestQueueingHints(t *testing.T) {
	tests := []struct {
		name     string
		old, new *v1.Node
		want     fwk.QueueingHint
	}{
		{name: "pool node turns active", old: poolNode("n", v1alpha1.NodeStateStandby), new: poolNode("n", v1alpha1.NodeStateActive), want: fwk.Queue},
		{name: "pool node starts draining", old: poolNode("n", v1alpha1.NodeStateActive), new: poolNode("n", v1alpha1.NodeStateDraining), want: fwk.QueueSkip},
		{name: "disruption taint removed", old: ordinaryNode("n", disrupted), new: ordinaryNode("n"), want: fwk.Queue},
		{name: "new ordinary node", new: ordinaryNode("n"), want: fwk.Queue},
		{name: "new standby node", new: poolNode("n", v1alpha1.NodeStateStandby), want: fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			p := newPlugin(t, nil)
			var old interface{}
			if tt.old != nil {
				old = tt.old
			}
			got, err := p.isSchedulableAfterNodeChange(logger, protected, old, tt.new)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("hint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewNeedsAHandle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	if _, err := New(ctx, nil, nil); err == nil || !strings.Contains(err.Error(), "handle") {
		t.Errorf("New without a handle: error = %v, want one about the handle", err)
	}
}

func TestNewRejectsInvalidArgs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, args := range []*config.LifeboatPlacementArgs{{}, {InterruptionTaintKeys: []string{"-bad-"}}} {
		if _, err := New(ctx, args, nil); err == nil || !strings.Contains(err.Error(), "interruptionTaintKeys") {
			t.Errorf("New(%v) error = %v, want one naming interruptionTaintKeys", args.InterruptionTaintKeys, err)
		}
	}
}

func TestMain(m *testing.M) {
	metrics.Register() // the framework records plugin metrics
	m.Run()
}

package lifeboattaints

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
)

var (
	lifeboatTaint = v1.Taint{Key: v1alpha1.TaintLifeboat, Value: "pool-a", Effect: v1.TaintEffectNoSchedule}
	standbyTaint  = v1.Taint{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule}
	spotTaint     = v1.Taint{Key: v1alpha1.TaintSpot, Value: "true", Effect: v1.TaintEffectNoSchedule}
	gpuTaint      = v1.Taint{Key: "gpu", Value: "true", Effect: v1.TaintEffectNoExecute}
	preferTaint   = v1.Taint{Key: "dedicated", Value: "batch", Effect: v1.TaintEffectPreferNoSchedule}

	tolerateAll  = v1.Toleration{Operator: v1.TolerationOpExists}
	tolerateSpot = v1.Toleration{Key: v1alpha1.TaintSpot, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}
	tolerateLB   = v1.Toleration{Key: v1alpha1.TaintLifeboat, Operator: v1.TolerationOpExists}
)

func protectedPod(tolerations ...v1.Toleration) *v1.Pod {
	return buildtest.Pod("ns", "p", buildtest.Protected(""), buildtest.Tolerations(tolerations...))
}

// seatedPod is a protected Pod whose seat kept room on host-1 (the webhook's label).
func seatedPod(tolerations ...v1.Toleration) *v1.Pod {
	p := protectedPod(tolerations...)
	p.Labels[v1alpha1.LabelSeatHost] = "host-1"
	return p
}

func plainPod(tolerations ...v1.Toleration) *v1.Pod {
	return buildtest.Pod("ns", "p", buildtest.Tolerations(tolerations...))
}

// node is a node with just the taints, which is all the plugin reads.
func node(name string, taints ...v1.Taint) *v1.Node {
	return buildtest.Node(name, buildtest.Taints(taints...))
}

func newPlugin(t *testing.T, args runtime.Object, nodes []*v1.Node) *LifeboatTaints {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil, frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(nil, nodes)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, args, fh)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p.(*LifeboatTaints)
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name       string
		pod        *v1.Pod
		node       *v1.Node
		args       runtime.Object
		wantCode   fwk.Code
		wantReason string
	}{
		{name: "untainted node admits anyone", pod: plainPod(), node: node("n")},
		{name: "protected pod passes the lifeboat taint", pod: protectedPod(), node: node("n", lifeboatTaint)},
		{
			// The replacement of a Pod that moved to its seat: ordinary capacity only, like the
			// default scheduler would place it.
			name: "protected pod with a seat does not pass the lifeboat taint", pod: seatedPod(), node: node("n", lifeboatTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{name: "protected pod with a seat passes what it tolerates", pod: seatedPod(tolerateSpot), node: node("n", spotTaint)},
		{
			name: "unprotected pod never passes the lifeboat taint", pod: plainPod(), node: node("n", lifeboatTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{
			name: "unprotected pod that tolerates the lifeboat taint still may not pass", pod: plainPod(tolerateLB), node: node("n", lifeboatTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{
			name: "a wildcard toleration does not open pool nodes", pod: plainPod(tolerateAll), node: node("n", lifeboatTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{
			name: "protected pod may not pass the standby taint", pod: protectedPod(), node: node("n", lifeboatTaint, standbyTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{
			name: "protected pod with a wildcard toleration may not pass the standby taint", pod: protectedPod(tolerateAll), node: node("n", standbyTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
		{
			name: "other taints work as in TaintToleration: untolerated", pod: protectedPod(), node: node("n", lifeboatTaint, spotTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonUntolerated,
		},
		{name: "other taints work as in TaintToleration: tolerated", pod: protectedPod(tolerateSpot), node: node("n", lifeboatTaint, spotTaint)},
		{
			name: "NoExecute taints count", pod: plainPod(tolerateSpot), node: node("n", spotTaint, gpuTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonUntolerated,
		},
		{name: "a wildcard toleration passes ordinary taints", pod: plainPod(tolerateAll), node: node("n", spotTaint, gpuTaint)},
		{name: "PreferNoSchedule taints do not filter", pod: plainPod(), node: node("n", preferTaint)},
		{
			name: "custom args: no reserved taints, the lifeboat taint behaves like any taint",
			args: &config.LifeboatTaintsArgs{ProtectedPodTaintKeys: []string{v1alpha1.TaintLifeboat}},
			pod:  plainPod(tolerateLB), node: node("n", lifeboatTaint),
		},
		{
			name: "v1 args are defaulted",
			args: &configv1.LifeboatTaintsArgs{},
			pod:  plainPod(tolerateLB), node: node("n", lifeboatTaint),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: ErrReasonReserved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			p := newPlugin(t, tt.args, []*v1.Node{tt.node})
			nodeInfo := framework.NewNodeInfo()
			nodeInfo.SetNode(tt.node)
			got := p.Filter(ctx, nil, tt.pod, nodeInfo)
			if got.Code() != tt.wantCode {
				t.Fatalf("Filter code = %v (%v), want %v", got.Code(), got.Reasons(), tt.wantCode)
			}
			if tt.wantReason != "" && !strings.Contains(strings.Join(got.Reasons(), ";"), tt.wantReason) {
				t.Errorf("Filter reasons = %v, want %q", got.Reasons(), tt.wantReason)
			}
		})
	}
}

func TestScore(t *testing.T) {
	tests := []struct {
		name  string
		pod   *v1.Pod
		nodes []*v1.Node
		want  fwk.NodeScoreList
	}{
		{
			name:  "fewer untolerated PreferNoSchedule taints score higher",
			pod:   protectedPod(),
			nodes: []*v1.Node{node("a"), node("b", preferTaint), node("c", lifeboatTaint)},
			want:  fwk.NodeScoreList{{Name: "a", Score: fwk.MaxNodeScore}, {Name: "b", Score: 0}, {Name: "c", Score: fwk.MaxNodeScore}},
		},
		{
			name:  "a tolerated PreferNoSchedule taint costs nothing",
			pod:   plainPod(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "batch", Effect: v1.TaintEffectPreferNoSchedule}),
			nodes: []*v1.Node{node("a"), node("b", preferTaint)},
			want:  fwk.NodeScoreList{{Name: "a", Score: fwk.MaxNodeScore}, {Name: "b", Score: fwk.MaxNodeScore}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			p := newPlugin(t, nil, tt.nodes)
			state := framework.NewCycleState()
			nodeInfos := tf.BuildNodeInfos(tt.nodes)
			if s := p.PreScore(ctx, state, tt.pod, nodeInfos); !s.IsSuccess() {
				t.Fatalf("PreScore: %v", s)
			}
			var got fwk.NodeScoreList
			for _, ni := range nodeInfos {
				score, s := p.Score(ctx, state, tt.pod, ni)
				if !s.IsSuccess() {
					t.Fatalf("Score: %v", s)
				}
				got = append(got, fwk.NodeScore{Name: ni.Node().Name, Score: score})
			}
			if s := p.ScoreExtensions().NormalizeScore(ctx, state, tt.pod, got); !s.IsSuccess() {
				t.Fatalf("NormalizeScore: %v", s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueueingHints(t *testing.T) {
	standby := node("lb", lifeboatTaint, standbyTaint)
	active := node("lb", lifeboatTaint)
	tests := []struct {
		name     string
		pod      *v1.Pod
		old, new *v1.Node
		want     fwk.QueueingHint
	}{
		{name: "standby taint removed: protected pod requeued", pod: protectedPod(), old: standby, new: active, want: fwk.Queue},
		{name: "standby taint removed: unprotected pod stays", pod: plainPod(), old: standby, new: active, want: fwk.QueueSkip},
		{name: "new active pool node: protected pod requeued", pod: protectedPod(), new: active, want: fwk.Queue},
		{name: "new standby node: nobody requeued", pod: protectedPod(), new: standby, want: fwk.QueueSkip},
		{name: "taint added: nothing to retry", pod: protectedPod(), old: active, new: standby, want: fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			p := newPlugin(t, nil, nil)
			var old interface{}
			if tt.old != nil {
				old = tt.old
			}
			got, err := p.isSchedulableAfterNodeChange(logger, tt.pod, old, tt.new)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("hint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewRejectsInvalidArgs(t *testing.T) {
	tests := []struct {
		name      string
		args      runtime.Object
		wantField string
	}{
		{name: "bad key", args: &config.LifeboatTaintsArgs{ReservedTaintKeys: []string{"not a key"}}, wantField: "reservedTaintKeys[0]"},
		{name: "standby may not be passed", args: &config.LifeboatTaintsArgs{ProtectedPodTaintKeys: []string{v1alpha1.TaintStandby}}, wantField: "protectedPodTaintKeys[0]"},
		{name: "duplicate", args: &configv1.LifeboatTaintsArgs{ProtectedPodTaintKeys: []string{"a", "a"}}, wantField: "protectedPodTaintKeys[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			_, err := New(ctx, tt.args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("New error = %v, want one naming %s", err, tt.wantField)
			}
		})
	}
}

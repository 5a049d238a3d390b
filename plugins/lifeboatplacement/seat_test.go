package lifeboatplacement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// seatedPod is a protected Pod whose seat kept room on host (the webhook's label).
func seatedPod(name, host string) *st.PodWrapper {
	return protectedPod(name).Label(v1alpha1.LabelSeatHost, host)
}

// withHostname labels a node with a kubernetes.io/hostname that is not its name.
func withHostname(n *v1.Node, host string) *v1.Node {
	n.Labels[v1.LabelHostname] = host
	return n
}

func TestPreFilterSeat(t *testing.T) {
	cordoned := bigNode("seat-host")
	cordoned.Spec.Unschedulable = true
	gpuTaint := v1.Taint{Key: "example.com/gpu", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		name  string
		pod   *v1.Pod
		nodes []*v1.Node
		pods  []*v1.Pod
		want  sets.Set[string] // nil = no narrowing
	}{
		{
			// An active lifeboat with room does not matter: the Pod is leaving lifeboats.
			name:  "narrowed to the seat's node",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), bigNode("seat-host"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
			want:  sets.New("seat-host"),
		},
		{
			name:  "the seat's node found by its hostname label",
			pod:   seatedPod("p", "ip-10-0-1-5").Obj(),
			nodes: []*v1.Node{bigNode("empty"), withHostname(bigNode("i-0abc"), "ip-10-0-1-5")},
			want:  sets.New("i-0abc"),
		},
		{
			name:  "a node named like the host but labelled with another hostname is not it",
			pod:   seatedPod("p", "ip-10-0-1-5").Obj(),
			nodes: []*v1.Node{withHostname(bigNode("ip-10-0-1-5"), "other"), withHostname(bigNode("i-0abc"), "ip-10-0-1-5")},
			want:  sets.New("i-0abc"),
		},
		{
			// Someone took the room: evaluated on all nodes, and never narrowed to lifeboats.
			name:  "the seat's node is full",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), bigNode("seat-host"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
			pods:  []*v1.Pod{runningOn("seat-host", "hog", map[v1.ResourceName]string{v1.ResourceCPU: "64"})},
		},
		{
			name:  "the seat's node is gone",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name:  "the seat's node is cordoned",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), cordoned},
		},
		{
			name:  "the seat's node is interrupted",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), buildtest.Node("seat-host", buildtest.CapacityType(buildtest.Spot), buildtest.Capacity("64", "256Gi", "32"), buildtest.Taints(interrupted))},
		},
		{
			name:  "the seat's node has a taint the pod does not tolerate",
			pod:   seatedPod("p", "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), buildtest.Node("seat-host", buildtest.Capacity("64", "256Gi", "32"), buildtest.Taints(gpuTaint))},
		},
		{
			name:  "a tolerated taint does not matter",
			pod:   seatedPod("p", "seat-host").Toleration(gpuTaint.Key).Obj(),
			nodes: []*v1.Node{bigNode("empty"), buildtest.Node("seat-host", buildtest.Capacity("64", "256Gi", "32"), buildtest.Taints(gpuTaint))},
			want:  sets.New("seat-host"),
		},
		{
			name:  "the seat's node is a lifeboat",
			pod:   seatedPod("p", "lb-1").Obj(),
			nodes: []*v1.Node{bigNode("empty"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)},
		},
		{
			name:  "the pod's required affinity excludes the seat's node",
			pod:   seatedPod("p", "seat-host").NodeAffinityIn(v1alpha1.LabelCapacityType, []string{"on-demand"}, st.NodeSelectorTypeMatchExpressions).Obj(),
			nodes: []*v1.Node{bigNode("empty"), bigNode("seat-host")},
		},
		{
			name:  "a seat label without the protection is not a seat",
			pod:   st.MakePod().Name("u").Namespace("ns").UID("u").Label(v1alpha1.LabelSeatHost, "seat-host").Obj(),
			nodes: []*v1.Node{bigNode("empty"), bigNode("seat-host")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := checkPreFilter(t, tt.pod, tt.nodes, tt.pods, tt.want)
			if _, err := state.Read(reclaimWaitStateKey); err == nil {
				t.Error("a pod with a seat waits for a resuming lifeboat")
			}
		})
	}
}

// TestSeatFallbackAndScore: a cycle narrowed to the seat's node that finds it infeasible
// after all (a filter PreFilter does not mirror) retries once on all nodes, with the seat's
// reason and without preemption; a Pod with a seat gets no lifeboat score.
func TestSeatFallbackAndScore(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newTestFramework(t, nil, []*v1.Node{bigNode("empty"), bigNode("seat-host"), lifeboatNode("lb-1", v1alpha1.NodeStateActive, nil)}, nil)
	pod := seatedPod("p", "seat-host").Obj()
	state := framework.NewCycleState()
	if res, _, _ := f.fwk.RunPreFilterPlugins(ctx, state, pod); res.AllNodes() {
		t.Fatal("first cycle not narrowed to the seat's node")
	}
	_, s := f.fwk.RunPostFilterPlugins(ctx, state, pod, framework.NewDefaultNodeToStatus())
	if s.Code() != fwk.UnschedulableAndUnresolvable || s.Message() != ErrReasonSeatRetryAllNodes {
		t.Fatalf("PostFilter after a narrowed cycle = %v %q, want UnschedulableAndUnresolvable %q", s.Code(), s.Message(), ErrReasonSeatRetryAllNodes)
	}
	if diff := cmp.Diff([]string{"ns/p"}, f.activated); diff != "" {
		t.Errorf("activated pods (-want +got):\n%s", diff)
	}
	state = framework.NewCycleState()
	if res, _, _ := f.fwk.RunPreFilterPlugins(ctx, state, pod); !res.AllNodes() {
		t.Errorf("retry narrowed to %v, want all nodes", sets.List(res.NodeNames))
	}
	if s := f.plugin.PreScore(ctx, state, pod, nil); !s.IsSkip() {
		t.Errorf("PreScore for a pod with a seat = %v, want Skip (lifeboat nodes score nothing for it)", s)
	}
	if s := f.plugin.PreScore(ctx, state, protectedPod("q").Obj(), nil); !s.IsSuccess() {
		t.Errorf("PreScore for a protected pod = %v, want success", s)
	}
}

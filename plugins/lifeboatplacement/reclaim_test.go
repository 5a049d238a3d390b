package lifeboatplacement

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
)

var reclaimNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// spotNodeIn is an ordinary Spot node of the capacity pool c5.large in zone, 2 CPU.
func spotNodeIn(name, zone string, taints ...v1.Taint) *v1.Node {
	return buildtest.Node(name, buildtest.CapacityType(buildtest.Spot), buildtest.InstanceType("c5.large"), buildtest.Zone(zone),
		buildtest.Capacity("2", "4Gi", "32"), buildtest.Taints(taints...))
}

// resumingLifeboat is an active pool node asked to start `ago` before reclaimNow, still
// carrying the standby and not-ready taints; ready marks it seen Ready (taints gone).
func resumingLifeboat(name string, ago time.Duration, cpu string, ready bool) *v1.Node {
	var taints []v1.Taint
	if !ready {
		taints = []v1.Taint{
			{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule},
			{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule},
		}
	}
	n := lifeboatNode(name, v1alpha1.NodeStateActive, map[v1.ResourceName]string{v1.ResourceCPU: cpu, v1.ResourceMemory: "16Gi"}, taints...)
	n.Annotations = map[string]string{v1alpha1.AnnotationStartRequestedAt: reclaimNow.Add(-ago).Format(time.RFC3339Nano)}
	if ready {
		n.Annotations[v1alpha1.AnnotationResumedReadyAt] = reclaimNow.Format(time.RFC3339Nano)
	}
	return n
}

// TestReclaimedPoolWait: while a lifeboat that will take a protected Pod is resuming, the Pod
// is kept off the other nodes of a Spot pool being reclaimed (never off other pools), does not
// preempt, and is requeued when the wait ends.
func TestReclaimedPoolWait(t *testing.T) {
	noticed := spotNodeIn("spot-a1", "us-east-1a", interrupted)
	doomed := spotNodeIn("spot-a2", "us-east-1a")
	elsewhere := spotNodeIn("spot-b1", "us-east-1b")
	tests := []struct {
		name  string
		args  runtime.Object
		pod   *v1.Pod
		nodes []*v1.Node
		// wait is how long the Pod waits (0: it does not).
		wait time.Duration
	}{
		{name: "a lifeboat resumes for the pod", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, elsewhere, resumingLifeboat("lb-1", 5*time.Second, "4", false)}, wait: 55 * time.Second},
		{name: "the latest resuming lifeboat bounds the wait", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, elsewhere, resumingLifeboat("lb-1", 30*time.Second, "4", false), resumingLifeboat("lb-2", 10*time.Second, "4", false)}, wait: 50 * time.Second},
		{name: "the start request is older than the wait", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 61*time.Second, "4", false)}},
		{name: "the lifeboat is Ready already", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 5*time.Second, "100m", true)}},
		{name: "the resuming lifeboat is too small for the pod", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 5*time.Second, "100m", false)}},
		{name: "no pool is being reclaimed", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{doomed, elsewhere, resumingLifeboat("lb-1", 5*time.Second, "4", false)}},
		{name: "an On-Demand node's interruption taint marks no Spot pool", pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{st.MakeNode().Name("od").Label(v1alpha1.LabelCapacityType, "on-demand").
				Label(v1alpha1.LabelInstanceType, "c5.large").Label(v1alpha1.LabelZone, "us-east-1a").Taints([]v1.Taint{interrupted}).Obj(),
				doomed, resumingLifeboat("lb-1", 5*time.Second, "4", false)}},
		{name: "unprotected pods never wait", pod: st.MakePod().Name("u").Namespace("ns").UID("u").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 5*time.Second, "4", false)}},
		// A Pod with a seat whose node went is placed like an unprotected one: a lifeboat would
		// have to hand it off again.
		{name: "pods with a seat never wait", pod: protectedPod("p").Label(v1alpha1.LabelSeatHost, "gone").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 5*time.Second, "4", false)}},
		{name: "the wait is off", args: &configv1.LifeboatPlacementArgs{ReclaimedPoolWait: &metav1.Duration{}}, pod: protectedPod("p").Obj(),
			nodes: []*v1.Node{noticed, doomed, resumingLifeboat("lb-1", 5*time.Second, "4", false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newTestFramework(t, tt.args, tt.nodes, nil)
			f.plugin.clock = testingclock.NewFakePassiveClock(reclaimNow)
			var retries []time.Duration
			f.plugin.afterFunc = func(d time.Duration, fn func()) { retries = append(retries, d); fn() }

			state := framework.NewCycleState()
			if _, s, _ := f.fwk.RunPreFilterPlugins(ctx, state, tt.pod); !s.IsSuccess() {
				t.Fatalf("PreFilter = %v", s)
			}
			filter := func(n *v1.Node) *fwk.Status {
				ni, err := f.plugin.handle.SnapshotSharedLister().NodeInfos().Get(n.Name)
				if err != nil {
					t.Fatal(err)
				}
				return f.fwk.RunFilterPlugins(ctx, state, tt.pod, ni)
			}
			s := filter(doomed)
			if tt.wait == 0 {
				if !s.IsSuccess() {
					t.Errorf("Filter(%s) = %v, want success (no wait)", doomed.Name, s)
				}
				if _, err := state.Read(reclaimWaitStateKey); err == nil {
					t.Error("cycle decided a wait")
				}
				return
			}
			if s.Code() != fwk.UnschedulableAndUnresolvable || s.Message() != ErrReasonPoolBeingReclaimed {
				t.Errorf("Filter(%s) = %v, want UnschedulableAndUnresolvable %q", doomed.Name, s, ErrReasonPoolBeingReclaimed)
			}
			if s := filter(elsewhere); !s.IsSuccess() {
				t.Errorf("Filter(%s) of another pool = %v, want success", elsewhere.Name, s)
			}
			_, s = f.fwk.RunPostFilterPlugins(ctx, state, tt.pod, framework.NewDefaultNodeToStatus())
			if s.Code() != fwk.UnschedulableAndUnresolvable {
				t.Errorf("PostFilter = %v, want UnschedulableAndUnresolvable (no preemption)", s)
			}
			if diff := cmp.Diff([]time.Duration{tt.wait}, retries); diff != "" {
				t.Errorf("retry scheduled after (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ns/" + tt.pod.Name}, f.activated); diff != "" {
				t.Errorf("activated when the wait ended (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReclaimedPoolsFollowNodes: the index of pools being reclaimed follows node updates.
func TestReclaimedPoolsFollowNodes(t *testing.T) {
	x := newReclaimedPools()
	x.set(spotNodeIn("a1", "us-east-1a", interrupted))
	x.set(spotNodeIn("a2", "us-east-1a", interrupted))
	x.set(spotNodeIn("b1", "us-east-1b"))
	if diff := cmp.Diff([]string{"c5.large/us-east-1a/spot"}, sets.List(x.pools())); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	x.set(spotNodeIn("a1", "us-east-1a")) // taint removed
	x.delete("a2")
	if got := x.pools(); got != nil {
		t.Errorf("pools after the taints went = %v, want none", got)
	}
}

// TestResumedLifeboatRequeues: a Pod waiting for a resuming lifeboat is requeued when the
// activation controller marks the node Ready.
func TestResumedLifeboatRequeues(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	p := newPlugin(t, nil)
	resuming, ready := resumingLifeboat("lb-1", time.Second, "4", false), resumingLifeboat("lb-1", time.Second, "4", true)
	if got, err := p.isSchedulableAfterNodeChange(logger, protected, resuming, ready); err != nil || got != fwk.Queue {
		t.Errorf("hint for a lifeboat seen Ready = %v, %v; want Queue", got, err)
	}
	if got, err := p.isSchedulableAfterNodeChange(logger, protected, ready, ready); err != nil || got != fwk.QueueSkip {
		t.Errorf("hint for an unchanged Ready lifeboat = %v, %v; want QueueSkip", got, err)
	}
}

// TestReclaimedPoolWaitIsBounded: no more Pods wait than the resuming lifeboats can take. A
// 1-CPU lifeboat takes two 500m Pods: the first two wait, the third uses the pool's other
// nodes at once (measured in the scale simulation: every displaced Pod waited, and Karpenter
// launched nodes for all of them). A Pod's next cycle re-books its own seat, not another.
func TestReclaimedPoolWaitIsBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	doomed := spotNodeIn("spot-a2", "us-east-1a")
	f := newTestFramework(t, nil, []*v1.Node{spotNodeIn("spot-a1", "us-east-1a", interrupted), doomed,
		resumingLifeboat("lb-1", 5*time.Second, "1", false)}, nil)
	f.plugin.clock = testingclock.NewFakePassiveClock(reclaimNow)
	f.plugin.afterFunc = func(time.Duration, func()) {}
	waits := func(name string) bool {
		t.Helper()
		pod := protectedPod(name).Obj()
		state := framework.NewCycleState()
		if _, s, _ := f.fwk.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
			t.Fatalf("PreFilter(%s) = %v", name, s)
		}
		_, err := state.Read(reclaimWaitStateKey)
		return err == nil
	}
	for _, tc := range []struct {
		pod  string
		want bool
	}{{"a", true}, {"b", true}, {"c", false}, {"a", true}, {"d", false}} {
		if got := waits(tc.pod); got != tc.want {
			t.Errorf("Pod %s waits = %v, want %v", tc.pod, got, tc.want)
		}
	}
}

package lifeboatplacement

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
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

func TestSeatHeld(t *testing.T) {
	now := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	created := func(ago time.Duration) *v1.Pod {
		p := seatedPod("p", "seat-host").Obj()
		p.CreationTimestamp = metav1.NewTime(now.Add(-ago))
		return p
	}
	seatOn := func(node string) *v1.Pod {
		return st.MakePod().Namespace("lifeboat-system").Name("seat").Node(node).Obj()
	}
	hosts := map[string]string{"i-0abc": "seat-host", "other": "other"}
	hostOf := func(n string) string { return hosts[n] }
	const wait = 5 * time.Second
	tests := []struct {
		name  string
		pod   *v1.Pod
		host  string
		seats []*v1.Pod
		want  bool
		off   bool // seatReleaseWait 0s
	}{
		{"its seat is still on the seat's node", created(time.Second), "seat-host", []*v1.Pod{seatOn("i-0abc")}, true, false},
		{"no seat left", created(time.Second), "seat-host", nil, false, false},
		// A seat elsewhere (made again after an older move) does not hold the room it goes to.
		{"its seat is on another node", created(time.Second), "seat-host", []*v1.Pod{seatOn("other")}, false, false},
		{"its seat is not bound yet", created(time.Second), "seat-host", []*v1.Pod{seatOn("")}, false, false},
		{"no seat host", created(time.Second), "", []*v1.Pod{seatOn("i-0abc")}, false, false},
		// The controller never released it: the wait is over.
		{"created the wait ago", created(wait), "seat-host", []*v1.Pod{seatOn("i-0abc")}, false, false},
		{"the wait is off", created(0), "seat-host", []*v1.Pod{seatOn("i-0abc")}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := wait
			if tt.off {
				w = 0
			}
			until, got := SeatHeld(tt.pod, tt.host, tt.seats, hostOf, w, now)
			if got != tt.want {
				t.Fatalf("SeatHeld = %v, want %v", got, tt.want)
			}
			if got && !until.Equal(tt.pod.CreationTimestamp.Add(wait)) {
				t.Errorf("until = %v, want the Pod's creation + %v", until, wait)
			}
		})
	}
}

// TestPreEnqueueWaitsForTheSeat: in a framework with the informers, a Pod whose seat is still
// bound to its seat host is held back and its requeue scheduled once; the seat's deletion
// requeues it (the queueing hint), another Pod's deletion does not; without the seat it goes.
func TestPreEnqueueWaitsForTheSeat(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	f, pod, seat, scheduled := seatStillBound(ctx, t, nil)
	for range 2 {
		if s := f.plugin.PreEnqueue(ctx, pod); s.Code() != fwk.UnschedulableAndUnresolvable || s.Message() != ErrReasonSeatNotReleased {
			t.Fatalf("PreEnqueue with the seat bound to its host = %v, want it held back", s)
		}
	}
	if want := configv1.DefaultSeatReleaseWait - time.Second; len(*scheduled) != 1 || (*scheduled)[0] != want {
		t.Errorf("requeues scheduled %v, want one after %v (the default wait less the Pod's age)", *scheduled, want)
	}
	other := st.MakePod().Namespace("shop").Name("web-1").Node("i-0abc").Obj()
	if got, err := f.plugin.isSchedulableAfterSeatDelete(logger, pod, other, nil); err != nil || got != fwk.QueueSkip {
		t.Errorf("hint for another Pod's deletion = %v, %v; want QueueSkip", got, err)
	}
	if got, err := f.plugin.isSchedulableAfterSeatDelete(logger, pod, seat, nil); err != nil || got != fwk.Queue {
		t.Errorf("hint for its seat's deletion = %v, %v; want Queue", got, err)
	}
	if err := f.client.CoreV1().Pods(seat.Namespace).Delete(ctx, seat.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.plugin.PreEnqueue(ctx, pod).IsSuccess(), nil
	}); err != nil {
		t.Errorf("PreEnqueue after the seat's deletion never let the Pod go: %v", err)
	}
	if s := f.plugin.PreEnqueue(ctx, protectedPod("plain").Obj()); !s.IsSuccess() {
		t.Errorf("PreEnqueue for a Pod without a seat host = %v, want success", s)
	}
}

// TestPreEnqueueSeatReleaseWaitArg: the plugin arg seatReleaseWait bounds the wait ("0s": none).
func TestPreEnqueueSeatReleaseWaitArg(t *testing.T) {
	tests := []struct {
		name      string
		wait      time.Duration
		held      bool
		requeueIn time.Duration
	}{
		{name: "3s: requeued when the Pod is 3 s old", wait: 3 * time.Second, held: true, requeueIn: 2 * time.Second},
		{name: "0s: the wait is off", wait: 0, held: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f, pod, _, scheduled := seatStillBound(ctx, t, &configv1.LifeboatPlacementArgs{SeatReleaseWait: &metav1.Duration{Duration: tt.wait}})
			s := f.plugin.PreEnqueue(ctx, pod)
			if held := !s.IsSuccess(); held != tt.held {
				t.Fatalf("PreEnqueue = %v, want held %v", s, tt.held)
			}
			if tt.held && (len(*scheduled) != 1 || (*scheduled)[0] != tt.requeueIn) {
				t.Errorf("requeues scheduled %v, want one after %v", *scheduled, tt.requeueIn)
			}
		})
	}
}

// seatStillBound is a framework (with args) holding one node, seat-host, and a seat on it made
// for shop/db-0, in the plugin's seat index; pod is db-0, re-created a second ago for that seat.
// scheduled collects the requeues the plugin schedules (not run).
func seatStillBound(ctx context.Context, t *testing.T, args *configv1.LifeboatPlacementArgs) (f *testFramework, pod, seat *v1.Pod, scheduled *[]time.Duration) {
	t.Helper()
	var obj runtime.Object
	if args != nil {
		obj = args
	}
	f = newTestFramework(t, obj, []*v1.Node{withHostname(bigNode("i-0abc"), "seat-host")}, nil)
	now := time.Now()
	f.plugin.clock = testingclock.NewFakePassiveClock(now)
	scheduled = &[]time.Duration{}
	f.plugin.afterFunc = func(d time.Duration, _ func()) { *scheduled = append(*scheduled, d) }
	pod = seatedPod("db-0", "seat-host").Namespace("shop").Obj()
	pod.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	seat = st.MakePod().Namespace("lifeboat-system").Name("lifeboat-seat-1").Node("i-0abc").
		Label(v1alpha1.LabelSeat, "true").Annotation(v1alpha1.AnnotationSeatFor, "shop/db-0").Obj()
	if _, err := f.client.CoreV1().Pods(seat.Namespace).Create(ctx, seat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		objs, err := f.plugin.seats.ByIndex(seatForIndex, "shop/db-0")
		return err == nil && len(objs) == 1, nil
	}); err != nil {
		t.Fatalf("the seat never reached the index: %v", err)
	}
	return f, pod, seat, scheduled
}

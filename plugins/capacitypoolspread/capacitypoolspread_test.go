package capacitypoolspread

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
)

var now = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

// testPool is (instance type, zone, capacity type).
type testPool struct{ typ, zone, capacity string }

func (p testPool) key() string { return telemetry.PoolKey(p.typ, p.zone, p.capacity) }

var (
	poolA = testPool{"m5.large", "us-east-1a", "spot"}
	poolB = testPool{"m5.large", "us-east-1b", "spot"}
	poolC = testPool{"c5.large", "us-east-1a", "spot"}
)

// makeNode is a node of the capacity pool p.
func makeNode(name string, p testPool) *v1.Node {
	return buildtest.Node(name, buildtest.InstanceType(p.typ), buildtest.Zone(p.zone), buildtest.CapacityType(p.capacity))
}

func replica(name, namespace string, owner types.UID, nodeName string) *v1.Pod {
	p := st.MakePod().Name(name).Namespace(namespace).Node(nodeName).Obj()
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: string(owner), UID: owner, Controller: ptr.To(true)}}
	return p
}

func newPlugin(t *testing.T, ctx context.Context, args runtime.Object, pods []*v1.Pod, nodes []*v1.Node, objs ...runtime.Object) *CapacityPoolSpread {
	t.Helper()
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithClientSet(fake.NewClientset(objs...)))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := newWithClock(ctx, args, fh, testingclock.NewFakePassiveClock(now))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return pl
}

// scores runs PreScore, Score and NormalizeScore over every node, as the framework does.
func scores(t *testing.T, ctx context.Context, pl *CapacityPoolSpread, pod *v1.Pod, nodes []*v1.Node) (map[string]int64, *fwk.Status) {
	t.Helper()
	state := framework.NewCycleState()
	infos := tf.BuildNodeInfos(nodes)
	if s := pl.PreScore(ctx, state, pod, infos); !s.IsSuccess() {
		return nil, s
	}
	var list fwk.NodeScoreList
	for _, ni := range infos {
		sc, s := pl.Score(ctx, state, pod, ni)
		if !s.IsSuccess() {
			t.Fatalf("Score: %v", s)
		}
		list = append(list, fwk.NodeScore{Name: ni.Node().Name, Score: sc})
	}
	if s := pl.NormalizeScore(ctx, state, pod, list); !s.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", s)
	}
	got := map[string]int64{}
	for _, s := range list {
		got[s.Name] = s.Score
	}
	return got, nil
}

func hot(p testPool, interruptions int32, ago time.Duration) *v1.ConfigMap {
	doc := &telemetry.Telemetry{WindowSeconds: 3600, Updated: now, Pools: map[string]telemetry.PoolStats{
		p.key(): {Interruptions: interruptions, LastInterruption: now.Add(-ago)},
	}}
	data, err := doc.Encode()
	if err != nil {
		panic(err)
	}
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: telemetry.Namespace, Name: telemetry.Name}, Data: data}
}

func TestScore(t *testing.T) {
	nodes := []*v1.Node{makeNode("a", poolA), makeNode("b", poolB), makeNode("c", poolC)}
	tests := []struct {
		name      string
		pod       *v1.Pod
		existing  []*v1.Pod
		telemetry *v1.ConfigMap
		args      runtime.Object
		want      map[string]int64
		wantSkip  bool
	}{
		{
			name:     "fewest siblings in the pool scores highest",
			pod:      replica("new", "ns", "rs1", ""),
			existing: []*v1.Pod{replica("1", "ns", "rs1", "a"), replica("2", "ns", "rs1", "a"), replica("3", "ns", "rs1", "b")},
			want:     map[string]int64{"a": 0, "b": 50, "c": 100},
		},
		{
			name: "other owners do not count",
			pod:  replica("new", "ns", "rs1", ""),
			existing: []*v1.Pod{
				replica("1", "ns", "rs2", "a"), replica("2", "other", "rs9", "a"), replica("3", "ns", "rs1", "b"),
			},
			want: map[string]int64{"a": 100, "b": 0, "c": 100},
		},
		{
			name:     "pods without a controller owner are not spread",
			pod:      st.MakePod().Name("bare").Namespace("ns").Obj(),
			wantSkip: true,
		},
		{
			name:      "a pool interrupted just now counts one replica per interruption",
			pod:       replica("new", "ns", "rs1", ""),
			existing:  []*v1.Pod{replica("1", "ns", "rs1", "b")},
			telemetry: hot(poolA, 2, 0),
			want:      map[string]int64{"a": 0, "b": 50, "c": 100},
		},
		{
			name:      "interruptions fade with the half-life",
			pod:       replica("new", "ns", "rs1", ""),
			existing:  []*v1.Pod{replica("1", "ns", "rs1", "b")},
			telemetry: hot(poolA, 2, 10*time.Minute), // weighs 1 replica, like pool b
			want:      map[string]int64{"a": 0, "b": 0, "c": 100},
		},
		{
			name:      "hotPoolPenalty 0 ignores telemetry",
			pod:       replica("new", "ns", "rs1", ""),
			telemetry: hot(poolA, 5, 0),
			args:      &configv1.CapacityPoolSpreadArgs{HotPoolPenalty: ptr.To[int32](0)},
			want:      map[string]int64{"a": 100, "b": 100, "c": 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tt.telemetry != nil {
				objs = append(objs, tt.telemetry)
			}
			pl := newPlugin(t, ctx, tt.args, tt.existing, nodes, objs...)
			if tt.telemetry != nil && pl.hotPoolPenalty > 0 {
				waitForTelemetry(t, ctx, pl)
			}
			got, s := scores(t, ctx, pl, tt.pod, nodes)
			if tt.wantSkip {
				if !s.IsSkip() {
					t.Fatalf("PreScore = %v, want Skip", s)
				}
				return
			}
			if !s.IsSuccess() {
				t.Fatalf("PreScore: %v", s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func waitForTelemetry(t *testing.T, ctx context.Context, pl *CapacityPoolSpread) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(pl.telemetry.Load().Pools) > 0, nil
	})
	if err != nil {
		t.Fatalf("telemetry ConfigMap never read: %v", err)
	}
}

// TestSequentialPlacement places replicas one at a time on the best-scoring node, as the
// scheduler does, and counts replicas per pool.
func TestSequentialPlacement(t *testing.T) {
	var nodes []*v1.Node
	for _, p := range []testPool{poolA, poolB, poolC} {
		for i := range 2 {
			nodes = append(nodes, makeNode(fmt.Sprintf("%s-%s-%d", p.typ, p.zone, i), p))
		}
	}
	poolOf := map[string]string{}
	for _, n := range nodes {
		poolOf[n.Name] = telemetry.PoolKeyFromLabels(n.Labels)
	}
	tests := []struct {
		name      string
		replicas  int
		telemetry *v1.ConfigMap
		want      map[string]int
	}{
		{name: "12 replicas over 3 pools land 4/4/4", replicas: 12, want: map[string]int{poolA.key(): 4, poolB.key(): 4, poolC.key(): 4}},
		{
			name: "a hot pool gets fewer", replicas: 12, telemetry: hot(poolC, 3, 0),
			want: map[string]int{poolA.key(): 5, poolB.key(): 5, poolC.key(): 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var placed []*v1.Pod
			var objs []runtime.Object
			if tt.telemetry != nil {
				objs = append(objs, tt.telemetry)
			}
			got := map[string]int{}
			for i := range tt.replicas {
				pl := newPlugin(t, ctx, nil, placed, nodes, objs...)
				if tt.telemetry != nil {
					waitForTelemetry(t, ctx, pl)
				}
				pod := replica(fmt.Sprintf("r%d", i), "ns", "rs1", "")
				s, status := scores(t, ctx, pl, pod, nodes)
				if !status.IsSuccess() {
					t.Fatal(status)
				}
				best := bestNode(s)
				pod.Spec.NodeName = best
				placed = append(placed, pod)
				got[poolOf[best]]++
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("replicas per pool (-want +got):\n%s", diff)
			}
		})
	}
}

// bestNode picks the highest score, ties by name (the scheduler breaks ties at random).
func bestNode(scores map[string]int64) string {
	names := make([]string, 0, len(scores))
	for n := range scores {
		names = append(names, n)
	}
	sort.Strings(names)
	best := names[0]
	for _, n := range names {
		if scores[n] > scores[best] {
			best = n
		}
	}
	return best
}

func TestUnreadableTelemetryIsIgnored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cm := &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: telemetry.Namespace, Name: telemetry.Name},
		Data:       map[string]string{telemetry.DataKey: "{not json"},
	}
	nodes := []*v1.Node{makeNode("a", poolA), makeNode("b", poolB)}
	pl := newPlugin(t, ctx, nil, nil, nodes, cm)
	got, s := scores(t, ctx, pl, replica("new", "ns", "rs1", ""), nodes)
	if !s.IsSuccess() {
		t.Fatal(s)
	}
	if got["a"] != got["b"] {
		t.Errorf("scores = %v, want equal pools", got)
	}
}

func TestSignPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pl := newPlugin(t, ctx, &config.CapacityPoolSpreadArgs{TelemetryNamespace: "x", TelemetryConfigMapName: "y"}, nil, nil)
	if _, s := pl.SignPod(ctx, replica("r", "ns", "rs1", "")); s.IsSuccess() {
		t.Error("replicas must not be signable: their scores change with every sibling placed")
	}
	if _, s := pl.SignPod(ctx, st.MakePod().Name("bare").Obj()); !s.IsSuccess() {
		t.Errorf("bare pods should be signable, got %v", s)
	}
}

func TestNewRejectsInvalidArgs(t *testing.T) {
	tests := []struct {
		args      *config.CapacityPoolSpreadArgs
		wantField string
	}{
		{&config.CapacityPoolSpreadArgs{HotPoolPenalty: -1, TelemetryNamespace: "a", TelemetryConfigMapName: "b"}, "hotPoolPenalty"},
		{&config.CapacityPoolSpreadArgs{HotPoolPenalty: 1, TelemetryNamespace: "a", TelemetryConfigMapName: "b"}, "hotPoolHalfLife"},
		{&config.CapacityPoolSpreadArgs{TelemetryNamespace: "Not_A_Namespace", TelemetryConfigMapName: "b"}, "telemetryNamespace"},
		{&config.CapacityPoolSpreadArgs{TelemetryNamespace: "a", TelemetryConfigMapName: ""}, "telemetryConfigMapName"},
	}
	for _, tt := range tests {
		t.Run(tt.wantField, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			if _, err := New(ctx, tt.args, nil); err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("New error = %v, want one naming %s", err, tt.wantField)
			}
		})
	}
}

// BenchmarkPreScore: one scheduling cycle's PreScore + Score over 1000 nodes holding 5000
// pods of 50 workloads (the scheduler benchmark's shape).
func BenchmarkPreScore(b *testing.B) {
	_, ctx := ktesting.NewTestContext(b)
	var nodes []*v1.Node
	for i := range 1000 {
		nodes = append(nodes, makeNode(fmt.Sprintf("n%d", i), testPool{fmt.Sprintf("t%d", i%5), fmt.Sprintf("z%d", i%3), "spot"}))
	}
	var pods []*v1.Pod
	for i := range 5000 {
		pods = append(pods, replica(fmt.Sprintf("p%d", i), "ns", types.UID(fmt.Sprintf("rs%d", i%50)), nodes[i%1000].Name))
	}
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil, frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(pods, nodes)))
	if err != nil {
		b.Fatal(err)
	}
	pl, err := newWithClock(ctx, &config.CapacityPoolSpreadArgs{TelemetryNamespace: "x", TelemetryConfigMapName: "y"}, fh, testingclock.NewFakePassiveClock(now))
	if err != nil {
		b.Fatal(err)
	}
	infos := tf.BuildNodeInfos(nodes)
	pod := replica("new", "ns", "rs7", "")
	b.ResetTimer()
	for b.Loop() {
		state := framework.NewCycleState()
		if s := pl.PreScore(ctx, state, pod, infos); !s.IsSuccess() {
			b.Fatal(s)
		}
		for _, ni := range infos {
			if _, s := pl.Score(ctx, state, pod, ni); !s.IsSuccess() {
				b.Fatal(s)
			}
		}
	}
}

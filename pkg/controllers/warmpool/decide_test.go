package warmpool

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

var now = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

func inst(id string, slot, gen int, state string, opts ...func(*cloud.Instance)) cloud.Instance {
	in := cloud.Instance{ID: id, Pool: "p", Slot: slot, Generation: gen, State: state, LaunchTime: now.Add(-10 * time.Minute), HibernationConfigured: true}
	if state == cloud.StateStopped {
		in.Hibernated = true
		in.StateReason = cloud.ReasonUserInitiatedHibernate
	}
	for _, o := range opts {
		o(&in)
	}
	return in
}

func degraded(in *cloud.Instance) {
	in.Hibernated = false
	in.StateReason = cloud.ReasonUserInitiatedShutdown
}
func old(in *cloud.Instance)   { in.LaunchTime = now.Add(-1000 * time.Hour) }
func fresh(in *cloud.Instance) { in.LaunchTime = now.Add(-time.Minute) }

type nodeOpt func(*corev1.Node)

func mknode(name string, state v1alpha1.NodeState, ready bool, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: "p"}, Annotations: map[string]string{}}}
	if state != "" {
		n.Labels[v1alpha1.LabelState] = string(state)
	}
	if state == v1alpha1.NodeStateWarming {
		n.Annotations[v1alpha1.AnnotationWarmingSince] = nodeutil.FormatTime(now.Add(-time.Minute))
	}
	n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintLifeboat, Value: "p", Effect: corev1.TaintEffectNoSchedule}}
	if state == v1alpha1.NodeStateWarming || state == v1alpha1.NodeStateStandby {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule})
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withImages(imgs ...string) nodeOpt {
	return func(n *corev1.Node) { n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: imgs}) }
}

func annotated(key string, t time.Time) nodeOpt {
	return func(n *corev1.Node) { n.Annotations[key] = nodeutil.FormatTime(t) }
}

func slots(gens ...int32) []v1alpha1.SlotStatus {
	out := make([]v1alpha1.SlotStatus, len(gens))
	for i, g := range gens {
		out[i] = v1alpha1.SlotStatus{Slot: int32(i), Generation: g}
	}
	return out
}

func observed(desired int, sl []v1alpha1.SlotStatus, instances []cloud.Instance, nodes map[string]*corev1.Node, images ...string) Observed {
	for i := range sl {
		for _, in := range instances {
			if int32(in.Slot) == sl[i].Slot && int32(in.Generation) == sl[i].Generation && in.State != cloud.StateShuttingDown {
				sl[i].InstanceID = in.ID
			}
		}
	}
	return Observed{
		Desired: desired, Slots: sl, Instances: instances, Nodes: nodes, Images: NormalizeImages(images),
		PrePullTimeout: 10 * time.Minute, MaxStandbyAge: 720 * time.Hour, BootTimeout: 10 * time.Minute,
		HibernateRetry: time.Minute, Now: now,
	}
}

func keepClaimed(o Observed) Observed {
	o.KeepClaimed = true
	return o
}

// ledgerClaimed: the instances are in the pool's resume ledger.
func ledgerClaimed(o Observed, ids ...string) Observed {
	o.Claimed = map[string]bool{}
	for _, id := range ids {
		o.Claimed[id] = true
	}
	return o
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		obs  Observed
		// expectations (nil/zero = none)
		launch          []Launch
		warm, prepull   []string
		hibernate       map[string]string
		standby         []string
		terminate       []string
		counts          [4]int32 // warming, standby, active, draining
		slotsChanged    bool
		wantGenerations []int32
	}{
		{
			name:            "empty pool of 3 launches 3 slots at generation 0",
			obs:             observed(3, nil, nil, nil),
			launch:          []Launch{{0, 0}, {1, 0}, {2, 0}},
			counts:          [4]int32{3, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{0, 0, 0},
		},
		{
			name:            "launched but not visible yet: the same generation again (idempotent token)",
			obs:             observed(1, slots(0), nil, nil),
			launch:          []Launch{{0, 0}},
			counts:          [4]int32{1, 0, 0, 0},
			wantGenerations: []int32{0},
		},
		{
			name:   "running, Node not registered yet: wait",
			obs:    observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning, fresh)}, nil),
			counts: [4]int32{1, 0, 0, 0},
		},
		{
			name:            "Node never registered: replace",
			obs:             observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning, func(i *cloud.Instance) { i.LaunchTime = now.Add(-time.Hour) })}, nil),
			launch:          []Launch{{0, 1}},
			terminate:       []string{"i-1"},
			counts:          [4]int32{1, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "Node registered unlabelled: label warming; not Ready yet",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", "", false)}, "nginx"),
			warm:   []string{"n1"},
			counts: [4]int32{1, 0, 0, 0},
		},
		{
			name: "Ready, images missing: pre-pull",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, withImages("docker.io/library/redis:7"))}, "nginx:1.27", "redis:7"),
			prepull: []string{"n1"},
			counts:  [4]int32{1, 0, 0, 0},
		},
		{
			name: "Ready, images present (any name of the image): hibernate",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, withImages("docker.io/library/nginx@sha256:abc", "docker.io/library/nginx:1.27"))}, "nginx:1.27"),
			hibernate: map[string]string{"i-1": "n1"},
			counts:    [4]int32{1, 0, 0, 0},
		},
		{
			name: "pre-pull timed out: replace",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, annotated(v1alpha1.AnnotationWarmingSince, now.Add(-time.Hour)))}, "nginx"),
			launch:          []Launch{{0, 1}},
			terminate:       []string{"i-1"},
			counts:          [4]int32{1, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "hibernation requested recently: wait, do not ask twice",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, annotated(v1alpha1.AnnotationHibernateRequestedAt, now.Add(-10*time.Second)))}),
			counts: [4]int32{1, 0, 0, 0},
		},
		{
			name: "hibernation request lost (still running a while later): ask again",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, annotated(v1alpha1.AnnotationHibernateRequestedAt, now.Add(-5*time.Minute)))}),
			hibernate: map[string]string{"i-1": "n1"},
			counts:    [4]int32{1, 0, 0, 0},
		},
		{
			name: "hibernated: label standby",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, false)}),
			standby: []string{"n1"},
			counts:  [4]int32{0, 1, 0, 0},
		},
		{
			name: "steady state: nothing to do",
			obs: observed(2, slots(0, 3), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped), inst("i-2", 1, 3, cloud.StateStopped)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, false), "i-2": mknode("n2", v1alpha1.NodeStateStandby, false)}),
			counts: [4]int32{0, 2, 0, 0},
		},
		{
			name: "hibernation degraded to stop: replace",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped, degraded)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, false)}),
			launch:          []Launch{{0, 1}},
			terminate:       []string{"i-1"},
			counts:          [4]int32{1, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "too old: replaced one at a time",
			obs: observed(2, slots(0, 0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped, old), inst("i-2", 1, 0, cloud.StateStopped, old)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, false), "i-2": mknode("n2", v1alpha1.NodeStateStandby, false)}),
			launch:          []Launch{{0, 1}},
			terminate:       []string{"i-1"},
			counts:          [4]int32{1, 1, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1, 0},
		},
		{
			name: "too old but another slot is warming: keep it for now",
			obs: observed(2, slots(0, 0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped, old), inst("i-2", 1, 0, cloud.StateRunning, fresh)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, false)}),
			counts: [4]int32{1, 1, 0, 0},
		},
		{
			name: "vanished (terminated outside Lifeboat): next generation",
			obs: observed(1, []v1alpha1.SlotStatus{{Slot: 0, Generation: 2, InstanceID: "i-1"}}, []cloud.Instance{inst("i-1", 0, 2, cloud.StateShuttingDown)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, false)}),
			launch:          []Launch{{0, 3}},
			counts:          [4]int32{1, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{3},
		},
		{
			name: "claimed by an interruption: slot refills, active instance is left alone",
			obs: observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateActive, false)}),
			launch:          []Launch{{0, 1}},
			counts:          [4]int32{1, 0, 1, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "in the resume ledger, started, Node still labelled standby: serving — neither warmed, hibernated nor replaced; the slot refills",
			obs: ledgerClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, true, withImages("nginx"))}, "nginx"), "i-1"),
			launch:          []Launch{{0, 1}},
			counts:          [4]int32{1, 0, 1, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "in the resume ledger, not started yet, old generation: not terminated",
			obs: ledgerClaimed(observed(1, slots(1), []cloud.Instance{inst("i-0", 0, 0, cloud.StateStopped), inst("i-1", 0, 1, cloud.StateStopped)},
				map[string]*corev1.Node{"i-0": mknode("n0", v1alpha1.NodeStateStandby, false), "i-1": mknode("n1", v1alpha1.NodeStateStandby, false)}), "i-0"),
			counts:          [4]int32{0, 1, 1, 0},
			wantGenerations: []int32{1},
		},
		{
			name: "afterUse Rehibernate, in the resume ledger: keeps its slot, counted active",
			obs: ledgerClaimed(keepClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, true)})), "i-1"),
			counts:          [4]int32{0, 0, 1, 0},
			wantGenerations: []int32{0},
		},
		{
			name: "afterUse Rehibernate: a claimed instance keeps its slot, nothing launches",
			obs: keepClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateActive, true)})),
			counts:          [4]int32{0, 0, 1, 0},
			wantGenerations: []int32{0},
		},
		{
			name: "afterUse Rehibernate: draining lent instance is neither replaced nor terminated",
			obs: keepClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateDraining, true)})),
			counts:          [4]int32{0, 0, 0, 1},
			wantGenerations: []int32{0},
		},
		{
			name: "afterUse Rehibernate: back to warming after its handoff, images present: hibernate it again",
			obs: keepClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateRunning)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateWarming, true, withImages("nginx"))}, "nginx")),
			hibernate:       map[string]string{"i-1": "n1"},
			counts:          [4]int32{1, 0, 0, 0},
			wantGenerations: []int32{0},
		},
		{
			name: "afterUse Rehibernate: lent instance terminated (fallback): the slot refills",
			obs: keepClaimed(observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateShuttingDown)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateDraining, true)})),
			launch:          []Launch{{0, 1}},
			counts:          [4]int32{1, 0, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{1},
		},
		{
			name: "old generations draining are left to the handoff; strays are terminated",
			obs: observed(1, slots(2), []cloud.Instance{
				inst("i-new", 0, 2, cloud.StateStopped), inst("i-drain", 0, 1, cloud.StateRunning), inst("i-stray", 0, 0, cloud.StateRunning), inst("i-untagged", -1, -1, cloud.StateStopped),
			}, map[string]*corev1.Node{"i-new": mknode("n-new", v1alpha1.NodeStateStandby, false), "i-drain": mknode("n-drain", v1alpha1.NodeStateDraining, true), "i-stray": mknode("n-stray", v1alpha1.NodeStateWarming, true)}),
			terminate: []string{"i-stray", "i-untagged"},
			counts:    [4]int32{0, 1, 0, 1},
		},
		{
			name: "shrink: slots beyond the size go, their instances are terminated",
			obs: observed(1, slots(0, 0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped), inst("i-2", 1, 0, cloud.StateStopped)},
				map[string]*corev1.Node{"i-1": mknode("n1", v1alpha1.NodeStateStandby, false), "i-2": mknode("n2", v1alpha1.NodeStateStandby, false)}),
			terminate:       []string{"i-2"},
			counts:          [4]int32{0, 1, 0, 0},
			slotsChanged:    true,
			wantGenerations: []int32{0},
		},
		{
			name:   "hibernated but its Node was deleted: replace (it could not be scheduled onto)",
			obs:    observed(1, slots(0), []cloud.Instance{inst("i-1", 0, 0, cloud.StateStopped)}, map[string]*corev1.Node{}),
			launch: []Launch{{0, 1}}, terminate: []string{"i-1"},
			counts: [4]int32{1, 0, 0, 0}, slotsChanged: true, wantGenerations: []int32{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.obs)
			if !reflect.DeepEqual(got.Launch, tt.launch) {
				t.Errorf("Launch = %v, want %v", got.Launch, tt.launch)
			}
			if !reflect.DeepEqual(got.Warm, tt.warm) {
				t.Errorf("Warm = %v, want %v", got.Warm, tt.warm)
			}
			if !reflect.DeepEqual(got.PrePull, tt.prepull) {
				t.Errorf("PrePull = %v, want %v", got.PrePull, tt.prepull)
			}
			if tt.hibernate == nil {
				tt.hibernate = map[string]string{}
			}
			if !reflect.DeepEqual(got.Hibernate, tt.hibernate) {
				t.Errorf("Hibernate = %v, want %v", got.Hibernate, tt.hibernate)
			}
			if !reflect.DeepEqual(got.Standby, tt.standby) {
				t.Errorf("Standby = %v, want %v", got.Standby, tt.standby)
			}
			var term []string
			for _, x := range got.Terminate {
				term = append(term, x.InstanceID)
			}
			if !reflect.DeepEqual(term, tt.terminate) {
				t.Errorf("Terminate = %v, want %v", term, tt.terminate)
			}
			if c := [4]int32{got.Warming, got.StandbyCount, got.Active, got.Draining}; c != tt.counts {
				t.Errorf("counts (warming, standby, active, draining) = %v, want %v", c, tt.counts)
			}
			if got.SlotsChanged != tt.slotsChanged {
				t.Errorf("SlotsChanged = %v, want %v", got.SlotsChanged, tt.slotsChanged)
			}
			if tt.wantGenerations != nil {
				var gens []int32
				for _, s := range got.Slots {
					gens = append(gens, s.Generation)
				}
				if !reflect.DeepEqual(gens, tt.wantGenerations) {
					t.Errorf("generations = %v, want %v", gens, tt.wantGenerations)
				}
			}
		})
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"nginx":                              "docker.io/library/nginx:latest",
		"nginx:1.27":                         "docker.io/library/nginx:1.27",
		"bitnami/redis":                      "docker.io/bitnami/redis:latest",
		"index.docker.io/library/busybox:1":  "docker.io/library/busybox:1",
		"registry.k8s.io/pause:3.10":         "registry.k8s.io/pause:3.10",
		"localhost:5000/app":                 "localhost:5000/app:latest",
		"public.ecr.aws/x/y@sha256:0123abcd": "public.ecr.aws/x/y@sha256:0123abcd",
		"  ":                                 "",
	} {
		if got := NormalizeImage(in); got != want {
			t.Errorf("NormalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAutoImages(t *testing.T) {
	pods := []corev1.Pod{
		{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "nginx:1.27"}, {Image: "envoy:1"}}}},
		{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Image: "busybox"}}, Containers: []corev1.Container{{Image: "docker.io/library/nginx:1.27"}}}},
	}
	want := []string{"docker.io/library/busybox:latest", "docker.io/library/envoy:1", "docker.io/library/nginx:1.27"}
	if got := AutoImages(pods); !reflect.DeepEqual(got, want) {
		t.Errorf("AutoImages = %v, want %v", got, want)
	}
}

package handoff

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func stsPod(name string, opts ...buildtest.PodOption) *corev1.Pod {
	base := []buildtest.PodOption{buildtest.OnNode("lb-1"), buildtest.OwnedBy("StatefulSet", "db", "sts"),
		buildtest.Protected(v1alpha1.TierCheckpointed), buildtest.Requests("300m", "512Mi"), buildtest.Running()}
	return buildtest.Pod("app", name, append(base, opts...)...)
}

func TestSeat(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1", UID: "node-uid"}}
	p := stsPod("db-0")
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	p.Spec.Affinity = &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}}}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{},
	}
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: v1alpha1.TaintSpot, Operator: corev1.TolerationOpExists},
		{Key: v1alpha1.TaintLifeboat, Operator: corev1.TolerationOpExists},
		{Key: v1alpha1.TaintStandby, Operator: corev1.TolerationOpExists},
		{Key: v1alpha1.TaintInterrupted, Operator: corev1.TolerationOpExists},
		{Key: v1alpha1.TaintKarpenterDisrupted, Operator: corev1.TolerationOpExists},
		{Operator: corev1.TolerationOpExists},
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule},
	}
	s := Seat(p, node, "lifeboat-system", "")

	if s.Namespace != "lifeboat-system" || s.Name != SeatName("app", "db-0") || s.Labels[v1alpha1.LabelSeat] != "true" {
		t.Errorf("seat %s/%s labels %v", s.Namespace, s.Name, s.Labels)
	}
	if s.Annotations[v1alpha1.AnnotationSeatFor] != "app/db-0" || s.Annotations[v1alpha1.AnnotationSeatNode] != "lb-1" {
		t.Errorf("annotations %v", s.Annotations)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owner %v, want the lifeboat Node (the seat goes with it)", s.OwnerReferences)
	}
	if len(s.Labels) != 1 {
		t.Errorf("labels %v: a seat carries none of the workload's (no Service or PDB selects it)", s.Labels)
	}
	want := []corev1.Toleration{{Key: v1alpha1.TaintSpot, Operator: corev1.TolerationOpExists},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	if !reflect.DeepEqual(s.Spec.Tolerations, want) {
		t.Errorf("tolerations %v, want %v (never a lifeboat's, a disrupted node's, or every taint)", s.Spec.Tolerations, want)
	}
	if !reflect.DeepEqual(s.Spec.NodeSelector, p.Spec.NodeSelector) || s.Spec.Affinity == nil ||
		!reflect.DeepEqual(s.Spec.Affinity.NodeAffinity, p.Spec.Affinity.NodeAffinity) || s.Spec.Affinity.PodAntiAffinity != nil {
		t.Errorf("constraints %v %+v: want the Pod's node selector and node affinity only", s.Spec.NodeSelector, s.Spec.Affinity)
	}
	req := s.Spec.Containers[0].Resources.Requests
	if !req.Cpu().Equal(resource.MustParse("300m")) || !req.Memory().Equal(resource.MustParse("512Mi")) {
		t.Errorf("requests %v, want the Pod's", req)
	}
	if s.Spec.Containers[0].Image != DefaultSeatImage || s.Spec.SchedulerName != "" || s.Spec.PriorityClassName != "" || *s.Spec.TerminationGracePeriodSeconds != 0 {
		t.Errorf("image %q scheduler %q priority class %q grace %d", s.Spec.Containers[0].Image, s.Spec.SchedulerName, s.Spec.PriorityClassName, *s.Spec.TerminationGracePeriodSeconds)
	}
	// A Pod with a claim is pinned to the zone it runs in (its volume's); the Pod's own
	// selector is not changed.
	node.Labels = map[string]string{v1alpha1.LabelZone: "us-east-1b"}
	withClaim := p.DeepCopy()
	withClaim.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}
	if got := Seat(withClaim, node, "lifeboat-system", "").Spec.NodeSelector; !reflect.DeepEqual(got, map[string]string{"kubernetes.io/os": "linux", v1alpha1.LabelZone: "us-east-1b"}) {
		t.Errorf("node selector with a claim %v, want the Pod's and the lifeboat's zone", got)
	}
	if len(withClaim.Spec.NodeSelector) != 1 {
		t.Errorf("the Pod's node selector was changed: %v", withClaim.Spec.NodeSelector)
	}
	if got := Seat(p, node, "lifeboat-system", "").Spec.NodeSelector; len(got) != 1 {
		t.Errorf("node selector without a claim %v, want the Pod's only", got)
	}
	if SeatName("app", "db-0") == SeatName("app", "db-1") || SeatName("a", "b-c") == SeatName("a-b", "c") || len(SeatName("app", "db-0")) > 63 {
		t.Errorf("seat names must be distinct per Pod and short: %s", SeatName("app", "db-0"))
	}
}

func TestPlanSeats(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1"}}
	gone := metav1.NewTime(hpaNow)
	terminating := stsPod("db-2")
	terminating.DeletionTimestamp = &gone
	groups := []Group{
		{Kind: KindDeployment, Namespace: "app", Name: "web", Pods: []*corev1.Pod{apiPod("web-1", "lb-1")}},
		{Kind: KindEvict, Pods: []*corev1.Pod{stsPod("db-0"), stsPod("db-1"), terminating}},
		{Kind: KindWait, Pods: []*corev1.Pod{jobPod("batch-a")}},
	}
	seat := func(pod, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lifeboat-system", Name: SeatName("app", pod),
			Annotations: map[string]string{v1alpha1.AnnotationSeatNode: node}}}
	}
	names := func(ps []*corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Annotations[v1alpha1.AnnotationSeatFor])
		}
		slices.Sort(out)
		return out
	}
	for name, tc := range map[string]struct {
		existing   []*corev1.Pod
		wantCreate []string
		wantDelete []string
	}{
		"none yet: a seat per Pod to evict, not for surging or finishing Pods": {
			wantCreate: []string{"app/db-0", "app/db-1"}},
		"one there": {existing: []*corev1.Pod{seat("db-0", "lb-1")}, wantCreate: []string{"app/db-1"}},
		"the evicted Pod's seat goes": {existing: []*corev1.Pod{seat("db-0", "lb-1"), seat("db-1", "lb-1"), seat("db-2", "lb-1")},
			wantDelete: []string{SeatName("app", "db-2")}},
		"another lifeboat's seats are left alone": {existing: []*corev1.Pod{seat("db-0", "lb-1"), seat("db-1", "lb-1"), seat("db-9", "lb-2")}},
	} {
		t.Run(name, func(t *testing.T) {
			plan := PlanSeats(node, groups, tc.existing, "lifeboat-system", "")
			if got := names(plan.Create); !reflect.DeepEqual(got, tc.wantCreate) {
				t.Errorf("create %v, want %v", got, tc.wantCreate)
			}
			if !reflect.DeepEqual(plan.Delete, tc.wantDelete) {
				t.Errorf("delete %v, want %v", plan.Delete, tc.wantDelete)
			}
		})
	}
	if plan := PlanSeats(node, nil, []*corev1.Pod{seat("db-0", "lb-1")}, "lifeboat-system", ""); !reflect.DeepEqual(plan.Delete, []string{SeatName("app", "db-0")}) {
		t.Errorf("an emptied lifeboat keeps seats %v", plan.Delete)
	}
}

// TestSeatsThroughTheHandoff: an active lifeboat with a StatefulSet Pod gets its seat; at the
// handoff the Pod is evicted and its seat deleted in the same pass; an emptied lifeboat keeps
// none.
func TestSeatsThroughTheHandoff(t *testing.T) {
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.WarmPoolSpec{ActiveDuration: &metav1.Duration{Duration: time.Minute}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)},
		Annotations: map[string]string{v1alpha1.AnnotationActivatedAt: nodeutil.FormatTime(hpaNow)}}}
	var order []string
	c := fakeClient(interceptor.Funcs{
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" {
				order = append(order, "evict "+obj.GetName())
				return c.Delete(ctx, obj)
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if obj.GetNamespace() == "lifeboat-system" {
				order = append(order, "delete seat")
			}
			return c.Delete(ctx, obj, opts...)
		},
	}, pool, node, stsPod("db-0"))
	clk := clocktesting.NewFakeClock(hpaNow.Add(10 * time.Second))
	ctrl := New(c, clk, events.NewFakeRecorder(100))
	seats := func() []corev1.Pod {
		list := &corev1.PodList{}
		if err := c.List(context.Background(), list, client.InNamespace("lifeboat-system"), client.MatchingLabels{v1alpha1.LabelSeat: "true"}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	reconcileLB(t, ctrl) // active, before activeDuration
	if s := seats(); len(s) != 1 || s[0].Annotations[v1alpha1.AnnotationSeatFor] != "app/db-0" {
		t.Fatalf("seats while active = %v, want one for app/db-0", s)
	}
	clk.Step(time.Minute)
	reconcileLB(t, ctrl) // cordons: the handoff starts
	reconcileLB(t, ctrl) // drains: evicts db-0, deletes its seat
	if want := []string{"evict db-0", "delete seat"}; !reflect.DeepEqual(order, want) {
		t.Errorf("writes %v, want %v", order, want)
	}
	if s := seats(); len(s) != 0 {
		t.Errorf("seats after the eviction = %d, want none", len(s))
	}
	reconcileLB(t, ctrl)
	if s := seats(); len(s) != 0 {
		t.Errorf("an emptied lifeboat got seats again: %d", len(s))
	}
}

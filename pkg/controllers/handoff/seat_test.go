package handoff

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

func stsPod(name string, opts ...buildtest.PodOption) *corev1.Pod {
	base := []buildtest.PodOption{buildtest.OnNode("lb-1"), buildtest.OwnedBy("StatefulSet", "db", "sts"),
		buildtest.Protected(v1alpha1.TierCheckpointed), buildtest.Requests("300m", "512Mi"), buildtest.Running()}
	return buildtest.Pod("app", name, append(base, opts...)...)
}

func TestSeat(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1", UID: "node-uid"}}
	p := stsPod("db-0")
	p.Spec.Containers[0].Image = "registry.example/db:1"
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
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "default", UID: "pool-uid"}}
	s := Seat(p, node, SeatSpec{Namespace: "lifeboat-system", Pool: pool})

	if s.Namespace != "lifeboat-system" || s.Name != SeatName("app", "db-0") || s.Labels[v1alpha1.LabelSeat] != "true" {
		t.Errorf("seat %s/%s labels %v", s.Namespace, s.Name, s.Labels)
	}
	if s.Annotations[v1alpha1.AnnotationSeatFor] != "app/db-0" || s.Annotations[v1alpha1.AnnotationSeatNode] != "lb-1" {
		t.Errorf("annotations %v", s.Annotations)
	}
	// Owned by the WarmPool, never by a Node: Karpenter does not provision for a Pod a Node
	// owns (pod.IsOwnedByNode: it takes it for a static Pod).
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "WarmPool" || s.OwnerReferences[0].UID != "pool-uid" ||
		s.OwnerReferences[0].APIVersion != v1alpha1.GroupVersion.String() {
		t.Errorf("owner %v, want the WarmPool", s.OwnerReferences)
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
	if got := Seat(withClaim, node, SeatSpec{Namespace: "lifeboat-system"}).Spec.NodeSelector; !reflect.DeepEqual(got, map[string]string{"kubernetes.io/os": "linux", v1alpha1.LabelZone: "us-east-1b"}) {
		t.Errorf("node selector with a claim %v, want the Pod's and the lifeboat's zone", got)
	}
	if len(withClaim.Spec.NodeSelector) != 1 {
		t.Errorf("the Pod's node selector was changed: %v", withClaim.Spec.NodeSelector)
	}
	if got := Seat(p, node, SeatSpec{Namespace: "lifeboat-system"}).Spec.NodeSelector; len(got) != 1 {
		t.Errorf("node selector without a claim %v, want the Pod's only", got)
	}
	if v := Seat(p, node, SeatSpec{Namespace: "lifeboat-system"}).Spec.Volumes; len(v) != 0 {
		t.Errorf("volumes %v without PrePullImages, want none", v)
	}
	if v := Seat(p, node, SeatSpec{Namespace: "lifeboat-system", PrePullImages: true}).Spec.Volumes; len(v) != 1 || v[0].Image == nil || v[0].Image.Reference != p.Spec.Containers[0].Image {
		t.Errorf("volumes %+v with PrePullImages, want one image volume of the Pod's image", v)
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
	placedOn := func(s *corev1.Pod, node string) *corev1.Pod { s.Spec.NodeName = node; return s }
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
		wantAdopt  []string
	}{
		"none yet: a seat per Pod to evict, not for surging or finishing Pods": {
			wantCreate: []string{"app/db-0", "app/db-1"}},
		"one there": {existing: []*corev1.Pod{seat("db-0", "lb-1")}, wantCreate: []string{"app/db-1"}},
		"the evicted Pod keeps its seat through its grace period": {existing: []*corev1.Pod{seat("db-0", "lb-1"), seat("db-1", "lb-1"), seat("db-2", "lb-1")}},
		"a Pod gone from the lifeboat frees its seat": {existing: []*corev1.Pod{seat("db-0", "lb-1"), seat("db-1", "lb-1"), seat("db-7", "lb-1")},
			wantDelete: []string{SeatName("app", "db-7")}},
		"a seat on a node going away is replaced": {existing: []*corev1.Pod{placedOn(seat("db-0", "lb-1"), "spot-dying"), seat("db-1", "lb-1")},
			wantDelete: []string{SeatName("app", "db-0")}},
		"a seat on a usable node stays":           {existing: []*corev1.Pod{placedOn(seat("db-0", "lb-1"), "spot-7"), seat("db-1", "lb-1")}},
		"another lifeboat's seats are left alone": {existing: []*corev1.Pod{seat("db-0", "lb-1"), seat("db-1", "lb-1"), seat("db-9", "lb-2")}},
		"a seat made at the hold on the interrupted node is adopted, not made again": {
			existing: []*corev1.Pod{placedOn(seat("db-0", "spot-interrupted"), "spot-7"), seat("db-1", "lb-1")}, wantAdopt: []string{SeatName("app", "db-0")}},
		"an adopted seat on a node going away is replaced": {
			existing:   []*corev1.Pod{placedOn(seat("db-0", "spot-interrupted"), "spot-dying"), seat("db-1", "lb-1")},
			wantDelete: []string{SeatName("app", "db-0")}},
	} {
		t.Run(name, func(t *testing.T) {
			plan := PlanSeats(node, groups, tc.existing, map[string]bool{"spot-7": true, "spot-dying": false}, SeatSpec{Namespace: "lifeboat-system"})
			if got := names(plan.Create); !reflect.DeepEqual(got, tc.wantCreate) {
				t.Errorf("create %v, want %v", got, tc.wantCreate)
			}
			if !reflect.DeepEqual(plan.Delete, tc.wantDelete) {
				t.Errorf("delete %v, want %v", plan.Delete, tc.wantDelete)
			}
			var adopted []string
			for _, a := range plan.Adopt {
				adopted = append(adopted, a.Name)
				if a.Annotations[v1alpha1.AnnotationSeatNode] != "lb-1" {
					t.Errorf("adopted seat %s names %q, want lb-1", a.Name, a.Annotations[v1alpha1.AnnotationSeatNode])
				}
			}
			if !reflect.DeepEqual(adopted, tc.wantAdopt) {
				t.Errorf("adopt %v, want %v", adopted, tc.wantAdopt)
			}
		})
	}
	if plan := PlanSeats(node, nil, []*corev1.Pod{seat("db-0", "lb-1")}, nil, SeatSpec{Namespace: "lifeboat-system"}); !reflect.DeepEqual(plan.Delete, []string{SeatName("app", "db-0")}) {
		t.Errorf("an emptied lifeboat keeps seats %v", plan.Delete)
	}
}

// TestSeatsThroughTheHandoff: an active lifeboat with a StatefulSet Pod gets its seat; at the
// handoff the lifeboat records where the seat is, then evicts the Pod; the seat goes once the
// Pod is gone; an emptied lifeboat keeps none.
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
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok && obj.GetName() == "lb-1" {
				if data, _ := patch.Data(obj); strings.Contains(string(data), v1alpha1.AnnotationSeats) {
					order = append(order, "record seats")
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}, pool, node, stsPod("db-0"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-7", Labels: map[string]string{corev1.LabelHostname: "ip-10-0-7-7"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
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
	// The default scheduler places the seat on an ordinary node, whose kubelet pulls the Pod's
	// images (the seat's image volumes) and starts it.
	placeSeat(t, c, seats()[0], "spot-7", true)
	clk.Step(time.Minute)
	reconcileLB(t, ctrl) // cordons: the handoff starts
	reconcileLB(t, ctrl) // drains: records the seat's node, no eviction in the pass that writes it
	if want := []string{"record seats"}; !reflect.DeepEqual(order, want) {
		t.Errorf("writes %v, want %v (the webhook reads the record: it is written before the eviction's pass)", order, want)
	}
	reconcileLB(t, ctrl) // the pass that sees the record (the Node's update): evicts db-0 (here: gone at once)
	if want := []string{"record seats", "evict db-0"}; !reflect.DeepEqual(order, want) {
		t.Errorf("writes %v, want %v (the seat stays until the Pod is gone)", order, want)
	}
	lb := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "lb-1"}, lb); err != nil {
		t.Fatal(err)
	}
	if rec, err := policy.ParseSeatRecord(lb.Annotations[v1alpha1.AnnotationSeats]); err != nil || rec.Host("app/db-0", clk.Now()) != "ip-10-0-7-7" {
		t.Errorf("seat record %q (%v), want app/db-0 on the seat node's hostname", lb.Annotations[v1alpha1.AnnotationSeats], err)
	}
	reconcileLB(t, ctrl) // the Pod is gone: its seat goes, its replacement takes the room
	if want := []string{"record seats", "evict db-0", "delete seat"}; !reflect.DeepEqual(order, want) {
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

func TestPrePullVolumes(t *testing.T) {
	img := func(refs ...string) []corev1.Volume {
		var out []corev1.Volume
		for i, r := range refs {
			out = append(out, corev1.Volume{Name: fmt.Sprintf("prepull-%d", i), VolumeSource: corev1.VolumeSource{
				Image: &corev1.ImageVolumeSource{Reference: r, PullPolicy: corev1.PullIfNotPresent}}})
		}
		return out
	}
	cases := []struct {
		name string
		spec corev1.PodSpec
		want []corev1.Volume
	}{
		{"one container", corev1.PodSpec{Containers: []corev1.Container{{Image: "app:1"}}}, img("app:1")},
		{"init first, each image once", corev1.PodSpec{
			InitContainers: []corev1.Container{{Image: "migrate:1"}},
			Containers:     []corev1.Container{{Image: "app:1"}, {Image: "migrate:1"}, {Image: "proxy:2"}}},
			img("migrate:1", "app:1", "proxy:2")},
		{"pull secrets: a seat could not use them", corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
			Containers: []corev1.Container{{Image: "private/app:1"}}}, nil},
		{"Windows: no image volumes", corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Windows}, Containers: []corev1.Container{{Image: "app:1"}}}, nil},
		{"no image", corev1.PodSpec{Containers: []corev1.Container{{}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PrePullVolumes(&corev1.Pod{Spec: tc.spec}); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PrePullVolumes = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSeatHosts(t *testing.T) {
	seat := func(pod, lifeboat, on string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lifeboat-system", Name: SeatName("app", pod),
			Annotations: map[string]string{v1alpha1.AnnotationSeatNode: lifeboat}}, Spec: corev1.PodSpec{NodeName: on}}
	}
	going := stsPod("db-3")
	going.DeletionTimestamp = &metav1.Time{Time: hpaNow}
	groups := []Group{
		{Kind: KindEvict, Pods: []*corev1.Pod{stsPod("db-0"), stsPod("db-1"), stsPod("db-2"), going}},
		{Kind: KindWait, Pods: []*corev1.Pod{stsPod("job-0")}},
	}
	seats := []*corev1.Pod{
		seat("db-0", "lb-1", "spot-7"), // placed
		seat("db-1", "lb-1", ""),       // not placed yet
		seat("db-2", "lb-2", "spot-8"), // another lifeboat's
		seat("db-3", "lb-1", "spot-7"), // its Pod is going already
		seat("job-0", "lb-1", "spot-7"),
	}
	got := SeatHosts("lb-1", groups, seats, map[string]string{"spot-7": "ip-10-0-7-7"})
	if want := map[string]string{"app/db-0": "ip-10-0-7-7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SeatHosts = %v, want %v", got, want)
	}
	if got := SeatHosts("lb-1", groups, seats, nil); len(got) != 0 {
		t.Errorf("no usable seat node: %v, want nothing recorded", got)
	}
}

func TestSeatAllowsEviction(t *testing.T) {
	pending := &corev1.Pod{}
	pulling := pending.DeepCopy()
	pulling.Spec.NodeName = "spot-7"
	placed := pulling.DeepCopy()
	placed.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	deleting := placed.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: hpaNow}
	for _, tc := range []struct {
		name                        string
		seat                        *corev1.Pod
		usable, recorded, contested bool
		draining                    time.Duration
		want                        bool
	}{
		{"seat placed on a usable node, Ready, recorded", placed, true, true, false, 0, true},
		{"seat Ready but its host recorded only in this pass: the webhook may not see it yet", placed, true, false, false, 0, false},
		{"seat placed, its node still pulling the Pod's images: the Pod serves on the lifeboat meanwhile", pulling, true, true, false, 0, false},
		{"seat still pulling while the lifeboat drains", pulling, true, true, false, time.Minute, false},
		{"seat still pulling when the drain has waited SeatWait", pulling, true, true, false, SeatWait, true},
		{"seat waiting for room: the Pod serves on the lifeboat meanwhile", pending, false, false, false, time.Minute, false},
		{"seat on a node going away: it is being replaced", placed, false, true, false, time.Minute, false},
		{"seat being replaced", deleting, true, true, false, time.Minute, false},
		{"no seat yet", nil, false, false, false, time.Minute, false},
		{"a waiting Pod would take the seat's room first", placed, true, true, true, time.Minute, false},
		{"the drain waited SeatWait: evict as without seats", pending, false, false, false, SeatWait, true},
		{"the drain waited SeatWait, no seat at all", nil, false, false, true, SeatWait, true},
	} {
		if got := SeatAllowsEviction(tc.seat, tc.usable, tc.recorded, tc.contested, tc.draining); got != tc.want {
			t.Errorf("%s: SeatAllowsEviction = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContested(t *testing.T) {
	withPrio := func(name string, prio int32) *corev1.Pod {
		p := stsPod(name)
		p.UID = types.UID(name)
		p.Spec.Priority = &prio
		return p
	}
	db := withPrio("db-0", 1000)
	seatOf := func(p *corev1.Pod, node string) *corev1.Pod {
		s := Seat(p, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1"}}, SeatSpec{Namespace: "lifeboat-system"})
		s.Spec.NodeName = node
		return s
	}
	goneSeat := seatOf(stsPod("db-2"), "")
	goneSeat.DeletionTimestamp = &metav1.Time{Time: hpaNow}
	for _, tc := range []struct {
		name    string
		waiting []*corev1.Pod
		seats   []*corev1.Pod
		want    bool
	}{
		{"nothing waiting", nil, nil, false},
		{"a higher tier's surge Pod waits", []*corev1.Pod{withPrio("web-x", 10000)}, nil, true},
		{"a Pod of the same priority waits", []*corev1.Pod{withPrio("db-1", 1000)}, nil, true},
		{"only lower priorities wait: the replacement goes first", []*corev1.Pod{withPrio("job-a", 0)}, nil, false},
		{"the Pod itself", []*corev1.Pod{db}, nil, false},
		{"every other seat placed", nil, []*corev1.Pod{seatOf(db, "spot-7"), seatOf(stsPod("db-1"), "spot-8")}, false},
		{"another seat waits for room: the default scheduler may give it the freed room first", nil, []*corev1.Pod{seatOf(db, "spot-7"), seatOf(stsPod("db-1"), "")}, true},
		{"the Pod's own seat unplaced is not a contender", nil, []*corev1.Pod{seatOf(db, "")}, false},
		{"a seat being deleted", nil, []*corev1.Pod{goneSeat}, false},
	} {
		if got := Contested(db, tc.waiting, tc.seats); got != tc.want {
			t.Errorf("%s: Contested = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSeatNodeUsable(t *testing.T) {
	ready := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-7"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	with := func(f func(n *corev1.Node)) *corev1.Node { n := ready.DeepCopy(); f(n); return n }
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"Ready", ready, true},
		{"gone", nil, false},
		{"not Ready", with(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }), false},
		{"cordoned", with(func(n *corev1.Node) { n.Spec.Unschedulable = true }), false},
		{"being deleted", with(func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: hpaNow} }), false},
		{"Karpenter disrupts it", with(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}
		}), false},
		{"interrupted", with(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule}}
		}), false},
		{"another taint", with(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
		}), true},
	} {
		if got := SeatNodeUsable(tc.node); got != tc.want {
			t.Errorf("%s: SeatNodeUsable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProtectedPodGoneWakesItsNode(t *testing.T) {
	running := stsPod("db-0")
	failed := running.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	unprotected := running.DeepCopy()
	delete(unprotected.Labels, v1alpha1.LabelProtected)
	unbound := running.DeepCopy()
	unbound.Spec.NodeName = ""
	if !protectedPodGone.Delete(event.DeleteEvent{Object: running}) {
		t.Errorf("a protected Pod's deletion does not wake its node")
	}
	if !protectedPodGone.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: failed}) {
		t.Errorf("a protected Pod turning terminal does not wake its node")
	}
	if protectedPodGone.Update(event.UpdateEvent{ObjectOld: failed, ObjectNew: failed}) || protectedPodGone.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: running}) {
		t.Errorf("an update that is not the turn to terminal wakes the node")
	}
	if protectedPodGone.Delete(event.DeleteEvent{Object: unprotected}) || protectedPodGone.Delete(event.DeleteEvent{Object: unbound}) || protectedPodGone.Create(event.CreateEvent{Object: running}) {
		t.Errorf("an unprotected or unbound Pod, or a creation, wakes a node")
	}
	if got := podNode(context.Background(), running); len(got) != 1 || got[0].Name != "lb-1" {
		t.Errorf("podNode = %v, want lb-1", got)
	}
	if got := podNode(context.Background(), unbound); len(got) != 0 {
		t.Errorf("podNode of an unbound Pod = %v", got)
	}
}

func TestSeatsFirst(t *testing.T) {
	web := Group{Kind: KindDeployment, Namespace: "app", Name: "web", Pods: []*corev1.Pod{apiPod("web-1", "lb-1")}}
	going := stsPod("db-0")
	going.DeletionTimestamp = &metav1.Time{Time: hpaNow}
	for _, tc := range []struct {
		name      string
		groups    []Group
		elsewhere bool
		draining  time.Duration
		want      bool
	}{
		{"a StatefulSet Pod still here: the surge waits", []Group{web, {Kind: KindEvict, Pods: []*corev1.Pod{stsPod("db-0")}}}, false, time.Minute, true},
		{"it is evicted already: surge", []Group{web, {Kind: KindEvict, Pods: []*corev1.Pod{going}}}, false, time.Minute, false},
		{"only Deployments and Jobs", []Group{web, {Kind: KindWait, Pods: []*corev1.Pod{jobPod("batch-a")}}}, false, 0, false},
		{"a Pod on another lifeboat still needs its seat: the surge waits", []Group{web}, true, time.Minute, true},
		{"SeatWait passed", []Group{web, {Kind: KindEvict, Pods: []*corev1.Pod{stsPod("db-0")}}}, true, SeatWait, false},
	} {
		if got := SeatsFirst(tc.groups, tc.elsewhere, tc.draining); got != tc.want {
			t.Errorf("%s: SeatsFirst = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMoveToSeatsBeforeTheHandoff: while the lifeboat is still active, a StatefulSet Pod leaves
// for its seat as soon as the seat holds usable room — not while the seat waits for room, a
// protected Pod of its priority or more waits to be scheduled, or a bridge hold is active.
func TestMoveToSeatsBeforeTheHandoff(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	for _, tc := range []struct {
		name    string
		extra   []client.Object
		pulling bool
		moves   bool
	}{
		{name: "seat placed and Ready", moves: true},
		{name: "seat placed, its node still pulling the Pod's images", pulling: true},
		{name: "a surge Pod of a higher tier waits to be scheduled", extra: []client.Object{
			buildtest.Pod("app", "web-new", buildtest.Protected(v1alpha1.TierStateless), buildtest.Phase(corev1.PodPending), buildtest.PodFunc(func(p *corev1.Pod) {
				p.Spec.Priority = ptr.To[int32](10000)
			}))}},
		{name: "a bridge hold is active", extra: []client.Object{
			buildtest.Pod("app", "held", buildtest.OnNode("spot-1"), buildtest.Protected(v1alpha1.TierStateless), buildtest.Running(), buildtest.PodFunc(func(p *corev1.Pod) {
				p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: nodeutil.FormatTime(hpaNow.Add(time.Minute))}
			}))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
				Spec: v1alpha1.WarmPoolSpec{ActiveDuration: &metav1.Duration{Duration: 5 * time.Minute}}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
				Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)},
				Annotations: map[string]string{v1alpha1.AnnotationActivatedAt: nodeutil.FormatTime(hpaNow)}}}
			var evicted []string
			objs := append([]client.Object{pool, node, stsPod("db-0"),
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-7", Labels: map[string]string{corev1.LabelHostname: "ip-10-0-7-7"}}, Status: ready}}, tc.extra...)
			c := fakeClient(interceptor.Funcs{
				SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
					if sub == "eviction" {
						evicted = append(evicted, obj.GetName())
						return nil
					}
					return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
				},
			}, objs...)
			rec := events.NewFakeRecorder(100)
			ctrl := New(c, clocktesting.NewFakeClock(hpaNow.Add(10*time.Second)), rec)

			reconcileLB(t, ctrl) // the seat is made; it has no room yet
			if len(evicted) != 0 {
				t.Fatalf("evicted %v while its seat had no room", evicted)
			}
			list := &corev1.PodList{}
			if err := c.List(context.Background(), list, client.InNamespace("lifeboat-system"), client.MatchingLabels{v1alpha1.LabelSeat: "true"}); err != nil || len(list.Items) != 1 {
				t.Fatalf("seats %v, %v: want one", list.Items, err)
			}
			placeSeat(t, c, list.Items[0], "spot-7", !tc.pulling)
			reconcileLB(t, ctrl) // records where the seat is, if it may be moved to
			if len(evicted) != 0 {
				t.Fatalf("evicted %v in the pass that recorded the seat (the webhook may not see the record yet)", evicted)
			}
			reconcileLB(t, ctrl) // the pass that sees the record
			if moved := len(evicted) == 1 && evicted[0] == "db-0"; moved != tc.moves {
				t.Fatalf("evicted %v, want a move to the seat: %v", evicted, tc.moves)
			}
			if !tc.moves {
				return
			}
			select {
			case ev := <-rec.Events:
				if !strings.Contains(ev, v1alpha1.EventSeatMove) || !strings.Contains(ev, "spot-7") {
					t.Errorf("event %q, want %s naming the seat's node", ev, v1alpha1.EventSeatMove)
				}
			default:
				t.Errorf("no %s event", v1alpha1.EventSeatMove)
			}
			lb := &corev1.Node{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "lb-1"}, lb); err != nil {
				t.Fatal(err)
			}
			if r, _ := policy.ParseSeatRecord(lb.Annotations[v1alpha1.AnnotationSeats]); r.Host("app/db-0", hpaNow.Add(10*time.Second)) != "ip-10-0-7-7" {
				t.Errorf("seat record %q, want app/db-0 on ip-10-0-7-7 before the move", lb.Annotations[v1alpha1.AnnotationSeats])
			}
			if lb.Labels[v1alpha1.LabelState] != string(v1alpha1.NodeStateActive) || lb.Spec.Unschedulable {
				t.Errorf("the lifeboat was handed off (state %s, cordoned %v): an early move is not a handoff", lb.Labels[v1alpha1.LabelState], lb.Spec.Unschedulable)
			}
		})
	}
}

// TestSeatsOfAGoneLifeboatAreDeleted: the WarmPool owns the seats (not the Node, which
// Karpenter would take for a static Pod's owner), so the handoff deletes a lifeboat's seats
// when the lifeboat is gone or leaves the active and draining states; another lifeboat's stay.
// Every seat wakes its lifeboat at creation — the informer's first list at a start included.
func TestSeatsOfAGoneLifeboatAreDeleted(t *testing.T) {
	seat := func(name, lifeboat string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lifeboat-system",
			Labels:      map[string]string{v1alpha1.LabelSeat: "true"},
			Annotations: map[string]string{v1alpha1.AnnotationSeatNode: lifeboat}}}
	}
	standby := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-2",
		Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}}}
	// An interrupted node still there: the seats made at its holds wait for their lifeboats.
	interrupted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1",
		Annotations: map[string]string{v1alpha1.AnnotationResumeDecision: "resumed"}}}
	// db-0 moved on to active lifeboat lb-4: its seat, made at the hold on spot-1, waits for
	// lb-4 to adopt it even once spot-1 is gone (Karpenter deletes a drained node at once).
	moving := seat("s-moving", "spot-1")
	moving.Annotations[v1alpha1.AnnotationSeatFor] = "app/db-0"
	onLB4 := stsPod("db-0")
	onLB4.Spec.NodeName = "lb-4"
	lb4 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-4",
		Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)}}}
	c := fakeClient(interceptor.Funcs{}, standby, interrupted, seat("s-gone", "lb-1"), seat("s-standby", "lb-2"), seat("s-other", "lb-3"),
		seat("s-held", "spot-1"), moving, onLB4, lb4)
	ctrl := New(c, clocktesting.NewFakeClock(hpaNow), events.NewFakeRecorder(10))
	for _, node := range []string{"lb-1", "lb-2", "spot-1"} {
		if _, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: node}}); err != nil {
			t.Fatalf("reconcile %s: %v", node, err)
		}
	}
	list := &corev1.PodList{}
	if err := c.List(context.Background(), list, client.InNamespace("lifeboat-system")); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range list.Items {
		left = append(left, p.Name)
	}
	if slices.Sort(left); !reflect.DeepEqual(left, []string{"s-held", "s-moving", "s-other"}) {
		t.Errorf("seats left %v, want s-held (its interrupted node is there) and s-other (lb-3 was not reconciled)", left)
	}
	// The interrupted node goes (reclaimed): the seat no lifeboat adopted goes with it.
	if !interruptedNodeDeleted.Delete(event.DeleteEvent{Object: interrupted}) || interruptedNodeDeleted.Delete(event.DeleteEvent{Object: standby}) {
		t.Errorf("interruptedNodeDeleted passes a decided node's deletion only, never a lifeboat's")
	}
	if err := c.Delete(context.Background(), interrupted); err != nil {
		t.Fatal(err)
	}
	res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "lifeboat-system", Name: "s-held"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the seat of a gone interrupted node: %v, want it deleted", err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "lifeboat-system", Name: "s-moving"}, &corev1.Pod{}); err != nil || res.RequeueAfter == 0 {
		t.Errorf("the seat of a Pod on an active lifeboat: %v, requeue %v; want it kept for the lifeboat, and a look again", err, res.RequeueAfter)
	}
	if got := SeatNode(context.Background(), seat("s", "lb-9")); len(got) != 1 || got[0].Name != "lb-9" {
		t.Errorf("SeatNode = %v, want lb-9", got)
	}
	notSeat := stsPod("db-0")
	if !seatCreated.Create(event.CreateEvent{Object: seat("s", "lb-9")}) || seatCreated.Create(event.CreateEvent{Object: notSeat}) ||
		seatCreated.Update(event.UpdateEvent{ObjectOld: seat("s", "lb-9"), ObjectNew: seat("s", "lb-9")}) {
		t.Errorf("seatCreated passes only a seat's creation")
	}
}

// TestSeatTurnedReady: only a seat's Ready turning true wakes the node recorded on it.
func TestSeatTurnedReady(t *testing.T) {
	ready := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return p
	}
	pulling := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "lifeboat-system",
		Labels: map[string]string{v1alpha1.LabelSeat: "true"}, Annotations: map[string]string{v1alpha1.AnnotationSeatNode: "lb-9"}}}
	app := stsPod("db-0")
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"a seat turns Ready", pulling, ready(pulling), true},
		{"a seat still pulling", pulling, pulling, false},
		{"a seat already Ready", ready(pulling), ready(pulling), false},
		{"a seat no longer Ready", ready(pulling), pulling, false},
		{"not a seat", app, ready(app), false},
	} {
		if got := SeatTurnedReady.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: SeatTurnedReady = %v, want %v", tc.name, got, tc.want)
		}
	}
	if SeatTurnedReady.Create(event.CreateEvent{Object: ready(pulling)}) || SeatTurnedReady.Delete(event.DeleteEvent{Object: ready(pulling)}) {
		t.Error("SeatTurnedReady passes a create or delete")
	}
}

// TestLifeboatAdoptsTheSeatMadeAtTheHold: the bridge made db-0's seat at the hold, on the
// interrupted node; once db-0 runs on the lifeboat, the lifeboat's pass adopts it (its
// seat-node annotation, the WarmPool as owner) instead of making a second one.
func TestLifeboatAdoptsTheSeatMadeAtTheHold(t *testing.T) {
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", UID: "pool-uid"},
		Spec: v1alpha1.WarmPoolSpec{ActiveDuration: &metav1.Duration{Duration: time.Minute}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)},
		Annotations: map[string]string{v1alpha1.AnnotationActivatedAt: nodeutil.FormatTime(hpaNow)}}}
	interrupted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1"}}
	held := Seat(stsPod("db-0"), interrupted, SeatSpec{Namespace: "lifeboat-system"})
	held.Spec.NodeName = "spot-7"
	spot7 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-7"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	c := fakeClient(interceptor.Funcs{}, pool, node, stsPod("db-0"), held, spot7)
	ctrl := New(c, clocktesting.NewFakeClock(hpaNow.Add(10*time.Second)), events.NewFakeRecorder(100))
	reconcileLB(t, ctrl)
	list := &corev1.PodList{}
	if err := c.List(context.Background(), list, client.InNamespace("lifeboat-system")); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("seats %d, want the one made at the hold", len(list.Items))
	}
	s := list.Items[0]
	if s.Annotations[v1alpha1.AnnotationSeatNode] != "lb-1" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "pool-uid" || s.Spec.NodeName != "spot-7" {
		t.Errorf("seat %s: seat-node %q owners %v node %q, want lb-1's, the pool's, still on spot-7", s.Name, s.Annotations[v1alpha1.AnnotationSeatNode], s.OwnerReferences, s.Spec.NodeName)
	}
}

func TestSeatAwaitsAdoption(t *testing.T) {
	now := hpaNow
	lifeboat := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateActive)}}}
	standby := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-2",
		Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}}}
	karpenter := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-7"}}
	pending := func(age time.Duration) *corev1.Pod {
		p := stsPod("db-0")
		p.Spec.NodeName = ""
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		return p
	}
	deleting := stsPod("db-0")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	failed := stsPod("db-0")
	failed.Status.Phase = corev1.PodFailed
	for name, tc := range map[string]struct {
		p    *corev1.Pod
		at   *corev1.Node
		want bool
	}{
		"on an active lifeboat: it adopts the seat": {p: stsPod("db-0"), at: lifeboat, want: true},
		"re-created a moment ago, not bound yet":    {p: pending(5 * time.Second), want: true},
		"pending past SeatAdoptWait":                {p: pending(SeatAdoptWait)},
		"gone":                                      {},
		"deleting":                                  {p: deleting, at: lifeboat},
		"terminal":                                  {p: failed, at: lifeboat},
		"on Karpenter's capacity: no lifeboat to adopt": {p: stsPod("db-0"), at: karpenter},
		"on a lifeboat not serving":                     {p: stsPod("db-0"), at: standby},
		"bound to a node gone":                          {p: stsPod("db-0")},
	} {
		if got := SeatAwaitsAdoption(tc.p, tc.at, now); got != tc.want {
			t.Errorf("%s: SeatAwaitsAdoption = %v, want %v", name, got, tc.want)
		}
	}
}

// placeSeat plays the default scheduler binding seat to node and, when ready, the kubelet
// having pulled the seat's images and started it.
func placeSeat(t *testing.T, c client.Client, seat corev1.Pod, node string, ready bool) {
	t.Helper()
	seat.Spec.NodeName = node
	if err := c.Update(context.Background(), &seat); err != nil {
		t.Fatal(err)
	}
	if !ready {
		return
	}
	seat.Status.Phase = corev1.PodRunning
	seat.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(context.Background(), &seat); err != nil {
		t.Fatal(err)
	}
}

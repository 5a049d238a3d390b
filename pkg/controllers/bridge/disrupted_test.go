package bridge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func TestStaleDisruptions(t *testing.T) {
	evictedAt := ctrlNow
	pod := func(uid string, created time.Time, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created)}}
		if deleting {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(evictedAt))
		}
		return p
	}
	pdb := &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{
		DisruptedPods: map[string]metav1.Time{"db-0": metav1.NewTime(evictedAt)}}}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		evicted map[string]types.UID
		want    []string
	}{
		"re-created after the eviction":               {pod: pod("new", evictedAt.Add(time.Second), false), want: []string{"db-0"}},
		"re-created in the same second, we evicted":   {pod: pod("new", evictedAt, false), evicted: map[string]types.UID{"db-0": "old"}, want: []string{"db-0"}},
		"the evicted Pod itself, not terminating yet": {pod: pod("old", evictedAt.Add(-time.Hour), false), evicted: map[string]types.UID{"db-0": "old"}},
		"the evicted Pod, unknown to this process":    {pod: pod("old", evictedAt.Add(-time.Hour), false)},
		"same second, not evicted by us":              {pod: pod("new", evictedAt, false)},
		"terminating: the controller drops it":        {pod: pod("old", evictedAt.Add(-time.Hour), true)},
		"no Pod of that name":                         {},
	} {
		t.Run(name, func(t *testing.T) {
			pods := map[string]*corev1.Pod{}
			if tc.pod != nil {
				pods["db-0"] = tc.pod
			}
			if got := StaleDisruptions(pdb, pods, tc.evicted); !slices.Equal(got, tc.want) {
				t.Errorf("StaleDisruptions = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRefusedMoveClearsStaleDisruption: the PodDisruptionBudget still lists db-0, which the
// bridge moved and the StatefulSet controller re-created (Ready, same name, new UID); the
// refused move of db-1 removes that entry (with an optimistic lock) and keeps db-1's hold, so
// the next pass can move it. An entry of a Pod still around is kept.
func TestRefusedMoveClearsStaleDisruption(t *testing.T) {
	held := nodeutil.FormatTime(HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions()))
	labels := map[string]string{"app": "db", v1alpha1.LabelProtected: "true"}
	db := func(name, node string, created time.Time) *corev1.Pod {
		p := appPod(name, node, true, true)
		p.Labels = labels
		p.UID = types.UID(name + "-" + node)
		p.CreationTimestamp = metav1.NewTime(created)
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
		if node == "spot-1" {
			p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: held}
		}
		return p
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	movedAt := ctrlNow.Add(-5 * time.Second)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptedPods: map[string]metav1.Time{
			"db-0": metav1.NewTime(movedAt),                   // moved, re-created on lb-1 since
			"db-2": metav1.NewTime(movedAt.Add(-time.Second)), // evicted by someone, still there
		}}}
	refuse := interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
		if sub == "eviction" {
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
	}}
	h := newHarnessWith(t, refuse, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"), sts, pdb,
		db("db-0", "lb-1", movedAt.Add(2*time.Second)), db("db-1", "spot-1", ctrlNow.Add(-time.Hour)), db("db-2", "spot-2", ctrlNow.Add(-time.Hour)))
	h.reconcileNode(t, "spot-1")

	got := &policyv1.PodDisruptionBudget{}
	if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(pdb), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Status.DisruptedPods["db-0"]; ok {
		t.Errorf("disruptedPods %v: the stale db-0 entry is still there", got.Status.DisruptedPods)
	}
	if _, ok := got.Status.DisruptedPods["db-2"]; !ok {
		t.Errorf("disruptedPods %v: the db-2 entry (its evicted Pod may still be there) was removed", got.Status.DisruptedPods)
	}
	if hold := h.hold(t, "db-1"); hold != held {
		t.Errorf("db-1 hold %q after the refused move, want %q", hold, held)
	}
}

// TestMoveConflictCountsAsMoved: the Eviction API can delete the Pod and then answer 409 on
// the UID precondition (it retried and found the Pod the StatefulSet re-created under the same
// name). That is a move: recorded as one, and the evicted UID is remembered so that the
// budget's stale entry for the name can be removed on the next refusal.
func TestMoveConflictCountsAsMoved(t *testing.T) {
	held := nodeutil.FormatTime(HoldDeadline(ctrlNotice, 30*time.Second, DefaultOptions()))
	p := appPod("db-0", "spot-1", true, true)
	p.UID = "old"
	p.Labels = map[string]string{"app": "db", v1alpha1.LabelProtected: "true"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: ptr.To(true)}}
	p.Annotations = map[string]string{v1alpha1.AnnotationEvictionHold: held}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db", UID: "sts"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	conflict := interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
		if sub == "eviction" {
			return apierrors.NewConflict(corev1.Resource("pods"), obj.GetName(), fmt.Errorf("the UID in the precondition (old) does not match the UID in record (new)"))
		}
		return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
	}}
	h := newHarnessWith(t, conflict, interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"), sts, p)
	h.reconcileNode(t, "spot-1")
	if evs := strings.Join(h.events(), "\n"); !strings.Contains(evs, v1alpha1.EventBridgeMove) {
		t.Errorf("events %q: want a %s event for the move that answered 409", evs, v1alpha1.EventBridgeMove)
	}
	if got := h.ctrl.evictedUIDs("app")["db-0"]; got != "old" {
		t.Errorf("evicted UID of db-0 = %q, want %q", got, "old")
	}
}

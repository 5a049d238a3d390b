package handoff

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func jobPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "batch", UID: "job", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "lb-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// jobFixture: a lifeboat node draining since hpaNow with two Job Pods; evictions are refused
// (429, as a PDB would) when refuse is set. It returns the evictions attempted.
func jobFixture(t *testing.T, refuse bool) (*Controller, client.WithWatch, *clocktesting.FakeClock, *[]string) {
	t.Helper()
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.WarmPoolSpec{HandoffDeadline: &metav1.Duration{Duration: 10 * time.Minute}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1",
		Labels:      map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelState: string(v1alpha1.NodeStateDraining)},
		Annotations: map[string]string{v1alpha1.AnnotationDrainingSince: nodeutil.FormatTime(hpaNow)}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "batch", UID: "job"}}
	var evictions []string
	c := fakeClient(interceptor.Funcs{
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" {
				evictions = append(evictions, obj.GetName())
				if refuse {
					return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
				}
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
	}, pool, node, job, jobPod("batch-a"), jobPod("batch-b"))
	clk := clocktesting.NewFakeClock(hpaNow)
	return New(c, clk, events.NewFakeRecorder(100)), c, clk, &evictions
}

func TestDrainLeavesJobPodsToFinish(t *testing.T) {
	ctrl, c, clk, evictions := jobFixture(t, false)
	clk.Step(9 * time.Minute) // before the 10m deadline
	reconcileLB(t, ctrl)
	if len(*evictions) != 0 {
		t.Fatalf("evicted %v before the deadline; Job Pods must be left to finish", *evictions)
	}
	for _, name := range []string{"batch-a", "batch-b"} {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "app", Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("%s: %v, want it still running", name, err)
		}
	}
	// At the deadline they are evicted (the Eviction API sets DisruptionTarget, which a Job's
	// podFailurePolicy can ignore).
	clk.Step(2 * time.Minute)
	reconcileLB(t, ctrl)
	if len(*evictions) != 2 {
		t.Fatalf("evictions at the deadline = %v, want both Job Pods", *evictions)
	}
}

// A PDB refusing the eviction at the deadline: the Pod is marked DisruptionTarget before it is
// deleted, so a Job does not count it against its backoffLimit.
func TestDeadlineMarksDisruptionBeforeDelete(t *testing.T) {
	ctrl, c, clk, evictions := jobFixture(t, true)
	var marked []string
	// Record the condition at delete time: the fake client removes the object.
	c = interceptor.NewClient(c, interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			p := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), p); err == nil {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue && cond.Reason == ReasonDeadline {
						marked = append(marked, p.Name)
					}
				}
			}
			return cl.Delete(ctx, obj, opts...)
		},
	})
	ctrl.client = c
	clk.Step(11 * time.Minute)
	reconcileLB(t, ctrl)
	if len(*evictions) != 2 {
		t.Fatalf("evictions = %v, want an attempt per Pod first", *evictions)
	}
	if len(marked) != 2 {
		t.Fatalf("Pods deleted with DisruptionTarget = %v, want both", marked)
	}
	list := &corev1.PodList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d Pods left, want none", len(list.Items))
	}
}

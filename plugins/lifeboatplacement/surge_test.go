package lifeboatplacement

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// A Pod of a handoff surge never reaches preemption; other Pods do.
func TestPostFilterSurgeDoesNotPreempt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := []*v1.Node{
		bigNode("ordinary"),
		lifeboatNode("lb-draining", v1alpha1.NodeStateDraining, nil),
		lifeboatNode("lb-active", v1alpha1.NodeStateActive, nil),
	}
	f := newTestFramework(t, nil, nodes, nil)
	surge := func(node string) map[string]string {
		return map[string]string{v1alpha1.AnnotationHandoffSurge: `{"node":"` + node + `","base":12,"surge":3,"readyBefore":12}`}
	}
	for _, rs := range []*appsv1.ReplicaSet{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "surging", Annotations: surge("lb-draining")}},
		// The Deployment controller never removes a copied annotation: a finished surge (its
		// node no longer draining, or gone) must not count.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stale-active", Annotations: surge("lb-active")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stale-gone", Annotations: surge("lb-gone")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "garbled", Annotations: map[string]string{v1alpha1.AnnotationHandoffSurge: "{"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}},
	} {
		if _, err := f.client.AppsV1().ReplicaSets("ns").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		list, err := f.plugin.replicaSets.List(labels.Everything())
		return err == nil && len(list) == 5, nil
	}); err != nil {
		t.Fatal("ReplicaSet informer never saw the ReplicaSets")
	}
	ownedBy := func(p *v1.Pod, rs string) *v1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID("uid-" + p.Name), Controller: ptr.To(true)}}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want fwk.Code
	}{
		{"surge pod", ownedBy(protectedPod("a").Obj(), "surging"), fwk.UnschedulableAndUnresolvable},
		{"surge node active again", ownedBy(protectedPod("b").Obj(), "stale-active"), fwk.Unschedulable},
		{"surge node gone", ownedBy(protectedPod("c").Obj(), "stale-gone"), fwk.Unschedulable},
		{"garbled annotation", ownedBy(protectedPod("d").Obj(), "garbled"), fwk.Unschedulable},
		{"no surge", ownedBy(protectedPod("e").Obj(), "plain"), fwk.Unschedulable},
		{"unknown ReplicaSet", ownedBy(protectedPod("f").Obj(), "missing"), fwk.Unschedulable},
		{"unprotected pod of a surging ReplicaSet", ownedBy(unprotected.DeepCopy(), "surging"), fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A cycle on all nodes (not narrowed): the one that reaches preemption.
			_, s := f.plugin.PostFilter(ctx, framework.NewCycleState(), tc.pod, framework.NewDefaultNodeToStatus())
			if s.Code() != tc.want {
				t.Fatalf("PostFilter = %v (%v), want %v", s.Code(), s.Reasons(), tc.want)
			}
			if tc.want == fwk.UnschedulableAndUnresolvable && s.Reasons()[0] != ErrReasonSurgeNoPreemption {
				t.Errorf("reason %q, want %q", s.Reasons()[0], ErrReasonSurgeNoPreemption)
			}
		})
	}
}

func TestSurgeNodeParsing(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "",
		"{":                    "",
		`{"node":"lb-1"}`:      "lb-1",
		`{"base":3,"surge":1}`: "",
	} {
		if got := surgeNode(in); got != want {
			t.Errorf("surgeNode(%q) = %q, want %q", in, got, want)
		}
	}
}

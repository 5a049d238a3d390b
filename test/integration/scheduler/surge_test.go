package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboatplacement"
)

// TestSurgePodsDoNotPreempt: a handoff surge Pod (its Deployment carries the surge annotation,
// which kube-controller-manager's Deployment controller copies to the ReplicaSet) finds no room
// but a best-effort Pod it could preempt: it stays Pending — its twin on the lifeboat still
// serves — and the best-effort Pod keeps running. Once the lifeboat node is no longer draining
// (the surge is over; the ReplicaSet keeps the stale copy), the same Pod preempts as usual.
func TestSurgePodsDoNotPreempt(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	c := localclustertest.StartT(t, localcluster.Options{ControllerManager: true})
	client := c.Client()
	ctx := context.Background()
	startScheduler(t, c.RESTConfig())

	for name, value := range map[string]int32{"surge-test-low": -100, "surge-test-high": 10000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createNodes(t, client,
		nodeSpec{name: "spot-1", labels: spotLabels("m5.large", "us-east-1a"), cpu: "2"},
		nodeSpec{name: "lb-1", labels: poolLabels(v1alpha1.NodeStateDraining, "m5.xlarge", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}},
	)
	// lb-1 is cordoned, as a draining lifeboat is.
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(t, client, "surge")

	// The best-effort Job Pod on spot-1: 1 of its 2 CPUs.
	victim := makePod(ns, "batch-1", func(p *v1.Pod) {
		p.Spec.NodeName = "spot-1"
		p.Spec.PriorityClassName = "surge-test-low"
		p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1")
	})
	createPods(t, client, victim)

	// web, mid-handoff: one surge replica of 1500m, which fits on spot-1 only by preempting.
	labels := map[string]string{"app": "web", v1alpha1.LabelProtected: "true"}
	tmpl := makePod(ns, "", protected)
	tmpl.Labels = labels
	tmpl.Spec.PriorityClassName = "surge-test-high"
	tmpl.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1500m")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{
			v1alpha1.AnnotationHandoffSurge: `{"node":"lb-1","base":0,"surge":1,"readyBefore":0}`}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	webPod := func(ctx context.Context) (*v1.Pod, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != 1 {
			return nil, fmt.Errorf("web pods: %v (%d)", err, len(pods.Items))
		}
		return &pods.Items[0], nil
	}
	// The scheduler reports it Unschedulable with the surge's reason, and nominates nothing.
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := webPod(ctx)
		if err != nil {
			return false, nil
		}
		pod = p
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse && strings.Contains(cond.Message, lifeboatplacement.ErrReasonSurgeNoPreemption) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the surge Pod never reported the no-preemption reason: %v (status %+v)", err, pod)
	}
	// Several scheduling attempts later (back-off 1 s), still no preemption.
	time.Sleep(5 * time.Second)
	if p, err := webPod(ctx); err != nil || p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Fatalf("surge Pod bound or nominated: %+v %v", p, err)
	}
	b, err := client.CoreV1().Pods(ns).Get(ctx, "batch-1", metav1.GetOptions{})
	if err != nil || b.DeletionTimestamp != nil {
		t.Fatalf("the best-effort Pod was preempted by a surge Pod: %v %v", err, b)
	}

	// The surge is over (lb-1 no longer draining): the stale annotation on the ReplicaSet no
	// longer counts, and the Pod preempts the best-effort Pod as any protected Pod would.
	rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(rss.Items) != 1 || rss.Items[0].Annotations[v1alpha1.AnnotationHandoffSurge] == "" {
		t.Fatalf("the Deployment controller did not copy the surge annotation to the ReplicaSet: %v %+v", err, rss)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelState, v1alpha1.NodeStateActive)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A new Pod of the ReplicaSet (after a surge ends, the Deployment's next Pods come from
	// later evictions or scale-ups): replace the pending one.
	if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := client.CoreV1().Pods(ns).Get(ctx, "batch-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && b.DeletionTimestamp != nil), nil
	})
	if err != nil {
		t.Fatalf("after the surge, the Pod never preempted the best-effort Pod (control case): %v", err)
	}
}

package localcluster_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// TestEvictedJobPodIsReplaced: a deleted Pod on a KWOK node reaches a terminal phase and goes,
// as with a kubelet, so a Job with a podFailurePolicy (which implies podReplacementPolicy
// Failed) replaces an evicted Pod at once instead of waiting for it forever.
func TestEvictedJobPodIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane binaries; run without -short (make test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := localclustertest.StartT(t, localcluster.Options{ControllerManager: true, KWOK: true})
	cs := c.Client()
	if _, err := c.CreateKWOKNode(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "work"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: "default"}, Spec: batchv1.JobSpec{
		BackoffLimit: ptr.To[int32](0), // one counted failure would fail the Job
		PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:          batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
		}}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{localcluster.AnnotationRunFor: "1h"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeName: "worker",
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/work:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}},
	}}
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func() (*corev1.Pod, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=work"})
		if err != nil {
			return nil, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return p, nil
			}
		}
		return nil, nil
	}
	var first *corev1.Pod
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		p, err := running()
		first = p
		return p != nil, err
	}); err != nil {
		t.Fatalf("the Job's Pod never ran: %v\n%s", err, c.LogTails(20))
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: first.Name, Namespace: "default"}}
	if err := cs.CoreV1().Pods("default").EvictV1(ctx, ev); err != nil {
		t.Fatalf("evict: %v", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		p, err := running()
		return p != nil && p.UID != first.UID, err
	}); err != nil {
		j, _ := cs.BatchV1().Jobs("default").Get(context.Background(), "work", metav1.GetOptions{})
		t.Fatalf("no replacement Pod after the eviction: %v; job status %+v", err, j.Status)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, first.Name, metav1.GetOptions{}); err == nil {
		if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods("default").Get(ctx, first.Name, metav1.GetOptions{})
			return err != nil, nil
		}); err != nil {
			t.Errorf("the evicted Pod was never removed")
		}
	}
	j, err := cs.BatchV1().Jobs("default").Get(ctx, "work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 {
		t.Errorf("the eviction counted as a failure: status.failed = %d (the DisruptionTarget rule should ignore it)", j.Status.Failed)
	}
}

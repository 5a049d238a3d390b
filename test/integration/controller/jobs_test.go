package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// TestHandoffLetsJobPodsFinish: two Pods of a real Job (KCM's Job controller, podFailurePolicy
// ignoring disruptions) run on a lifeboat when its handoff starts. Evicting them would restart
// them and — the Job controller counts ignored failures in its re-creation back-off — keep the
// Job without Pods for a growing delay. The handoff cordons the node and leaves them: they
// complete there, the Job succeeds with no failed Pod, and only then the empty node is
// recycled.
func TestHandoffLetsJobPodsFinish(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	boat := e.oneActiveLifeboat(ctx, func(wp *v1alpha1.WarmPool) {
		wp.Spec.HandoffDeadline = &metav1.Duration{Duration: 10 * time.Minute}
	})

	// The Job's Pods run 60 s: the handoff (30 s after activation) starts while they run.
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch"},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2), BackoffLimit: ptr.To[int32](6),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "batch", v1alpha1.LabelProtected: "true"},
					Annotations: map[string]string{localcluster.AnnotationRunFor: "60s"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Tolerations:   []corev1.Toleration{{Key: v1alpha1.TaintLifeboat, Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "work", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
				},
			},
		},
	}
	if err := e.client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	e.waitFor("2 Job Pods Running on the lifeboat", 30*time.Second, func(ctx context.Context) (bool, string) {
		pods := e.jobPods(ctx)
		running := 0
		for _, p := range pods {
			if p.Spec.NodeName == boat && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d Pods, %d Running on %s", len(pods), running, boat)
	})

	// Sample through the handoff: the node draining while both Job Pods still run on it.
	sampleCtx, stop := context.WithCancel(ctx)
	var (
		mu                sync.Mutex
		drainingWithPods  int
		disruptedOrFailed []string
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			n := &corev1.Node{}
			nerr := e.sampler().Get(sampleCtx, client.ObjectKey{Name: boat}, n)
			pods := e.jobPods(sampleCtx)
			mu.Lock()
			running := 0
			for _, p := range pods {
				if p.Spec.NodeName == boat && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() {
					running++
				}
				if p.Status.Phase == corev1.PodFailed || !p.DeletionTimestamp.IsZero() {
					disruptedOrFailed = append(disruptedOrFailed, p.Name)
				}
			}
			if nerr == nil && n.Labels[v1alpha1.LabelState] == string(v1alpha1.NodeStateDraining) && n.Spec.Unschedulable && running == 2 {
				drainingWithPods++
			}
			mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()
	e.waitFor("the Job complete and the lifeboat gone", 150*time.Second, func(ctx context.Context) (bool, string) {
		j := &batchv1.Job{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
			return false, err.Error()
		}
		nodes := e.poolNodes(ctx, poolName)
		serving := len(nodes["active"]) + len(nodes["draining"])
		return j.Status.Succeeded == 2 && serving == 0, fmt.Sprintf("job succeeded %d failed %d active %d; pool active %d draining %d",
			j.Status.Succeeded, j.Status.Failed, j.Status.Active, len(nodes["active"]), len(nodes["draining"]))
	})
	stop()
	<-sampled
	if drainingWithPods == 0 {
		t.Errorf("never saw %s cordoned and draining with both Job Pods still running on it", boat)
	}
	if len(disruptedOrFailed) > 0 {
		t.Errorf("Job Pods evicted, deleted or failed during the handoff: %v", disruptedOrFailed)
	}
	j := &batchv1.Job{}
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 {
		t.Errorf("job status failed = %d, want 0", j.Status.Failed)
	}
	t.Logf("%s drained with both Job Pods running for %d samples; Job succeeded %d, failed %d", boat, drainingWithPods, j.Status.Succeeded, j.Status.Failed)
}

func (e *env) jobPods(ctx context.Context) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := e.sampler().List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "batch"}); err != nil {
		return nil
	}
	return pods.Items
}

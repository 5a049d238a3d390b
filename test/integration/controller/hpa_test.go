package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

func hpaCondition(h *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType) *autoscalingv2.HorizontalPodAutoscalerCondition {
	for i := range h.Status.Conditions {
		if h.Status.Conditions[i].Type == t {
			return &h.Status.Conditions[i]
		}
	}
	return nil
}

// TestHandoffWithHPA: a Deployment scaled by a real HorizontalPodAutoscaler (KCM's HPA
// controller; the harness has no metrics API, so the HPA cannot compute a recommendation and only
// enforces minReplicas/maxReplicas — which is exactly the part that fights a surge) runs at the
// HPA's maxReplicas on a lifeboat node. The handoff surges it above maxReplicas: the controller
// raises the HPA's minReplicas and maxReplicas for the surge (else the HPA scales straight back
// to maxReplicas, deleting the surge Pods before they are Ready), waits for the surge to be Ready
// on the On-Demand node, and restores the HPA. The ready count, sampled every 20 ms, never drops
// below its pre-handoff value; at the end the Deployment has its pre-handoff replicas and the HPA
// its own bounds, and the HPA, reconciling again, leaves it there.
func TestHandoffWithHPA(t *testing.T) {
	// Pods on the replacement node take longer to become Ready than the HPA controller's sync
	// period (15 s, KCM's default), as they do on real fresh capacity (image pulls, readiness
	// probes): the HPA certainly reconciles while the surge is in flight. (It reconciles every
	// sync period only; an update of the HPA object does not make it act sooner.)
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true,
		PodStartDelays: []localcluster.DelayRule{{Selector: map[string]string{"test.lifeboat.dev/slow-start": "true"}, Delay: 20 * time.Second}}})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	od := kwokNode("od-1", map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelInstanceType: "m5.2xlarge", v1alpha1.LabelZone: "us-east-1b", "test.lifeboat.dev/slow-start": "true"}, "8", "aws:///us-east-1b/i-00000000000000b01")
	od.Spec.Unschedulable = true
	if _, err := e.cluster.CreateKWOKNode(ctx, od); err != nil {
		t.Fatal(err)
	}
	boat := e.oneActiveLifeboat(ctx, func(wp *v1alpha1.WarmPool) {
		// Short enough that a handoff stuck behind the HPA ends (by deleting Pods) within the test.
		wp.Spec.HandoffDeadline = &metav1.Duration{Duration: time.Minute}
	})

	// The workload: 2 replicas on the lifeboat, at its HPA's maximum (minReplicas 1).
	dep := lifeboatDeployment("api", 2)
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MinReplicas:    ptr.To[int32](1), MaxReplicas: 2,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}},
		},
	}
	if err := e.client.Create(ctx, hpa); err != nil {
		t.Fatal(err)
	}
	e.waitFor("api 2 Ready on the lifeboat", 30*time.Second, func(ctx context.Context) (bool, string) {
		r, p := e.readyPods(ctx, "api")
		return r == 2 && p == 2, fmt.Sprintf("ready %d, on the pool %d", r, p)
	})
	// The HPA controller has the Deployment in hand: it got its scale (AbleToScale) and, with no
	// metrics API, cannot compute a recommendation (ScalingActive False) — it keeps 2.
	e.waitFor("the HPA controller to reconcile the HPA", 60*time.Second, func(ctx context.Context) (bool, string) {
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(hpa), h); err != nil {
			return false, err.Error()
		}
		able, active := hpaCondition(h, autoscalingv2.AbleToScale), hpaCondition(h, autoscalingv2.ScalingActive)
		ok := able != nil && able.Status == corev1.ConditionTrue && active != nil && active.Status == corev1.ConditionFalse
		return ok, fmt.Sprintf("conditions %+v, current replicas %d", h.Status.Conditions, h.Status.CurrentReplicas)
	})

	// Karpenter's replacement capacity is there now; sample the ready count through the handoff.
	if _, err := e.cluster.Client().CoreV1().Nodes().Patch(ctx, "od-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var (
		mu               sync.Mutex
		minReady         = 1 << 30
		samples          int
		maxMin, maxMax   int32
		sawRaisedHPA     bool
		sawMaxAnnotation bool
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			r, _ := e.readyPods(sampleCtx, "api")
			h := &autoscalingv2.HorizontalPodAutoscaler{}
			herr := e.sampler().Get(sampleCtx, client.ObjectKeyFromObject(hpa), h)
			if sampleCtx.Err() == nil {
				mu.Lock()
				if r >= 0 {
					minReady, samples = min(minReady, r), samples+1
				}
				if herr == nil {
					maxMin, maxMax = max(maxMin, ptr.Deref(h.Spec.MinReplicas, 1)), max(maxMax, h.Spec.MaxReplicas)
					_, raised := h.Annotations[v1alpha1.AnnotationHandoffHPAMin]
					_, maxAnn := h.Annotations[handoff.AnnotationHandoffHPAMax]
					sawRaisedHPA, sawMaxAnnotation = sawRaisedHPA || raised, sawMaxAnnotation || maxAnn
				}
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	e.waitFor("the lifeboat handed off, api moved to od-1", 120*time.Second, func(ctx context.Context) (bool, string) {
		nodes := e.poolNodes(ctx, poolName)
		r, p := e.readyPods(ctx, "api")
		serving := len(nodes["active"]) + len(nodes["draining"])
		d := &appsv1.Deployment{}
		_ = e.client.Get(ctx, client.ObjectKeyFromObject(dep), d)
		return serving == 0 && r == 2 && p == 0, fmt.Sprintf("active %d draining %d, api ready %d (on the pool %d), replicas %d, surge %q",
			len(nodes["active"]), len(nodes["draining"]), r, p, ptr.Deref(d.Spec.Replicas, -1), d.Annotations[v1alpha1.AnnotationHandoffSurge])
	})
	stopSampling()
	<-sampled
	if minReady < 2 {
		t.Fatalf("api's ready replicas dropped to %d during the handoff of %s (pre-handoff 2, %d samples)", minReady, boat, samples)
	}
	t.Logf("ready count never below %d over %d samples; HPA raised to min %d max %d during the surge", minReady, samples, maxMin, maxMax)
	if !sawRaisedHPA || !sawMaxAnnotation || maxMin != 4 || maxMax != 4 {
		t.Errorf("HPA during the surge: raised %v (max annotation %v), highest min %d max %d; want min and max raised to the surged 4", sawRaisedHPA, sawMaxAnnotation, maxMin, maxMax)
	}

	// The end state: the pre-handoff replicas, the HPA's own bounds, and the HPA, reconciling
	// after the restore, agrees (it reports the 2 current replicas and leaves them).
	e.waitFor("the HPA to settle on the pre-handoff replicas", 60*time.Second, func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(hpa), h); err != nil {
			return false, err.Error()
		}
		r, _ := e.readyPods(ctx, "api")
		ok := ptr.Deref(d.Spec.Replicas, -1) == 2 && d.Annotations[v1alpha1.AnnotationHandoffSurge] == "" &&
			ptr.Deref(h.Spec.MinReplicas, -1) == 1 && h.Spec.MaxReplicas == 2 &&
			h.Annotations[v1alpha1.AnnotationHandoffHPAMin] == "" && h.Annotations[handoff.AnnotationHandoffHPAMax] == "" &&
			h.Status.CurrentReplicas == 2 && r == 2
		return ok, fmt.Sprintf("deployment replicas %d annotations %v; HPA min %d max %d annotations %v current %d; ready %d",
			ptr.Deref(d.Spec.Replicas, -1), d.Annotations, ptr.Deref(h.Spec.MinReplicas, -1), h.Spec.MaxReplicas, h.Annotations, h.Status.CurrentReplicas, r)
	})
}

// TestHandoffSurgeTakenBackAfterForeignDrain: another drainer (kubectl drain
// --disable-eviction, a node-problem remediation) deletes the lifeboat's Pods while the
// handoff's surge waits for its replacements. Nothing is left for the surge to move: Lifeboat
// takes it back — the Deployment returns to its own replicas and the HPA to its own bounds —
// instead of leaving both raised for good (and every later handoff of the Deployment waiting
// behind the stale record).
func TestHandoffSurgeTakenBackAfterForeignDrain(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	// The replacement capacity is not there yet: the surge's Pods stay Pending.
	od := kwokNode("od-1", map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelInstanceType: "m5.2xlarge", v1alpha1.LabelZone: "us-east-1b"}, "8", "aws:///us-east-1b/i-00000000000000b01")
	od.Spec.Unschedulable = true
	if _, err := e.cluster.CreateKWOKNode(ctx, od); err != nil {
		t.Fatal(err)
	}
	boat := e.oneActiveLifeboat(ctx, func(wp *v1alpha1.WarmPool) {
		wp.Spec.HandoffDeadline = &metav1.Duration{Duration: 10 * time.Minute}
	})
	dep := lifeboatDeployment("api", 2)
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MinReplicas:    ptr.To[int32](1), MaxReplicas: 2,
		},
	}
	if err := e.client.Create(ctx, hpa); err != nil {
		t.Fatal(err)
	}
	e.waitFor("api 2 Ready on the lifeboat", 30*time.Second, func(ctx context.Context) (bool, string) {
		r, p := e.readyPods(ctx, "api")
		return r == 2 && p == 2, fmt.Sprintf("ready %d, on the pool %d", r, p)
	})
	e.waitFor("the handoff surge of api (replicas and HPA raised to 4)", 90*time.Second, func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(hpa), h); err != nil {
			return false, err.Error()
		}
		return handoff.HandoffSurgeNode(d) == boat && ptr.Deref(d.Spec.Replicas, -1) == 4 && ptr.Deref(h.Spec.MinReplicas, -1) == 4,
			fmt.Sprintf("replicas %d annotations %v; HPA min %d max %d", ptr.Deref(d.Spec.Replicas, -1), d.Annotations, ptr.Deref(h.Spec.MinReplicas, -1), h.Spec.MaxReplicas)
	})

	// The foreign drain: the lifeboat's api Pods deleted outright.
	pods := &corev1.PodList{}
	if err := e.client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "api"}); err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == boat {
			if err := e.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	if deleted != 2 {
		t.Fatalf("deleted %d api Pods on %s, want 2", deleted, boat)
	}
	e.waitFor("the orphaned surge taken back: api at 2 replicas, the HPA at its own bounds", 60*time.Second, func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(hpa), h); err != nil {
			return false, err.Error()
		}
		ok := ptr.Deref(d.Spec.Replicas, -1) == 2 && d.Annotations[v1alpha1.AnnotationHandoffSurge] == "" &&
			ptr.Deref(h.Spec.MinReplicas, -1) == 1 && h.Spec.MaxReplicas == 2 &&
			h.Annotations[v1alpha1.AnnotationHandoffHPAMin] == "" && h.Annotations[handoff.AnnotationHandoffHPAMax] == ""
		return ok, fmt.Sprintf("deployment replicas %d annotations %v; HPA min %d max %d annotations %v",
			ptr.Deref(d.Spec.Replicas, -1), d.Annotations, ptr.Deref(h.Spec.MinReplicas, -1), h.Spec.MaxReplicas, h.Annotations)
	})
	// The capacity arrives: api runs its own 2 replicas there.
	if _, err := e.cluster.Client().CoreV1().Nodes().Patch(ctx, "od-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("api 2 Ready on od-1", 60*time.Second, func(ctx context.Context) (bool, string) {
		r, p := e.readyPods(ctx, "api")
		return r == 2 && p == 0, fmt.Sprintf("ready %d, on the pool %d", r, p)
	})
}

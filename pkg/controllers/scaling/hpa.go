// Package scaling holds what the two surges of a Deployment share — the handoff's (a lifeboat
// node going away) and the bridge's (an interrupted Spot node going away): keeping a
// HorizontalPodAutoscaler from undoing a surge, and putting it back afterwards.
package scaling

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// AnnotationHPAOriginalMax on a HorizontalPodAutoscaler: its maxReplicas before a surge raised
// it (only set when the surged count exceeded it). Next to v1alpha1.AnnotationHandoffHPAMin,
// which holds the original minReplicas.
const AnnotationHPAOriginalMax = v1alpha1.Group + "/handoff-original-max-replicas"

// HPAFor returns the HPA whose target is d, or nil.
func HPAFor(ctx context.Context, c client.Reader, d *appsv1.Deployment) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	list := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := c.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		ref := list.Items[i].Spec.ScaleTargetRef
		if ref.Kind == "Deployment" && ref.Name == d.Name {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// RaiseHPA lifts an HPA's minReplicas to the surged count, and its maxReplicas too when the
// surged count exceeds it, keeping the originals in annotations (written once, by the first
// surge). Without the minimum the HPA scales the surge away as excess; without the maximum an
// HPA already at its ceiling (common right after an interruption moved load around) sees
// replicas above maxReplicas and scales straight back to it — it does that even without
// metrics — deleting the surge Pods before they are Ready. Idempotent; a later, larger surge
// raises the bounds further.
func RaiseHPA(ctx context.Context, c client.Client, d *appsv1.Deployment, replicas int32) error {
	h, err := HPAFor(ctx, c, d)
	if err != nil || h == nil {
		return err
	}
	if _, raised := h.Annotations[v1alpha1.AnnotationHandoffHPAMin]; raised &&
		ptr.Deref(h.Spec.MinReplicas, 1) >= replicas && h.Spec.MaxReplicas >= replicas {
		return nil
	}
	before := h.DeepCopy()
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	if _, raised := h.Annotations[v1alpha1.AnnotationHandoffHPAMin]; !raised {
		h.Annotations[v1alpha1.AnnotationHandoffHPAMin] = strconv.Itoa(int(ptr.Deref(h.Spec.MinReplicas, 1)))
	}
	if replicas > h.Spec.MaxReplicas {
		if _, raised := h.Annotations[AnnotationHPAOriginalMax]; !raised {
			h.Annotations[AnnotationHPAOriginalMax] = strconv.Itoa(int(h.Spec.MaxReplicas))
		}
		h.Spec.MaxReplicas = replicas
	}
	h.Spec.MinReplicas = ptr.To(max(replicas, ptr.Deref(h.Spec.MinReplicas, 1)))
	if err := c.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("raise HPA %s/%s for the surge: %w", h.Namespace, h.Name, err)
	}
	return nil
}

// RestoreHPA puts back the minReplicas (and maxReplicas) RaiseHPA changed. Call it only when
// no surge of d remains (Surging).
func RestoreHPA(ctx context.Context, c client.Client, d *appsv1.Deployment) error {
	h, err := HPAFor(ctx, c, d)
	if err != nil || h == nil {
		return err
	}
	raw, ok := h.Annotations[v1alpha1.AnnotationHandoffHPAMin]
	if !ok {
		return nil
	}
	orig, err := strconv.Atoi(raw)
	if err != nil || orig < 1 {
		orig = 1
	}
	before := h.DeepCopy()
	delete(h.Annotations, v1alpha1.AnnotationHandoffHPAMin)
	h.Spec.MinReplicas = ptr.To(int32(orig))
	if raw, ok := h.Annotations[AnnotationHPAOriginalMax]; ok {
		delete(h.Annotations, AnnotationHPAOriginalMax)
		if origMax, err := strconv.Atoi(raw); err == nil && origMax >= orig {
			h.Spec.MaxReplicas = int32(origMax)
		}
	}
	if err := c.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("restore HPA %s/%s after the surge: %w", h.Namespace, h.Name, err)
	}
	return nil
}

// Surging reports which of Lifeboat's surges d still carries: the handoff's and the bridge's.
func Surging(d *appsv1.Deployment) (handoff, bridge bool) {
	_, handoff = d.Annotations[v1alpha1.AnnotationHandoffSurge]
	_, bridge = d.Annotations[v1alpha1.AnnotationBridgeSurge]
	return handoff, bridge
}

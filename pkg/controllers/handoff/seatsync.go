package handoff

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// syncSeats keeps one seat per Pod of the lifeboat node n that the handoff will evict, and
// deletes the others (fetch, PlanSeats, write).
func (c *Controller) syncSeats(ctx context.Context, n *corev1.Node) error {
	pods, err := podsOn(ctx, c.client, n.Name)
	if err != nil {
		return err
	}
	rsToDeploy, err := c.replicaSetOwners(ctx, pods)
	if err != nil {
		return err
	}
	list := &corev1.PodList{}
	if err := c.client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelSeat: "true"}); err != nil {
		return err
	}
	existing := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		existing = append(existing, &list.Items[i])
	}
	plan := PlanSeats(n, GroupPods(pods, rsToDeploy), existing, c.Namespace, c.SeatImage)
	var errs []error
	for _, s := range plan.Create {
		if err := c.client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create seat %s for %s: %w", s.Name, s.Annotations[v1alpha1.AnnotationSeatFor], err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Seat created", "seat", s.Name, "for", s.Annotations[v1alpha1.AnnotationSeatFor])
	}
	for _, name := range plan.Delete {
		if err := c.deleteSeat(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) deleteSeat(ctx context.Context, name string) error {
	s := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	if err := c.client.Delete(ctx, s, &client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete seat %s: %w", name, err)
	}
	return nil
}

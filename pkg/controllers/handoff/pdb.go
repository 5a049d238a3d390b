package handoff

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// blockedForGood says whether a PDB refuses p's eviction with every one of its Pods healthy:
// it allows no disruption at all (minAvailable = replicas, maxUnavailable 0), as opposed to
// pacing a drain whose last move is not Ready yet.
func (c *Controller) blockedForGood(ctx context.Context, p *corev1.Pod) (bool, error) {
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := c.client.List(ctx, pdbs, client.InNamespace(p.Namespace)); err != nil {
		return false, err
	}
	return BlockedForGood(p, pdbs.Items), nil
}

// BlockedForGood: some PDB selecting the Pod allows no disruption while all its expected Pods
// are healthy. Pure.
func BlockedForGood(p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) bool {
	for i := range pdbs {
		pdb := &pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) { // {} selects every Pod, as in policy/v1
			continue
		}
		if pdb.Status.DisruptionsAllowed == 0 && pdb.Status.CurrentHealthy >= pdb.Status.ExpectedPods {
			return true
		}
	}
	return false
}

package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A StatefulSet Pod moved by the bridge is re-created under its name within a second or two.
// The Eviction API records the evicted Pod by name in its PodDisruptionBudget's
// status.disruptedPods; the disruption controller drops the entry when it sees that Pod
// terminating — but when its sync comes after the re-creation it finds a live Pod of that name
// and keeps the entry until DeletionTimeout (2 minutes, pkg/controller/disruption), counting
// the new, Ready Pod as disrupted. Every later move of the StatefulSet is then refused for two
// minutes, past the holds' deadlines: the Pods die at the reclaim (measured in
// test/integration/bridge on 2026-12-02). The bridge removes such an entry when it is provably
// stale — the Pod of that name is not the one that was evicted — and the disruption controller
// recomputes the budget from the Pods.

// StaleDisruptions are the names in a budget's status.disruptedPods whose evicted Pod is gone:
// the Pod now of that name was created after the entry, or is not the one this process evicted
// (evicted: name → UID of the Pod the bridge evicted). A name without a Pod is left to the
// disruption controller. Pure.
func StaleDisruptions(pdb *policyv1.PodDisruptionBudget, pods map[string]*corev1.Pod, evicted map[string]types.UID) []string {
	var out []string
	for name, at := range pdb.Status.DisruptedPods {
		p, ok := pods[name]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		uid, known := evicted[name]
		if p.CreationTimestamp.After(at.Time) || (known && p.UID != uid) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// clearStaleDisruptions removes the stale disruptedPods entries of the budgets that cover p
// (read from the API server; written with an optimistic lock, so an entry the Eviction API adds
// meanwhile is never lost). It returns what it saw of each budget, for the log.
func (c *Controller) clearStaleDisruptions(ctx context.Context, p *corev1.Pod) ([]string, error) {
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := c.live.List(ctx, pdbs, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list the PodDisruptionBudgets of %s: %w", p.Namespace, err)
	}
	var seen []string
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		st := pdb.Status
		seen = append(seen, fmt.Sprintf("%s: %d allowed, %d/%d healthy (%d expected), disrupted %v",
			pdb.Name, st.DisruptionsAllowed, st.CurrentHealthy, st.DesiredHealthy, st.ExpectedPods, slices.Sorted(maps.Keys(st.DisruptedPods))))
		if len(st.DisruptedPods) == 0 {
			continue
		}
		pods := map[string]*corev1.Pod{}
		for name := range pdb.Status.DisruptedPods {
			cur := &corev1.Pod{}
			if err := c.live.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, cur); err == nil {
				pods[name] = cur
			} else if !apierrors.IsNotFound(err) {
				return seen, fmt.Errorf("read Pod %s/%s: %w", p.Namespace, name, err)
			}
		}
		stale := StaleDisruptions(pdb, pods, c.evictedUIDs(p.Namespace))
		if len(stale) == 0 {
			continue
		}
		entries := map[string]any{}
		for _, name := range stale {
			entries[name] = nil
		}
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": pdb.ResourceVersion},
			"status":   map[string]any{"disruptedPods": entries},
		})
		if err := c.client.Status().Patch(ctx, pdb, client.RawPatch(types.MergePatchType, patch)); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // the next pass reads it again
			}
			return seen, fmt.Errorf("remove stale disruptedPods %v of PodDisruptionBudget %s/%s: %w", stale, pdb.Namespace, pdb.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Removed PodDisruptionBudget entries of evicted Pods already re-created under their names",
			"podDisruptionBudget", klog.KObj(pdb), "pods", stale)
		seen = append(seen, fmt.Sprintf("%s: removed stale %v", pdb.Name, stale))
	}
	return seen, nil
}

// noteEvicted remembers the UID of a Pod the bridge evicted (by namespace/name), for
// StaleDisruptions.
func (c *Controller) noteEvicted(p *corev1.Pod) {
	c.grantsMu.Lock()
	defer c.grantsMu.Unlock()
	if len(c.evicted) >= 4096 { // bounded: an entry matters for seconds after its move
		clear(c.evicted)
	}
	c.evicted[p.Namespace+"/"+p.Name] = p.UID
}

// wasEvicted: this process evicted p (a move).
func (c *Controller) wasEvicted(p *corev1.Pod) bool {
	c.grantsMu.Lock()
	defer c.grantsMu.Unlock()
	return c.evicted[p.Namespace+"/"+p.Name] == p.UID
}

func (c *Controller) evictedUIDs(namespace string) map[string]types.UID {
	c.grantsMu.Lock()
	defer c.grantsMu.Unlock()
	out := map[string]types.UID{}
	for key, uid := range c.evicted {
		if ns, name, _ := cutKey(key); ns == namespace {
			out[name] = uid
		}
	}
	return out
}

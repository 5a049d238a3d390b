package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Settling before t0. The ramp creates every workload at once; Karpenter launches nodes for the
// Pods the scheduler has not placed yet, and the scheduler then packs some of those Pods onto
// nodes that turned Ready earlier, so the ramp leaves empty nodes behind. Karpenter's WhenEmpty
// consolidation removes them a batch at a time (10 % of the pool per pass, after
// consolidateAfter), which takes minutes at `scale`'s size: a quarter of `scale` launched 196
// NodeClaims for ~60 nodes' worth of Pods, and Karpenter deleted the surplus 2–11 per 15 s pass. A market that starts while that is
// still going on finds a different amount of free room in each mode: in one run of
// scale-quarter (seed 11) Karpenter alone still had empty nodes at t0 and placed the
// unprotected workers' replacements on them, while the Lifeboat run's consolidation was further
// along and its replacements waited for new nodes — 152 s against 89 s to recover, an artefact
// of when t0 fell, not of Lifeboat. So each mode waits until Karpenter has no empty node and is
// disrupting none before it reaches t0.

// settleTimeout bounds that wait; a mode still unsettled then starts anyway and says so. At a
// quarter of `scale` the surplus took ~5 min to go; 3 min was not enough for one mode.
const settleTimeout = 10 * time.Minute

// unsettled says why Karpenter's nodes are not settled ("" when they are): a node of a
// NodePool (label karpenter.sh/nodepool) being deleted or disrupted (taint
// karpenter.sh/disrupted), or one no running Pod is bound to other than a DaemonSet's. Pure.
func unsettled(nodes []*corev1.Node, pods []*corev1.Pod) string {
	busy := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || nodeutil.IsTerminal(p) || nodeutil.IsDaemonSetPod(p) {
			continue
		}
		busy[p.Spec.NodeName] = true
	}
	var empty, leaving []string
	for _, n := range nodes {
		if n.Labels[karpenterNodePoolLabel] == "" {
			continue
		}
		switch {
		case n.DeletionTimestamp != nil || nodeutil.HasTaint(n, v1alpha1.TaintKarpenterDisrupted):
			leaving = append(leaving, n.Name)
		case !busy[n.Name]:
			empty = append(empty, n.Name)
		}
	}
	var why []string
	if len(leaving) > 0 {
		why = append(why, fmt.Sprintf("%d node(s) being disrupted (%s)", len(leaving), firstNames(leaving)))
	}
	if len(empty) > 0 {
		why = append(why, fmt.Sprintf("%d empty node(s) (%s)", len(empty), firstNames(empty)))
	}
	return strings.Join(why, ", ")
}

func firstNames(names []string) string {
	sort.Strings(names)
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}

// waitSettled waits until unsettled reports nothing, at most timeout; then it returns the last
// reason (the caller goes on and says so), or "" when settled.
func waitSettled(ctx context.Context, obs *observer, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		var nodes []*corev1.Node
		for _, o := range obs.nodes.List() {
			nodes = append(nodes, o.(*corev1.Node))
		}
		var pods []*corev1.Pod
		for _, o := range obs.pods.List() {
			pods = append(pods, o.(*corev1.Pod))
		}
		why := unsettled(nodes, pods)
		if why == "" || time.Now().After(deadline) {
			return why, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

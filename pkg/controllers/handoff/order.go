// Package handoff hands resumed lifeboat nodes back to Karpenter's capacity without lowering the
// ready count: at activeDuration (or earlier with WhenReplacementReady) the node is cordoned
// and drained gradually — Deployments surge first (replicas may exceed the pre-interruption
// count), the surged Pods become Ready on other nodes, then the lifeboat Pods go (deletion cost
// + scale down); Pods whose controller cannot surge are evicted within their PDB. A hard
// deadline bounds the drain.
package handoff

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Group is the lifeboat Pods of one owner on the draining node.
type Group struct {
	// Kind is Deployment (surge) or Evict (everything else: StatefulSets, Jobs, bare Pods,
	// ReplicaSets without a Deployment).
	Kind      string
	Namespace string
	// Name of the Deployment (empty for Evict).
	Name string
	Pods []*corev1.Pod
}

// Kinds of Group.
const (
	KindDeployment = "Deployment"
	KindEvict      = "Evict"
)

// GroupPods orders the drain: Deployments first (they surge, no capacity is lost), sorted by
// namespace/name; then the Pods to evict, lowest priority first (best-effort tiers leave before
// critical ones). rsToDeployment maps namespace/ReplicaSet → Deployment name. Pure.
func GroupPods(pods []*corev1.Pod, rsToDeployment map[string]string) []Group {
	deployments := map[string]*Group{}
	var evict []*corev1.Pod
	for _, p := range pods {
		d := ""
		for _, o := range p.OwnerReferences {
			if o.Kind == "ReplicaSet" && o.Controller != nil && *o.Controller {
				d = rsToDeployment[p.Namespace+"/"+o.Name]
			}
		}
		if d == "" {
			evict = append(evict, p)
			continue
		}
		k := p.Namespace + "/" + d
		g := deployments[k]
		if g == nil {
			g = &Group{Kind: KindDeployment, Namespace: p.Namespace, Name: d}
			deployments[k] = g
		}
		g.Pods = append(g.Pods, p)
	}
	keys := make([]string, 0, len(deployments))
	for k := range deployments {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Group
	for _, k := range keys {
		g := deployments[k]
		sort.Slice(g.Pods, func(i, j int) bool { return g.Pods[i].Name < g.Pods[j].Name })
		out = append(out, *g)
	}
	sort.SliceStable(evict, func(i, j int) bool {
		pi, pj := priority(evict[i]), priority(evict[j])
		if pi != pj {
			return pi < pj
		}
		return evict[i].Namespace+"/"+evict[i].Name < evict[j].Namespace+"/"+evict[j].Name
	})
	if len(evict) > 0 {
		out = append(out, Group{Kind: KindEvict, Pods: evict})
	}
	return out
}

func priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// SurgeDone reports whether the surge of a Deployment has made up for the lifeboat Pods: the
// Ready Pods on other nodes are at least the ready count before the handoff. Only then may the
// lifeboat Pods go, so the ready count never drops below its pre-handoff value.
func SurgeDone(readyElsewhere, readyBefore int32) bool { return readyElsewhere >= readyBefore }

// Package handoff hands resumed lifeboat nodes back to Karpenter's capacity without lowering the
// ready count: at activeDuration (or earlier with WhenReplacementReady) the node is cordoned
// and drained gradually — Deployments surge first (replicas may exceed the pre-interruption
// count), the surged Pods become Ready on other nodes, then the lifeboat Pods go (deletion cost
// + scale down); Pods whose controller cannot surge are evicted within their PDB; Job Pods run to
// completion on the cordoned node. A hard deadline bounds the drain.
package handoff

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Group is the lifeboat Pods of one owner on the draining node.
type Group struct {
	// Kind is Deployment (surge), Wait (Job Pods: left to finish) or Evict (everything else:
	// StatefulSets, bare Pods, ReplicaSets without a Deployment).
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
	// KindWait: Pods of a run-to-completion controller (Job). Moving one gains nothing — it
	// restarts from its last checkpoint — and costs the Job more than the lost work: the Job
	// controller counts every failed Pod in its exponential re-creation back-off (10 s doubling
	// to 10 min), even Pods its podFailurePolicy ignores (kubernetes#119434, #130881). Pods
	// already evicted once by the interruption would, evicted again, keep the Job at zero Pods
	// for minutes. So the cordoned node lets them finish; the handoff deadline bounds the wait.
	KindWait = "Wait"
)

// GroupPods orders the drain: Deployments first (they surge, no capacity is lost), sorted by
// namespace/name; then the Pods to evict, lowest priority first (best-effort tiers leave before
// critical ones); last the Job Pods that are left to finish, by namespace/name. rsToDeployment
// maps namespace/ReplicaSet → Deployment name. Pure.
func GroupPods(pods []*corev1.Pod, rsToDeployment map[string]string) []Group {
	deployments := map[string]*Group{}
	var evict, wait []*corev1.Pod
	for _, p := range pods {
		d, job := "", false
		for _, o := range p.OwnerReferences {
			if o.Controller == nil || !*o.Controller {
				continue
			}
			switch o.Kind {
			case "ReplicaSet":
				d = rsToDeployment[p.Namespace+"/"+o.Name]
			case "Job":
				job = true
			}
		}
		if job {
			wait = append(wait, p)
			continue
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
	if len(wait) > 0 {
		sort.Slice(wait, func(i, j int) bool {
			return wait[i].Namespace+"/"+wait[i].Name < wait[j].Namespace+"/"+wait[j].Name
		})
		out = append(out, Group{Kind: KindWait, Pods: wait})
	}
	return out
}

// Waiting counts the Pods of the groups the drain leaves to finish.
func Waiting(groups []Group) int {
	n := 0
	for _, g := range groups {
		if g.Kind == KindWait {
			n += len(g.Pods)
		}
	}
	return n
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

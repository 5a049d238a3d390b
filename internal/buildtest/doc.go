// Package buildtest builds the Nodes and Pods of unit tests from small, composable options,
// in the style of Karpenter's pkg/test: Node("spot-1", CapacityType(Spot), Capacity("4", "16Gi",
// "110")) or Pod("app", "api-a", OnNode("spot-1"), Protected(v1alpha1.TierStateless)).
// A builder sets only what its options say; the labels, taints and annotations are the
// constants of pkg/apis/v1alpha1. Its path ends in "test", so no shipped binary may link it
// (make verify checks that).
package buildtest

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Capacity types of the karpenter.sh/capacity-type label (v1alpha1.LabelCapacityType).
const (
	Spot     = "spot"
	OnDemand = "on-demand"
)

// Option is an option of both builders: it sets object metadata or readiness.
type Option struct {
	meta func(*metav1.ObjectMeta)
	node func(*corev1.Node)
	pod  func(*corev1.Pod)
}

func (o Option) applyNode(n *corev1.Node) {
	if o.meta != nil {
		o.meta(&n.ObjectMeta)
	}
	if o.node != nil {
		o.node(n)
	}
}

func (o Option) applyPod(p *corev1.Pod) {
	if o.meta != nil {
		o.meta(&p.ObjectMeta)
	}
	if o.pod != nil {
		o.pod(p)
	}
}

// Labels adds the labels to the object's (creating the map, even for none).
func Labels(labels map[string]string) Option {
	return Option{meta: func(m *metav1.ObjectMeta) { m.Labels = merge(m.Labels, labels) }}
}

// Annotations adds the annotations to the object's (creating the map, even for none).
func Annotations(annotations map[string]string) Option {
	return Option{meta: func(m *metav1.ObjectMeta) { m.Annotations = merge(m.Annotations, annotations) }}
}

// UID sets the object's UID.
func UID(uid string) Option {
	return Option{meta: func(m *metav1.ObjectMeta) { m.UID = types.UID(uid) }}
}

// Ready sets the Ready condition of a Node or a Pod to True or False.
func Ready(ready bool) Option {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return Option{
		node: func(n *corev1.Node) {
			n.Status.Conditions = append(slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady }),
				corev1.NodeCondition{Type: corev1.NodeReady, Status: status})
		},
		pod: func(p *corev1.Pod) {
			p.Status.Conditions = append(slices.DeleteFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady }),
				corev1.PodCondition{Type: corev1.PodReady, Status: status})
		},
	}
}

func merge(into, from map[string]string) map[string]string {
	if into == nil {
		into = make(map[string]string, len(from))
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

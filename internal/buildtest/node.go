package buildtest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// NodeOption sets a part of a Node: an Option, a NodeFunc or one of the Node options below.
type NodeOption interface{ applyNode(*corev1.Node) }

// NodeFunc is a NodeOption that edits the Node as it likes.
type NodeFunc func(*corev1.Node)

func (f NodeFunc) applyNode(n *corev1.Node) { f(n) }

// Node is a Node named name with the options applied in order; without options it has
// nothing else (no labels, resources or conditions).
func Node(name string, opts ...NodeOption) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, o := range opts {
		o.applyNode(n)
	}
	return n
}

// label is a NodeOption setting key to value; an empty value sets nothing.
func label(key, value string) NodeFunc {
	return func(n *corev1.Node) {
		if value != "" {
			n.Labels = merge(n.Labels, map[string]string{key: value})
		}
	}
}

// CapacityType labels the Node's capacity type (Spot, OnDemand); "" sets no label.
func CapacityType(capacityType string) NodeOption {
	return label(v1alpha1.LabelCapacityType, capacityType)
}

// InstanceType labels the Node's instance type; "" sets no label.
func InstanceType(instanceType string) NodeOption {
	return label(v1alpha1.LabelInstanceType, instanceType)
}

// Zone labels the Node's zone; "" sets no label.
func Zone(zone string) NodeOption { return label(v1alpha1.LabelZone, zone) }

// Pool labels the Node a pool node of the WarmPool pool in state.
func Pool(pool string, state v1alpha1.NodeState) NodeOption {
	return NodeFunc(func(n *corev1.Node) {
		n.Labels = merge(n.Labels, map[string]string{v1alpha1.LabelPool: pool, v1alpha1.LabelState: string(state)})
	})
}

// Capacity sets the cpu, memory and pods quantities of both the Node's capacity and its
// allocatable; a "" quantity is left as it was.
func Capacity(cpu, mem, pods string) NodeOption {
	return Resources(resourceMap(cpu, mem, pods))
}

// Allocatable sets the cpu, memory and pods quantities of the Node's allocatable only; a ""
// quantity is left as it was.
func Allocatable(cpu, mem, pods string) NodeOption {
	return NodeFunc(func(n *corev1.Node) {
		n.Status.Allocatable = setQuantities(n.Status.Allocatable, resourceMap(cpu, mem, pods))
	})
}

// Resources sets each quantity of both the Node's capacity and its allocatable, for any
// resource (extended ones too).
func Resources(quantities map[corev1.ResourceName]string) NodeOption {
	return NodeFunc(func(n *corev1.Node) {
		n.Status.Capacity = setQuantities(n.Status.Capacity, quantities)
		n.Status.Allocatable = setQuantities(n.Status.Allocatable, quantities)
	})
}

// Taints appends the taints to the Node's.
func Taints(taints ...corev1.Taint) NodeOption {
	return NodeFunc(func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taints...) })
}

// ProviderID sets the Node's provider ID, such as "aws:///us-east-1a/i-1".
func ProviderID(id string) NodeOption {
	return NodeFunc(func(n *corev1.Node) { n.Spec.ProviderID = id })
}

func resourceMap(cpu, mem, pods string) map[corev1.ResourceName]string {
	out := map[corev1.ResourceName]string{}
	for name, q := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: pods} {
		if q != "" {
			out[name] = q
		}
	}
	return out
}

// setQuantities sets the quantities in list (creating it), parsing each.
func setQuantities(list corev1.ResourceList, quantities map[corev1.ResourceName]string) corev1.ResourceList {
	if list == nil {
		list = corev1.ResourceList{}
	}
	for name, q := range quantities {
		list[name] = resource.MustParse(q)
	}
	return list
}

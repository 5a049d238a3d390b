package sim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOvercommitted(t *testing.T) {
	node := func(name, cpu, memory, pods string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse(pods)}}}
	}
	pod := func(node, cpu, memory string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	many := func(n int, p *corev1.Pod) []*corev1.Pod {
		out := make([]*corev1.Pod, n)
		for i := range out {
			out[i] = p.DeepCopy()
		}
		return out
	}
	// The scale scenario's nodes: 2 CPU, 29 Pods; its Pods request 130m, 200Mi.
	c5 := node("a", "2", "4Gi", "29")
	tests := []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  int
	}{
		{"fifteen 130m Pods fit 2 CPU", []*corev1.Node{c5}, many(15, pod("a", "130m", "200Mi", corev1.PodRunning)), 0},
		// Measured in the scale simulation: two schedulers each filled a new node, 28 Pods.
		{"two schedulers' 28 Pods overflow the CPU", []*corev1.Node{c5}, many(28, pod("a", "130m", "200Mi", corev1.PodRunning)), 1},
		{"memory overflows", []*corev1.Node{c5}, many(3, pod("a", "10m", "2Gi", corev1.PodRunning)), 1},
		{"the Pod count overflows", []*corev1.Node{c5}, many(30, pod("a", "1m", "1Mi", corev1.PodRunning)), 1},
		{"finished Pods hold nothing", []*corev1.Node{c5}, append(many(15, pod("a", "130m", "200Mi", corev1.PodRunning)),
			many(10, pod("a", "130m", "200Mi", corev1.PodSucceeded))...), 0},
		{"unbound Pods hold nothing", []*corev1.Node{c5}, many(40, pod("", "130m", "200Mi", corev1.PodPending)), 0},
		{"a node without allocatable yet is not judged", []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, many(2, pod("a", "1", "1Gi", corev1.PodRunning)), 0},
		{"counts nodes, not Pods", []*corev1.Node{c5, node("b", "2", "4Gi", "29"), node("c", "2", "4Gi", "29")},
			append(many(20, pod("a", "130m", "200Mi", corev1.PodRunning)), many(20, pod("b", "130m", "200Mi", corev1.PodRunning))...), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := overcommitted(tc.nodes, tc.pods); got != tc.want {
				t.Errorf("overcommitted = %d, want %d", got, tc.want)
			}
		})
	}
}

package sim

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestUnsettled(t *testing.T) {
	now := metav1.Now()
	node := func(name string, karpenter bool, mod func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if karpenter {
			n.Labels[karpenterNodePoolLabel] = "default"
		}
		if mod != nil {
			mod(n)
		}
		return n
	}
	pod := func(node string, phase corev1.PodPhase, owner string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "x"}}
		}
		return p
	}
	tests := []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  []string // substrings; none: settled
	}{
		{name: "every Karpenter node hosts a Pod", nodes: []*corev1.Node{node("a", true, nil), node("b", true, nil)},
			pods: []*corev1.Pod{pod("a", corev1.PodRunning, "ReplicaSet"), pod("b", corev1.PodPending, "StatefulSet")}},
		{name: "an empty node that is not Karpenter's (a hibernated lifeboat) does not count",
			nodes: []*corev1.Node{node("a", true, nil), node("lifeboat-0", false, nil)}, pods: []*corev1.Pod{pod("a", corev1.PodRunning, "")}},
		{name: "an empty Karpenter node", nodes: []*corev1.Node{node("a", true, nil), node("b", true, nil)},
			pods: []*corev1.Pod{pod("a", corev1.PodRunning, "")}, want: []string{"1 empty node(s) (b)"}},
		{name: "only a DaemonSet's Pod or a finished Pod: empty", nodes: []*corev1.Node{node("a", true, nil), node("b", true, nil)},
			pods: []*corev1.Pod{pod("a", corev1.PodRunning, "DaemonSet"), pod("b", corev1.PodSucceeded, "Job")}, want: []string{"2 empty node(s) (a, b)"}},
		{name: "a node being deleted or disrupted", nodes: []*corev1.Node{
			node("a", true, func(n *corev1.Node) { n.DeletionTimestamp = &now; n.Finalizers = []string{"karpenter.sh/termination"} }),
			node("b", true, func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}
			})},
			pods: []*corev1.Pod{pod("a", corev1.PodRunning, ""), pod("b", corev1.PodRunning, "")}, want: []string{"2 node(s) being disrupted (a, b)"}},
		{name: "many empty nodes are counted, three named", nodes: []*corev1.Node{node("d", true, nil), node("c", true, nil), node("b", true, nil), node("a", true, nil)},
			want: []string{"4 empty node(s) (a, b, c, …)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unsettled(tt.nodes, tt.pods)
			if len(tt.want) == 0 && got != "" {
				t.Fatalf("unsettled = %q, want settled", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("unsettled = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

package nodepool

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func np(reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
	p := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	p.Spec.Template.Spec.Requirements = reqs
	return p
}

func types(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("m5.%dxlarge", i))
	}
	return out
}

func TestAssess(t *testing.T) {
	tests := []struct {
		name                string
		np                  *karpv1.NodePool
		spot                bool
		types, zones, probs int
	}{
		{"unconstrained: fine", np(), true, -1, -1, 0},
		{"on-demand only", np(req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "on-demand")), false, -1, -1, 1},
		{"NotIn spot", np(req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpNotIn, "spot")), false, -1, -1, 1},
		{"spot + 3 types + 1 zone", np(req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "spot"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, types(3)...), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "us-east-1a")), true, 3, 1, 2},
		{"15 types, 2 zones", np(req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, types(15)...), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a", "b")), true, 15, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assess(tt.np)
			if a.SpotAllowed != tt.spot || a.InstanceTypes != tt.types || a.Zones != tt.zones || len(a.Problems) != tt.probs {
				t.Errorf("Assess = %+v", a)
			}
		})
	}
}

func TestAllowSpot(t *testing.T) {
	p := np(req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "on-demand"))
	if !AllowSpot(p) || !Assess(p).SpotAllowed {
		t.Fatalf("In on-demand: not fixed: %+v", p.Spec.Template.Spec.Requirements)
	}
	if AllowSpot(p) {
		t.Error("second AllowSpot changed something")
	}
	p = np(req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpNotIn, "spot"))
	if !AllowSpot(p) || !Assess(p).SpotAllowed {
		t.Fatalf("NotIn spot: not fixed: %+v", p.Spec.Template.Spec.Requirements)
	}
}

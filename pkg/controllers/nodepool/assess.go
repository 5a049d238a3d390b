// Package nodepool checks Karpenter's NodePools once protection is active (a WarmPool exists):
// do they allow Spot, and are they diversified enough for spot-to-spot replacement (Karpenter
// recommends at least 15 instance types; Lifeboat also wants at least 2 zones)? It patches a
// NodePool to allow Spot only when a WarmPool says spec.karpenter.manage; otherwise it reports
// the change to make as a condition and an event.
package nodepool

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Thresholds of diversification.
const (
	MinInstanceTypes = 15
	MinZones         = 2
)

// Assessment of one NodePool.
type Assessment struct {
	Name          string
	SpotAllowed   bool
	InstanceTypes int // -1: unconstrained
	Zones         int // -1: unconstrained
	Problems      []string
}

// OK reports whether the NodePool needs no change.
func (a Assessment) OK() bool { return len(a.Problems) == 0 }

// Assess inspects a NodePool's requirements. Pure. Counting uses In requirements; NotIn,
// Exists and absent keys leave a dimension unconstrained (Karpenter then picks from every
// offering, which is diverse).
func Assess(np *karpv1.NodePool) Assessment {
	a := Assessment{Name: np.Name, SpotAllowed: true, InstanceTypes: -1, Zones: -1}
	for _, r := range np.Spec.Template.Spec.Requirements {
		switch r.Key {
		case karpv1.CapacityTypeLabelKey:
			a.SpotAllowed = allows(r.Operator, r.Values, karpv1.CapacityTypeSpot)
		case corev1.LabelInstanceTypeStable:
			if r.Operator == corev1.NodeSelectorOpIn {
				a.InstanceTypes = len(r.Values)
			}
		case corev1.LabelTopologyZone:
			if r.Operator == corev1.NodeSelectorOpIn {
				a.Zones = len(r.Values)
			}
		}
	}
	if !a.SpotAllowed {
		a.Problems = append(a.Problems, fmt.Sprintf("NodePool %s does not allow Spot: add %q to the %s requirement", np.Name, karpv1.CapacityTypeSpot, karpv1.CapacityTypeLabelKey))
	}
	if a.InstanceTypes >= 0 && a.InstanceTypes < MinInstanceTypes {
		a.Problems = append(a.Problems, fmt.Sprintf("NodePool %s allows %d instance types; allow at least %d (or constrain by instance category/size instead of names) so Spot replacements can come from other capacity pools", np.Name, a.InstanceTypes, MinInstanceTypes))
	}
	if a.Zones >= 0 && a.Zones < MinZones {
		a.Problems = append(a.Problems, fmt.Sprintf("NodePool %s allows %d zone(s); allow at least %d so a zone's Spot reclaim does not take every replacement with it", np.Name, a.Zones, MinZones))
	}
	return a
}

func allows(op corev1.NodeSelectorOperator, values []string, v string) bool {
	switch op {
	case corev1.NodeSelectorOpIn:
		for _, x := range values {
			if x == v {
				return true
			}
		}
		return false
	case corev1.NodeSelectorOpNotIn:
		for _, x := range values {
			if x == v {
				return false
			}
		}
		return true
	case corev1.NodeSelectorOpDoesNotExist:
		return false
	}
	return true
}

// AllowSpot edits the NodePool's capacity-type requirement so that it allows Spot; it reports
// whether it changed anything. Pure.
func AllowSpot(np *karpv1.NodePool) bool {
	reqs := np.Spec.Template.Spec.Requirements
	for i := range reqs {
		r := &reqs[i]
		if r.Key != karpv1.CapacityTypeLabelKey || allows(r.Operator, r.Values, karpv1.CapacityTypeSpot) {
			continue
		}
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			r.Values = append(r.Values, karpv1.CapacityTypeSpot)
		case corev1.NodeSelectorOpNotIn:
			var keep []string
			for _, v := range r.Values {
				if v != karpv1.CapacityTypeSpot {
					keep = append(keep, v)
				}
			}
			r.Values = keep
			if len(keep) == 0 {
				r.Operator, r.Values = corev1.NodeSelectorOpExists, nil
			}
		default:
			r.Operator, r.Values = corev1.NodeSelectorOpIn, []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand}
		}
		return true
	}
	return false
}

// Summary joins the problems of several NodePools for a condition message.
func Summary(as []Assessment) string {
	var p []string
	for _, a := range as {
		p = append(p, a.Problems...)
	}
	return strings.Join(p, "; ")
}

package localcluster

import (
	"encoding/json"
	"fmt"
	"time"
)

// NodePool describes a Karpenter v1 NodePool on the harness's KWOK node class; YAML renders
// it. Every NodePool of the harness, its tests and the fixtures is written through it, so
// they differ only in what they set here.
type NodePool struct {
	Name string
	// Weight orders NodePools (Karpenter launches from the heaviest that fits); 0 leaves it unset.
	Weight int
	// Labels go on the template, i.e. on every node of the NodePool.
	Labels map[string]string
	// CapacityTypes allowed; empty: Spot and On-Demand.
	CapacityTypes []string
	// InstanceTypes and Zones narrow the catalog; empty: any.
	InstanceTypes, Zones []string
	// ConsolidateAfter for consolidationPolicy WhenEmpty; 0: 30 s (tests see stable placements).
	ConsolidateAfter time.Duration
	// DisruptionBudget is the one budget's nodes ("0", "100%"); empty: Karpenter's default (10%).
	DisruptionBudget string
}

// YAML renders the NodePool: nodes never expire, consolidation removes only empty nodes, and
// the template carries the startup taint node.kubernetes.io/not-ready (see DefaultNodePool).
func (p NodePool) YAML() string {
	req := func(key string, values []string) map[string]any {
		return map[string]any{"key": key, "operator": "In", "values": values}
	}
	capacity := p.CapacityTypes
	if len(capacity) == 0 {
		capacity = []string{"spot", "on-demand"}
	}
	reqs := []any{req("karpenter.sh/capacity-type", capacity), req("kubernetes.io/os", []string{"linux"})}
	if len(p.InstanceTypes) > 0 {
		reqs = append(reqs, req("node.kubernetes.io/instance-type", p.InstanceTypes))
	}
	if len(p.Zones) > 0 {
		reqs = append(reqs, req("topology.kubernetes.io/zone", p.Zones))
	}
	after := p.ConsolidateAfter
	if after == 0 {
		after = 30 * time.Second
	}
	template := map[string]any{"spec": map[string]any{
		"nodeClassRef":  map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
		"expireAfter":   "Never",
		"startupTaints": []any{map[string]any{"key": NotReadyTaint["key"], "effect": NotReadyTaint["effect"]}},
		"requirements":  reqs,
	}}
	if len(p.Labels) > 0 {
		template["metadata"] = map[string]any{"labels": p.Labels}
	}
	disruption := map[string]any{"consolidationPolicy": "WhenEmpty", "consolidateAfter": after.String()}
	if p.DisruptionBudget != "" {
		disruption["budgets"] = []any{map[string]any{"nodes": p.DisruptionBudget}}
	}
	spec := map[string]any{"template": template, "disruption": disruption}
	if p.Weight != 0 {
		spec["weight"] = p.Weight
	}
	// JSON is YAML; a map of strings, slices and maps always marshals.
	b, err := json.Marshal(map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
		"metadata": map[string]any{"name": p.Name}, "spec": spec,
	})
	if err != nil {
		panic(fmt.Sprintf("render NodePool %s: %v", p.Name, err))
	}
	return string(b) + "\n"
}

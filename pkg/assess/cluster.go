package assess

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// MinCapacityPools is the diversification below which a Spot NodePool gets a finding: with
// fewer instance type × zone pools, one correlated reclaim takes a large part of it.
const MinCapacityPools = 10

// eligible: the workload would run on Spot under Lifeboat once its fixes are in.
func (g *group) eligible() bool {
	return protectableKind(policy.Kind(g.spec.Kind)) && g.verdict.Class != ClassPoorFit && g.verdict.Tier != string(v1alpha1.TierCritical)
}

// clusterFindings judges the cluster as a whole: its capacity pools, the correlated-reclaim
// exposure, the warm pool that covers it, and the Karpenter NodePools.
func clusterFindings(s *Snapshot, nodes map[string]*node, groups []*group, opts Options, findings *[]Finding) Cluster {
	pools := capacityPools(nodes)
	items := collectPodItems(groups, nodes, pools)
	c := Cluster{NodePools: []NodePool{}, CapacityPools: sortedCapacityPools(pools)}
	var sizeFor map[string][]sizing.Item
	c.Exposure, sizeFor = correlatedExposure(items, pools)
	if f, ok := exposureFinding(c.Exposure); ok {
		*findings = append(*findings, f)
	}
	c.WarmPool = warmPool(nodes, sizeFor, opts, findings)
	c.NodePools = nodePools(s.NodePools, nodes, findings)
	if len(s.NodePools) == 0 && s.ListErrors["nodepools.karpenter.sh"] == "" {
		*findings = append(*findings, Finding{Code: "no-nodepools", Severity: "info",
			Message: "no Karpenter NodePools: Lifeboat works alongside Karpenter (docs/ARCHITECTURE.md); the Spot figures assume Spot capacity can be launched"})
	}
	return c
}

// capacityPools counts the nodes of each instance type × zone × capacity type (nodes without
// an instance type are left out).
func capacityPools(nodes map[string]*node) map[string]*CapacityPool {
	pools := map[string]*CapacityPool{}
	for _, n := range nodes {
		if n.instanceType == "" {
			continue
		}
		p := pools[n.pool()]
		if p == nil {
			p = &CapacityPool{InstanceType: n.instanceType, Zone: n.zone, CapacityType: n.capacityType}
			pools[n.pool()] = p
		}
		p.Nodes++
	}
	return pools
}

// sortedCapacityPools lists the pools, most Pods first, then by name.
func sortedCapacityPools(pools map[string]*CapacityPool) []CapacityPool {
	out := []CapacityPool{}
	for _, p := range pools {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pods != b.Pods {
			return a.Pods > b.Pods
		}
		return a.InstanceType+a.Zone+a.CapacityType < b.InstanceType+b.Zone+b.CapacityType
	})
	return out
}

// podItems are the Pods of the exposure bases, per capacity pool, for the warm-pool sizing.
type podItems struct {
	// eligible and protected hold the Pods on Spot pools; all the eligible Pods on any pool.
	eligible, protected, all      map[string][]sizing.Item
	totalEligible, totalProtected int
}

// collectPodItems sorts the Pods of the groups into their capacity pools, counting each pool's
// Pods, eligible Pods and protected Pods as it goes.
func collectPodItems(groups []*group, nodes map[string]*node, pools map[string]*CapacityPool) podItems {
	it := podItems{eligible: map[string][]sizing.Item{}, protected: map[string][]sizing.Item{}, all: map[string][]sizing.Item{}}
	for _, g := range groups {
		el := g.eligible()
		for _, p := range g.pods {
			prot := isProtectedPod(p)
			if el {
				it.totalEligible++
			}
			if prot {
				it.totalProtected++
			}
			n := nodes[p.Spec.NodeName]
			if n == nil || n.instanceType == "" {
				continue
			}
			cp := pools[n.pool()]
			cp.Pods++
			item := podItem(p.Namespace+"/"+p.Name, p)
			if el {
				cp.EligiblePods++
				it.all[n.pool()] = append(it.all[n.pool()], item)
				if n.capacityType == CapacitySpot {
					it.eligible[n.pool()] = append(it.eligible[n.pool()], item)
				}
			}
			if prot {
				cp.ProtectedPods++
				if n.capacityType == CapacitySpot {
					it.protected[n.pool()] = append(it.protected[n.pool()], item)
				}
			}
		}
	}
	return it
}

// correlatedExposure finds the busiest Spot pool of the protected Pods if Lifeboat protects any today,
// else of the eligible ones; without any on Spot, the busiest pool of eligible Pods as if it
// were Spot (where Karpenter would put them once allowed). It returns the Pods per pool the warm
// pool is sized for.
func correlatedExposure(it podItems, pools map[string]*CapacityPool) (Exposure, map[string][]sizing.Item) {
	basis, items, total := "eligible", it.eligible, it.totalEligible
	if it.totalProtected > 0 {
		basis, items, total = "protected", it.protected, it.totalProtected
	}
	e := Exposure{Basis: basis, Of: total}
	best, pods := busiestPool(items)
	if best == "" {
		e.Note = "no " + basis + " Pods run on Spot nodes yet; the warm pool is sized for the busiest pool as if it were Spot"
		items = it.all
		best, pods = busiestPool(items)
	}
	e.Pods = pods
	if best != "" {
		e.Pool = best
		e.Nodes = pools[best].Nodes
		if total > 0 {
			e.Share = float64(int(float64(e.Pods)/float64(total)*1000)) / 1000
		}
	}
	return e, items
}

// busiestPool is the pool with the most items (the first by name among equals) and its count;
// "" and 0 when no pool has any.
func busiestPool(items map[string][]sizing.Item) (pool string, n int) {
	for _, k := range sortedKeys(items) {
		if len(items[k]) > n {
			pool, n = k, len(items[k])
		}
	}
	return pool, n
}

// exposureFinding warns when more than 30 % of the basis Pods sit in one Spot pool.
func exposureFinding(e Exposure) (Finding, bool) {
	if e.Pool == "" || e.Share <= 0.3 || strings.HasSuffix(e.Pool, "/"+CapacityOnDemand) {
		return Finding{}, false
	}
	return Finding{Code: "correlated-exposure", Severity: "warning",
		Message: fmt.Sprintf("%.0f %% of the %s Pods (%d of %d) run in one Spot capacity pool (%s, %d nodes): one correlated reclaim hits them together",
			e.Share*100, e.Basis, e.Pods, e.Of, e.Pool, e.Nodes),
		Fix: "allow more instance types and zones in the NodePools (see their findings), spread replicas with topologySpreadConstraints on topology.kubernetes.io/zone, and size the warm pool for this pool"}, true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// warmPool applies sizing.AutoSize (size: auto) to the basis Pods of each Spot pool, with the
// warm pool's node shape, and prices it against overprovisioning the same cover.
func warmPool(nodes map[string]*node, items map[string][]sizing.Item, opts Options, findings *[]Finding) WarmPoolAdvice {
	a := WarmPoolAdvice{EBSGiBPerNode: opts.EBSGiBPerNode, RunsPerMonth: opts.RunsPerMonth, ActiveMinutes: opts.ActiveDuration.Minutes()}
	typ := opts.WarmPoolType
	if typ == "" {
		typ = commonSpotType(nodes)
	}
	a.InstanceType = typ
	var shape *sizing.Resources
	for _, n := range sortedValues(nodes) {
		if n.instanceType == typ && n.alloc.MilliCPU > 0 {
			s := n.alloc
			shape = &s
			break
		}
	}
	if typ == "" || shape == nil {
		a.Note = "no node of the warm pool's instance type to take its shape from; pass --warm-pool-type with a type the cluster runs"
		return a
	}
	if shape.Pods == 0 {
		shape.Pods = 110
	}
	size, covers := sizing.AutoSize(items, *shape, 1000)
	a.Size, a.Covers = size, covers
	od, okOD := opts.Prices.OnDemandHourly(typ)
	spot, _ := opts.Prices.SpotHourly(typ)
	if !okOD {
		a.Note = "the warm pool's instance type is not in the price table: costs are 0"
		return a
	}
	ebs := float64(size) * float64(opts.EBSGiBPerNode) * ebsDollarsPerGiBMonth
	active := opts.RunsPerMonth * opts.ActiveDuration.Hours() * float64(size) * od
	a.MonthlyCost = cents(ebs + active)
	a.OverprovisioningMonthlyCost = cents(float64(size) * spot * HoursPerMonth)
	if size > 0 {
		*findings = append(*findings, Finding{Code: "warm-pool", Severity: "info",
			Message: fmt.Sprintf("size: auto would keep %d hibernated %s (covering %s): $%.2f a month, against $%.2f for overprovisioning the same cover",
				size, typ, covers, a.MonthlyCost, a.OverprovisioningMonthlyCost)})
	}
	return a
}

// sortedValues lists the map's values in the order of their keys.
func sortedValues[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// commonSpotType is the instance type of most Spot nodes (else of most nodes), ties by name.
func commonSpotType(nodes map[string]*node) string {
	pick := func(spotOnly bool) string {
		count := map[string]int{}
		for _, n := range nodes {
			if n.instanceType != "" && n.alloc.MilliCPU > 0 && (!spotOnly || n.capacityType == CapacitySpot) && n.priced {
				count[n.instanceType]++
			}
		}
		best := ""
		for _, t := range sortedKeys(count) {
			if best == "" || count[t] > count[best] {
				best = t
			}
		}
		return best
	}
	if t := pick(true); t != "" {
		return t
	}
	return pick(false)
}

// nodeRequirement is one entry of a NodePool's spec.template.spec.requirements.
type nodeRequirement struct {
	Key      string
	Operator string
	Values   []string
}

func nodePools(list []unstructured.Unstructured, nodes map[string]*node, findings *[]Finding) []NodePool {
	out := []NodePool{}
	for i := range list {
		u := &list[i]
		np := NodePool{Name: u.GetName(), InstanceTypes: []string{}, Zones: []string{}}
		// NoCopy: the deep copy of the Nested* getters panics on values JSON never produces.
		raw, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "template", "spec", "requirements")
		reqs, _ := raw.([]any)
		byKey := map[string]nodeRequirement{}
		for _, r := range reqs {
			m, ok := r.(map[string]any)
			if !ok {
				continue
			}
			nr := nodeRequirement{}
			nr.Key, _ = m["key"].(string)
			nr.Operator, _ = m["operator"].(string)
			if vs, ok := m["values"].([]any); ok {
				for _, v := range vs {
					if s, ok := v.(string); ok {
						nr.Values = append(nr.Values, s)
					}
				}
			}
			byKey[nr.Key] = nr
		}
		ct, hasCT := byKey[v1alpha1.LabelCapacityType]
		switch {
		case !hasCT:
			np.CapacityType = "on-demand (Karpenter's default without a capacity-type requirement)"
		case ct.Operator == "In":
			np.CapacityType = strings.Join(ct.Values, ", ")
			np.SpotAllowed = contains(ct.Values, CapacitySpot)
		case ct.Operator == "NotIn":
			np.CapacityType = "not " + strings.Join(ct.Values, ", ")
			np.SpotAllowed = !contains(ct.Values, CapacitySpot)
		case ct.Operator == "Exists":
			np.CapacityType = "any"
			np.SpotAllowed = true
		default:
			np.CapacityType = ct.Operator
		}
		if r, ok := byKey[v1alpha1.LabelInstanceType]; ok && r.Operator == "In" {
			np.InstanceTypes = append(np.InstanceTypes, r.Values...)
		}
		if r, ok := byKey[v1alpha1.LabelZone]; ok && r.Operator == "In" {
			np.Zones = append(np.Zones, r.Values...)
		}
		cp, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "disruption", "consolidationPolicy")
		np.ConsolidationPolicy, _ = cp.(string)
		if np.ConsolidationPolicy == "" {
			np.ConsolidationPolicy = "WhenEmptyOrUnderutilized"
		}
		observed := map[string]bool{}
		for _, n := range nodes {
			if n.nodePool == np.Name {
				np.Nodes++
				observed[n.instanceType+"/"+n.zone] = true
			}
		}
		np.Constrained = len(np.InstanceTypes) > 0 && len(np.Zones) > 0
		if np.Constrained {
			np.CapacityPools = len(np.InstanceTypes) * len(np.Zones)
		} else {
			np.CapacityPools = len(observed)
		}
		sort.Strings(np.InstanceTypes)
		sort.Strings(np.Zones)
		if !np.SpotAllowed {
			*findings = append(*findings, Finding{Code: "nodepool-no-spot", Severity: "warning",
				Message: fmt.Sprintf("NodePool %s does not allow Spot (%s)", np.Name, np.CapacityType),
				Fix:     "add a requirement karpenter.sh/capacity-type In [spot, on-demand]: Karpenter prefers Spot and falls back to On-Demand"})
		}
		if np.SpotAllowed && np.Constrained && np.CapacityPools < MinCapacityPools {
			*findings = append(*findings, Finding{Code: "nodepool-few-pools", Severity: "warning",
				Message: fmt.Sprintf("NodePool %s allows Spot in only %d capacity pools (%d instance types × %d zone(s)): one correlated reclaim can take most of its nodes, and Spot shortages hit it whole",
					np.Name, np.CapacityPools, len(np.InstanceTypes), len(np.Zones)),
				Fix: fmt.Sprintf("allow at least %d pools: similar sizes from several families (e.g. instance-category In [c, m, r], instance-cpu In [2, 4]) in every zone", MinCapacityPools)})
		}
		if np.SpotAllowed && np.ConsolidationPolicy == "WhenEmpty" {
			*findings = append(*findings, Finding{Code: "nodepool-when-empty", Severity: "info",
				Message: fmt.Sprintf("NodePool %s consolidates WhenEmpty: a node launched On-Demand during a Spot shortage stays On-Demand until it is empty", np.Name),
				Fix:     "use consolidationPolicy: WhenEmptyOrUnderutilized (Karpenter then replaces On-Demand with Spot when a single cheaper node can take over)"})
		}
		out = append(out, np)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

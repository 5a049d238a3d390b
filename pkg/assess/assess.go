package assess

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// Capacity types as Karpenter names them.
const (
	CapacitySpot     = "spot"
	CapacityOnDemand = "on-demand"
)

// node is a Node with its price.
type node struct {
	name, instanceType, zone, capacityType, nodePool string
	alloc                                            sizing.Resources
	onDemand, spot                                   float64 // USD per hour; 0 when unpriced
	priced                                           bool
}

func (n *node) pool() string { return n.instanceType + "/" + n.zone + "/" + n.capacityType }

func (n *node) hourly() float64 {
	if n.capacityType == CapacitySpot {
		return n.spot
	}
	return n.onDemand
}

// Assess builds the report from a snapshot. It never fails: what it cannot judge becomes a
// finding.
func Assess(s *Snapshot, opts Options) *Report {
	opts.defaults()
	if opts.Prices == nil {
		p, err := EmbeddedPrices()
		if err != nil {
			panic(err) // the embedded table is tested
		}
		opts.Prices = p
	}
	r := &Report{SchemaVersion: SchemaVersion, GeneratedAt: opts.Now.UTC().Format(time.RFC3339), Scope: opts.Scope,
		Prices:    PriceInfo{Source: opts.Prices.Source, Date: opts.Prices.Date, Region: opts.Prices.Region, SpotDiscount: opts.Prices.SpotDiscount},
		Workloads: []Workload{}, Unclassified: []Unclassified{}, Findings: []Finding{}}
	kinds := make([]string, 0, len(s.ListErrors))
	for k := range s.ListErrors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		r.Findings = append(r.Findings, Finding{Code: "list-failed", Severity: "warning",
			Message: fmt.Sprintf("could not list %s: %s; the report leaves them out", k, s.ListErrors[k]),
			Fix:     "grant the read verbs of manifests/assess/clusterrole.yaml, or ignore if the kind is not installed"})
	}
	nodes := priceNodes(s.Nodes, opts.Prices, &r.Findings)
	ix := buildIndex(s)
	cfg := policy.DefaultConfig()
	groups, unclassified := workloads(s, ix, cfg, opts.Now, &r.Findings)
	r.Unclassified = append(r.Unclassified, unclassified...)

	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	r.Summary = Summary{Nodes: len(s.Nodes), ByClass: map[Class]int{}}
	for _, c := range Classes {
		r.Summary.ByClass[c] = 0
	}
	pending := 0
	ordered := make([]*group, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		ordered = append(ordered, g)
		g.verdict = Classify(g.spec, opts.NoticeBudget)
		w := Workload{Namespace: g.spec.Namespace, Kind: g.spec.Kind, Name: g.spec.Name, Class: g.verdict.Class,
			Tier: g.verdict.Tier, Protected: g.verdict.Protected, Replicas: 1, Pods: len(g.pods), Reasons: g.verdict.Reasons}
		if w.Reasons == nil {
			w.Reasons = []Reason{}
		}
		if g.spec.Replicas != nil {
			w.Replicas = *g.spec.Replicas
		}
		cpu, mem := templateRequests(g.spec.Template.Spec)
		if !cpu.IsZero() {
			w.PodCPU = cpu.String()
		}
		if !mem.IsZero() {
			w.PodMemory = mem.String()
		}
		for _, p := range g.pods {
			n := nodes[p.Spec.NodeName]
			if n == nil {
				pending++
				continue
			}
			if !n.priced {
				r.Summary.UnpricedPods++
				continue
			}
			share := podShare(p, n)
			w.MonthlyCost += share * n.hourly() * HoursPerMonth
			w.MonthlyOnDemand += share * n.onDemand * HoursPerMonth
			w.MonthlySpot += share * n.spot * HoursPerMonth
			if n.capacityType == CapacitySpot {
				w.OnSpotPods++
			}
		}
		w.MonthlyCost, w.MonthlyOnDemand, w.MonthlySpot = cents(w.MonthlyCost), cents(w.MonthlyOnDemand), cents(w.MonthlySpot)
		w.MonthlySavings = cents(w.MonthlyOnDemand - w.MonthlySpot)
		g.out = w
		r.Workloads = append(r.Workloads, w)
		r.Summary.Workloads++
		r.Summary.Pods += len(g.pods)
		r.Summary.ByClass[w.Class]++
		r.Summary.MonthlyCost += w.MonthlyCost
		r.Summary.MonthlyOnDemand += w.MonthlyOnDemand
		r.Summary.MonthlySpot += w.MonthlySpot
		if w.Class == ClassPoorFit {
			r.Summary.PoorFitSavings += w.MonthlySavings
		} else {
			r.Summary.PossibleSavings += w.MonthlySavings
			r.Summary.RemainingSavings += max(0, w.MonthlyCost-w.MonthlySpot)
		}
	}
	for _, f := range []*float64{&r.Summary.MonthlyCost, &r.Summary.MonthlyOnDemand, &r.Summary.MonthlySpot,
		&r.Summary.PossibleSavings, &r.Summary.RemainingSavings, &r.Summary.PoorFitSavings} {
		*f = cents(*f)
	}
	if pending > 0 {
		r.Findings = append(r.Findings, Finding{Code: "pods-not-on-nodes", Severity: "info",
			Message: fmt.Sprintf("%d Pods are not bound to a listed node (Pending): they are classified but not priced", pending)})
	}
	if r.Summary.UnpricedPods > 0 {
		r.Findings = append(r.Findings, Finding{Code: "unpriced-pods", Severity: "warning",
			Message: fmt.Sprintf("%d Pods run on nodes without a known price: their cost and savings are left out", r.Summary.UnpricedPods),
			Fix:     "see the nodes-without-instance-type and unknown-instance-type findings; --prices FILE adds types"})
	}
	r.Curve = savingsCurve(r.Workloads, r.Summary.PossibleSavings)
	r.Cluster = clusterFindings(s, nodes, ordered, opts, &r.Findings)
	r.groups, r.snapshot, r.prices = ordered, s, opts.Prices
	return r
}

func cents(v float64) float64 { return math.Round(v*100) / 100 }

// priceNodes reads each Node's type, zone and capacity type and prices it. Nodes the table
// cannot price become findings.
func priceNodes(list []corev1.Node, prices *PriceTable, findings *[]Finding) map[string]*node {
	out := make(map[string]*node, len(list))
	noType, noCapacity, noAlloc := map[string]bool{}, map[string]bool{}, map[string]bool{}
	unknown := map[string]bool{}
	for i := range list {
		n := &list[i]
		nd := &node{name: n.Name, zone: n.Labels[v1alpha1.LabelZone], nodePool: n.Labels["karpenter.sh/nodepool"],
			alloc: sizing.FromList(n.Status.Allocatable)}
		nd.instanceType = n.Labels[v1alpha1.LabelInstanceType]
		if nd.instanceType == "" {
			nd.instanceType = n.Labels["beta.kubernetes.io/instance-type"]
		}
		switch ct := n.Labels[v1alpha1.LabelCapacityType]; {
		case ct == CapacitySpot || n.Labels[LabelEKSCapacityType] == "SPOT":
			nd.capacityType = CapacitySpot
		case ct != "" || n.Labels[LabelEKSCapacityType] != "":
			nd.capacityType = CapacityOnDemand
		default:
			nd.capacityType = CapacityOnDemand
			if n.Labels[v1alpha1.LabelPool] == "" { // pool nodes are On-Demand by design
				noCapacity[n.Name] = true
			}
		}
		switch {
		case nd.instanceType == "":
			noType[n.Name] = true
		case nd.alloc.MilliCPU <= 0 || nd.alloc.Memory <= 0:
			noAlloc[n.Name] = true
		default:
			od, ok := prices.OnDemandHourly(nd.instanceType)
			if !ok {
				unknown[nd.instanceType] = true
				break
			}
			nd.onDemand = od
			nd.spot, _ = prices.SpotHourly(nd.instanceType)
			nd.priced = true
		}
		out[n.Name] = nd
	}
	if len(noType) > 0 {
		*findings = append(*findings, Finding{Code: "nodes-without-instance-type", Severity: "warning",
			Message: fmt.Sprintf("%s no %s label (%s): their Pods are not priced", nodesHave(len(noType)), v1alpha1.LabelInstanceType, firstFew(noType)),
			Fix:     "label the nodes with their EC2 instance type (the kubelet's cloud provider does this on EKS)"})
	}
	if len(noAlloc) > 0 {
		*findings = append(*findings, Finding{Code: "nodes-without-allocatable", Severity: "warning",
			Message: fmt.Sprintf("%s no CPU or memory allocatable (%s): their Pods are not priced", nodesHave(len(noAlloc)), firstFew(noAlloc))})
	}
	if len(unknown) > 0 {
		*findings = append(*findings, Finding{Code: "unknown-instance-type", Severity: "warning",
			Message: fmt.Sprintf("instance types not in the price table (%s): their Pods are not priced", joinSorted(unknown)),
			Fix:     "pass --prices FILE with their onDemandHourly prices (docs/ASSESS.md)"})
	}
	if len(noCapacity) > 0 {
		*findings = append(*findings, Finding{Code: "nodes-without-capacity-type", Severity: "info",
			Message: fmt.Sprintf("%s neither %s nor %s (%s): counted as On-Demand", nodesHave(len(noCapacity)), v1alpha1.LabelCapacityType, LabelEKSCapacityType, firstFew(noCapacity))})
	}
	return out
}

func nodesHave(n int) string {
	if n == 1 {
		return "1 node has"
	}
	return fmt.Sprintf("%d nodes have", n)
}

func firstFew(m map[string]bool) string {
	names := strings.Split(joinSorted(m), ", ")
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	return strings.Join(names, ", ")
}

// podShare is the Pod's share of its node: its dominant request over the node's allocatable
// (the larger of the CPU and memory fractions, at most 1). Unused capacity is not charged.
func podShare(p *corev1.Pod, n *node) float64 {
	req := sizing.PodResources(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
	var share float64
	if n.alloc.MilliCPU > 0 {
		share = float64(req.MilliCPU) / float64(n.alloc.MilliCPU)
	}
	if n.alloc.Memory > 0 {
		share = max(share, float64(req.Memory)/float64(n.alloc.Memory))
	}
	return min(share, 1)
}

func podItem(name string, p *corev1.Pod) sizing.Item {
	return sizing.Item{Name: name, Resources: sizing.PodResources(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))}
}

func templateRequests(spec corev1.PodSpec) (cpu, mem resource.Quantity) {
	reqs := resourcehelper.PodRequests(&corev1.Pod{Spec: spec}, resourcehelper.PodResourcesOptions{})
	return reqs[corev1.ResourceCPU], reqs[corev1.ResourceMemory]
}

// savingsCurve orders the workloads that are not poor-fit by monthly savings per unit of risk
// (ready 1, ready-with-changes 2, checkpoint-needed 4) and accumulates them.
func savingsCurve(ws []Workload, total float64) Curve {
	var cand []Workload
	for _, w := range ws {
		if w.Class != ClassPoorFit && w.MonthlySavings > 0 {
			cand = append(cand, w)
		}
	}
	sort.SliceStable(cand, func(i, j int) bool {
		a, b := cand[i].MonthlySavings/cand[i].Class.risk(), cand[j].MonthlySavings/cand[j].Class.risk()
		if a != b {
			return a > b
		}
		return cand[i].Ref() < cand[j].Ref()
	})
	c := Curve{Total: cents(total), Points: []CurvePoint{}}
	cum := 0.0
	for i, w := range cand {
		cum += w.MonthlySavings
		pct := 0.0
		if total > 0 {
			pct = math.Round(cum/total*1000) / 10
		}
		c.Points = append(c.Points, CurvePoint{Rank: i + 1, Workload: w.Ref(), Class: w.Class, MonthlySavings: w.MonthlySavings,
			Cumulative: cents(cum), CumulativePercent: pct})
		if c.For80Percent == 0 && pct >= 80 {
			c.For80Percent = i + 1
		}
	}
	if len(c.Points) == 0 {
		c.Headline = "no Spot savings to make: no priced workload that is not poor-fit"
		return c
	}
	p := c.Points[c.For80Percent-1]
	c.Headline = fmt.Sprintf("the first %d of %d workloads give %.0f %% of the possible savings ($%.2f of $%.2f a month)",
		c.For80Percent, len(c.Points), p.CumulativePercent, p.Cumulative, c.Total)
	return c
}

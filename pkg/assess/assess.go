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
		opts.Prices = mustEmbeddedPrices()
	}
	r := newReport(opts)
	r.Findings = append(r.Findings, listFailedFindings(s.ListErrors)...)
	nodes := priceNodes(s.Nodes, opts.Prices, &r.Findings)
	groups, unclassified := workloads(s, buildIndex(s), policy.DefaultConfig(), opts.Now, &r.Findings)
	r.Unclassified = append(r.Unclassified, unclassified...)

	ordered := sortedValues(groups) // by namespace, kind and name
	r.Summary = newSummary(len(s.Nodes))
	unbound := 0
	for _, g := range ordered {
		g.verdict = Classify(g.spec, opts.NoticeBudget)
		w, pending, unpriced := workloadRow(g, nodes)
		g.out = w
		r.Workloads = append(r.Workloads, w)
		r.Summary.add(w)
		r.Summary.UnpricedPods += unpriced
		unbound += pending
	}
	r.Summary.roundMoney()
	r.Findings = append(r.Findings, pricingFindings(unbound, r.Summary.UnpricedPods)...)
	r.Curve = savingsCurve(r.Workloads, r.Summary.PossibleSavings)
	r.Cluster = clusterFindings(s, nodes, ordered, opts, &r.Findings)
	r.groups, r.snapshot, r.prices = ordered, s, opts.Prices
	return r
}

// mustEmbeddedPrices is the embedded price table, which its tests keep valid.
func mustEmbeddedPrices() *PriceTable {
	p, err := EmbeddedPrices()
	if err != nil {
		panic(err) // the embedded table is tested
	}
	return p
}

// newReport is an empty report of the options' time, scope and prices.
func newReport(opts Options) *Report {
	return &Report{SchemaVersion: SchemaVersion, GeneratedAt: opts.Now.UTC().Format(time.RFC3339), Scope: opts.Scope,
		Prices:    PriceInfo{Source: opts.Prices.Source, Date: opts.Prices.Date, Region: opts.Prices.Region, SpotDiscount: opts.Prices.SpotDiscount},
		Workloads: []Workload{}, Unclassified: []Unclassified{}, Findings: []Finding{}}
}

// listFailedFindings names each kind that could not be listed, by kind.
func listFailedFindings(listErrors map[string]string) []Finding {
	var out []Finding
	for _, k := range sortedKeys(listErrors) {
		out = append(out, Finding{Code: "list-failed", Severity: "warning",
			Message: fmt.Sprintf("could not list %s: %s; the report leaves them out", k, listErrors[k]),
			Fix:     "grant the read verbs of manifests/assess/clusterrole.yaml, or ignore if the kind is not installed"})
	}
	return out
}

// newSummary is the summary before any workload: every class at 0.
func newSummary(nodes int) Summary {
	s := Summary{Nodes: nodes, ByClass: map[Class]int{}}
	for _, c := range Classes {
		s.ByClass[c] = 0
	}
	return s
}

// add counts a workload, its Pods and its money into the totals.
func (s *Summary) add(w Workload) {
	s.Workloads++
	s.Pods += w.Pods
	s.ByClass[w.Class]++
	s.MonthlyCost += w.MonthlyCost
	s.MonthlyOnDemand += w.MonthlyOnDemand
	s.MonthlySpot += w.MonthlySpot
	if w.Class == ClassPoorFit {
		s.PoorFitSavings += w.MonthlySavings
	} else {
		s.PossibleSavings += w.MonthlySavings
		s.RemainingSavings += max(0, w.MonthlyCost-w.MonthlySpot)
	}
}

// roundMoney rounds the money totals to cents.
func (s *Summary) roundMoney() {
	for _, f := range []*float64{&s.MonthlyCost, &s.MonthlyOnDemand, &s.MonthlySpot,
		&s.PossibleSavings, &s.RemainingSavings, &s.PoorFitSavings} {
		*f = cents(*f)
	}
}

// workloadRow is the report's row of a classified group. pending counts its Pods not bound to
// a listed node, unpriced those on nodes without a price.
func workloadRow(g *group, nodes map[string]*node) (w Workload, pending, unpriced int) {
	w = Workload{Namespace: g.spec.Namespace, Kind: g.spec.Kind, Name: g.spec.Name, Class: g.verdict.Class,
		Tier: g.verdict.Tier, Protected: g.verdict.Protected, Replicas: g.spec.desiredReplicas(), Pods: len(g.pods), Reasons: g.verdict.Reasons}
	if w.Reasons == nil {
		w.Reasons = []Reason{}
	}
	cpu, mem := templateRequests(g.spec.Template.Spec)
	if !cpu.IsZero() {
		w.PodCPU = cpu.String()
	}
	if !mem.IsZero() {
		w.PodMemory = mem.String()
	}
	pending, unpriced = priceWorkload(&w, g.pods, nodes)
	return w, pending, unpriced
}

// priceWorkload adds up the monthly cost of the Pods' share of their nodes, as placed, all
// On-Demand and all Spot, rounded to cents. It returns how many Pods it could not price
// because they are not bound to a listed node (pending) or their node has no price.
func priceWorkload(w *Workload, pods []*corev1.Pod, nodes map[string]*node) (pending, unpriced int) {
	for _, p := range pods {
		n := nodes[p.Spec.NodeName]
		if n == nil {
			pending++
			continue
		}
		if !n.priced {
			unpriced++
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
	return pending, unpriced
}

// pricingFindings report the Pods left out of the cost figures.
func pricingFindings(pending, unpriced int) []Finding {
	var out []Finding
	if pending > 0 {
		out = append(out, Finding{Code: "pods-not-on-nodes", Severity: "info",
			Message: fmt.Sprintf("%d Pods are not bound to a listed node (Pending): they are classified but not priced", pending)})
	}
	if unpriced > 0 {
		out = append(out, Finding{Code: "unpriced-pods", Severity: "warning",
			Message: fmt.Sprintf("%d Pods run on nodes without a known price: their cost and savings are left out", unpriced),
			Fix:     "see the nodes-without-instance-type and unknown-instance-type findings; --prices FILE adds types"})
	}
	return out
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

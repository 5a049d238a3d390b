package assess

// SchemaVersion names the JSON schema of Report (docs/ASSESS.md "JSON schema"). Fields are only
// ever added under this version; a rename or removal bumps it.
const SchemaVersion = "lifeboat.dev/assess/v1"

// Class is a workload's Spot fit, from easiest to hardest.
type Class string

const (
	// ClassReady runs on Spot as it is.
	ClassReady Class = "ready"
	// ClassReadyWithChanges runs on Spot once the listed configuration fixes are applied.
	ClassReadyWithChanges Class = "ready-with-changes"
	// ClassCheckpointNeeded runs on Spot only if the application saves and resumes its progress.
	ClassCheckpointNeeded Class = "checkpoint-needed"
	// ClassPoorFit should stay On-Demand whatever the engineering (quorum systems, primaries,
	// node-local data).
	ClassPoorFit Class = "poor-fit"
)

// Classes lists the classes from easiest to hardest.
var Classes = []Class{ClassReady, ClassReadyWithChanges, ClassCheckpointNeeded, ClassPoorFit}

func (c Class) rank() int {
	for i, x := range Classes {
		if x == c {
			return i
		}
	}
	return len(Classes)
}

// risk weighs a class in the savings curve: savings per unit of risk orders the workloads.
func (c Class) risk() float64 {
	return map[Class]float64{ClassReady: 1, ClassReadyWithChanges: 2, ClassCheckpointNeeded: 4, ClassPoorFit: 16}[c]
}

// Report is the whole assessment; `lifeboat assess -o json` prints it as is.
type Report struct {
	SchemaVersion string `json:"schemaVersion"`
	GeneratedAt   string `json:"generatedAt"`
	// Scope is "all namespaces" or the namespace assessed.
	Scope        string         `json:"scope"`
	Prices       PriceInfo      `json:"prices"`
	Summary      Summary        `json:"summary"`
	Workloads    []Workload     `json:"workloads"`
	Unclassified []Unclassified `json:"unclassified"`
	Curve        Curve          `json:"savingsCurve"`
	Cluster      Cluster        `json:"cluster"`
	Findings     []Finding      `json:"findings"`

	// What Scenario needs beyond the published figures.
	groups   []*group
	snapshot *Snapshot
	prices   *PriceTable
}

// PriceInfo says which prices the figures use.
type PriceInfo struct {
	Source       string  `json:"source"`
	Date         string  `json:"date"`
	Region       string  `json:"region"`
	SpotDiscount float64 `json:"spotDiscount"`
}

// Summary totals the workloads. Money is USD per month (730 h).
type Summary struct {
	Nodes     int           `json:"nodes"`
	Pods      int           `json:"pods"`
	Workloads int           `json:"workloads"`
	ByClass   map[Class]int `json:"byClass"`
	// MonthlyCost is what the workloads' share of their nodes costs as placed now.
	MonthlyCost float64 `json:"monthlyCost"`
	// MonthlyOnDemand and MonthlySpot price the same shares all On-Demand and all Spot.
	MonthlyOnDemand float64 `json:"monthlyOnDemand"`
	MonthlySpot     float64 `json:"monthlySpot"`
	// PossibleSavings is MonthlyOnDemand − MonthlySpot of the workloads that are not poor-fit.
	PossibleSavings float64 `json:"possibleSavings"`
	// RemainingSavings is what moving the not-poor-fit workloads still on On-Demand would add.
	RemainingSavings float64 `json:"remainingSavings"`
	// PoorFitSavings is what Spot would save on the poor-fit workloads: money left on the table
	// on purpose (not on the savings curve).
	PoorFitSavings float64 `json:"poorFitSavings"`
	// UnpricedPods run on nodes whose instance type is unknown or not in the price table.
	UnpricedPods int `json:"unpricedPods"`
}

// Workload is one Deployment, StatefulSet, Job, CronJob, Argo Rollout, bare Pod or ReplicaSet
// without an owner.
type Workload struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Class     Class  `json:"class"`
	// Tier is the Lifeboat tier it would get (docs/ARCHITECTURE.md "Policy"); empty for kinds Lifeboat
	// does not protect.
	Tier string `json:"tier"`
	// Protected says whether Lifeboat's labels protect it today.
	Protected bool `json:"protected"`
	// Replicas is the desired count (Jobs: parallelism; bare Pods: 1).
	Replicas int32 `json:"replicas"`
	// Pods counts its running (non-terminal) Pods.
	Pods int `json:"pods"`
	// PodCPU and PodMemory are one Pod's requests ("" when none are set).
	PodCPU          string   `json:"podCPU"`
	PodMemory       string   `json:"podMemory"`
	MonthlyCost     float64  `json:"monthlyCost"`
	MonthlyOnDemand float64  `json:"monthlyOnDemand"`
	MonthlySpot     float64  `json:"monthlySpot"`
	MonthlySavings  float64  `json:"monthlySavings"`
	OnSpotPods      int      `json:"onSpotPods"`
	Reasons         []Reason `json:"reasons"`
}

// Ref is "namespace/kind/name".
func (w Workload) Ref() string { return w.Namespace + "/" + lower(w.Kind) + "/" + w.Name }

// Reason is one thing that keeps a workload from the ready class, and its fix.
type Reason struct {
	Code ReasonCode `json:"code"`
	// Class is the class this reason alone implies; the workload's class is its hardest reason's.
	Class   Class  `json:"class"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// Unclassified are Pods assess cannot judge (an owner of a kind it does not know).
type Unclassified struct {
	Namespace string `json:"namespace"`
	OwnerKind string `json:"ownerKind"`
	OwnerName string `json:"ownerName"`
	Pods      int    `json:"pods"`
	Reason    string `json:"reason"`
}

// Curve is the savings curve: workloads by savings per unit of risk, cumulative.
type Curve struct {
	Headline string       `json:"headline"`
	Total    float64      `json:"totalMonthlySavings"`
	Points   []CurvePoint `json:"points"`
	// For80Percent is how many workloads give 80 % of the total.
	For80Percent int `json:"workloadsFor80Percent"`
}

// CurvePoint is one workload on the curve.
type CurvePoint struct {
	Rank              int     `json:"rank"`
	Workload          string  `json:"workload"`
	Class             Class   `json:"class"`
	MonthlySavings    float64 `json:"monthlySavings"`
	Cumulative        float64 `json:"cumulativeMonthlySavings"`
	CumulativePercent float64 `json:"cumulativePercent"`
}

// Cluster holds the cluster-wide findings.
type Cluster struct {
	NodePools     []NodePool     `json:"nodePools"`
	CapacityPools []CapacityPool `json:"capacityPools"`
	Exposure      Exposure       `json:"exposure"`
	WarmPool      WarmPoolAdvice `json:"warmPool"`
}

// NodePool is a Karpenter NodePool's Spot readiness.
type NodePool struct {
	Name         string `json:"name"`
	SpotAllowed  bool   `json:"spotAllowed"`
	CapacityType string `json:"capacityTypes"`
	// InstanceTypes and Zones are the NodePool's explicit lists; empty when it does not pin them
	// (then CapacityPools counts what its nodes show, and Constrained is false).
	InstanceTypes       []string `json:"instanceTypes"`
	Zones               []string `json:"zones"`
	CapacityPools       int      `json:"capacityPools"`
	Constrained         bool     `json:"constrained"`
	ConsolidationPolicy string   `json:"consolidationPolicy"`
	Nodes               int      `json:"nodes"`
}

// CapacityPool is one instance type × zone × capacity type with nodes.
type CapacityPool struct {
	InstanceType  string `json:"instanceType"`
	Zone          string `json:"zone"`
	CapacityType  string `json:"capacityType"`
	Nodes         int    `json:"nodes"`
	Pods          int    `json:"pods"`
	EligiblePods  int    `json:"eligiblePods"`
	ProtectedPods int    `json:"protectedPods"`
}

// Exposure is the correlated-reclaim exposure: the largest share of Pods in one Spot pool.
type Exposure struct {
	// Basis is "protected" when some Pods are protected today, else "eligible" (the Pods of
	// workloads that are not poor-fit, as if Lifeboat protected them).
	Basis string  `json:"basis"`
	Pool  string  `json:"pool"`
	Pods  int     `json:"pods"`
	Of    int     `json:"of"`
	Share float64 `json:"share"`
	// Nodes of that pool: a burst reclaims them together.
	Nodes int    `json:"nodes"`
	Note  string `json:"note,omitempty"`
}

// WarmPoolAdvice is the warm pool `size: auto` would pick, and what it costs.
type WarmPoolAdvice struct {
	InstanceType string `json:"instanceType"`
	Size         int    `json:"size"`
	Covers       string `json:"covers"`
	// MonthlyCost: hibernated EBS all month plus RunsPerMonth activations of ActiveMinutes.
	MonthlyCost float64 `json:"monthlyCost"`
	// OverprovisioningMonthlyCost keeps the same cover as balloon nodes at the Spot price.
	OverprovisioningMonthlyCost float64 `json:"overprovisioningMonthlyCost"`
	EBSGiBPerNode               int     `json:"ebsGiBPerNode"`
	RunsPerMonth                float64 `json:"runsPerMonth"`
	ActiveMinutes               float64 `json:"activeMinutes"`
	Note                        string  `json:"note,omitempty"`
}

// Finding is a cluster-level observation or a problem with the input.
type Finding struct {
	Code     string `json:"code"`
	Severity string `json:"severity"` // info, warning
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`
}

// Package v1alpha1 holds Lifeboat's API: the WarmPool resource and the well-known labels, taints
// and annotations that are the contract between the webhook, the scheduler and the controller
// (see docs and docs/ARCHITECTURE.md). Change a name here only with a reason written in the change.
package v1alpha1

const (
	// Group is the API group of Lifeboat's resources and the prefix of its labels.
	Group = "lifeboat.dev"

	// DefaultNamespace is where Lifeboat's own components run. The webhook never touches it.
	DefaultNamespace = "lifeboat-system"
)

// Policy labels, set by users on Namespaces and workloads.
const (
	// LabelSpot on a Namespace or workload: "protected" or "off". A workload's value wins.
	LabelSpot = Group + "/spot"
	// LabelPDBMode on a Namespace: "enforce" (default) or "warn".
	LabelPDBMode = Group + "/pdb-mode"
	// LabelTier on a workload or Pod template: one of the Tier values.
	LabelTier = Group + "/tier"
	// LabelProtected is written by the webhook on every Pod it protected ("true").
	LabelProtected = Group + "/protected"

	SpotProtected = "protected"
	SpotOff       = "off"

	PDBModeEnforce = "enforce"
	PDBModeWarn    = "warn"
)

// Tier is a placement tier (docs/ARCHITECTURE.md "Tiers").
type Tier string

const (
	TierCritical     Tier = "critical"
	TierStateless    Tier = "stateless"
	TierCheckpointed Tier = "checkpointed"
	TierBestEffort   Tier = "best-effort"
)

// Warm-pool nodes.
const (
	// LabelPool names the WarmPool a node belongs to.
	LabelPool = Group + "/pool"
	// LabelState is the node's pool state: one of the NodeState values.
	LabelState = Group + "/state"
	// TaintLifeboat (value: pool name, effect NoSchedule) is on every pool node, always, and is
	// never tolerated in a Pod spec: only the lifeboat scheduler lets protected Pods past it, so
	// Karpenter never counts pool capacity as usable and always launches replacements.
	TaintLifeboat = Group + "/lifeboat"
	// TaintStandby (NoSchedule) is on pool nodes while warming, hibernated or resuming.
	TaintStandby = Group + "/standby"
	// TaintInterrupted (NoSchedule) marks a node that received an interruption notice; the
	// lifeboat scheduler never places Pods there.
	TaintInterrupted = Group + "/interrupted"
	// TaintSpot is the default key of the Spot taint that protected Pods tolerate.
	TaintSpot = Group + "/spot"
)

// NodeState is the lifecycle state of a pool node, in LabelState.
type NodeState string

const (
	NodeStateWarming  NodeState = "warming"
	NodeStateStandby  NodeState = "standby"
	NodeStateActive   NodeState = "active"
	NodeStateDraining NodeState = "draining"
)

// Scheduling.
const (
	// SchedulerName is the lifeboat scheduler's profile name.
	SchedulerName = "lifeboat-scheduler"
)

// Labels Lifeboat reads from nodes to name a capacity pool (instance type × zone × capacity type).
const (
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelCapacityType = "karpenter.sh/capacity-type"
	// TaintKarpenterDisrupted is Karpenter's taint on nodes it is disrupting.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
)

// PriorityClasses of the tiers (docs/ARCHITECTURE.md "Tiers"), shipped in manifests/webhook/priorityclasses.yaml.
// The webhook assigns only these classes.
const (
	PriorityClassCritical     = "lifeboat-critical"
	PriorityClassStateless    = "lifeboat-stateless"
	PriorityClassCheckpointed = "lifeboat-checkpointed"
	PriorityClassBestEffort   = "lifeboat-best-effort"

	PriorityCritical     int32 = 100000
	PriorityStateless    int32 = 10000
	PriorityCheckpointed int32 = 1000
	// PriorityBestEffort is the cluster's default priority, not below it: an ordinary Pod
	// (priority 0, PreemptLowerPriority) preempts only strictly lower priorities, so a best-effort
	// Pod is no easier to preempt with Lifeboat than without. At -100 (until 2026-12) every
	// Pending ordinary Pod of a reclaim preempted best-effort Jobs, which Karpenter alone never did.
	PriorityBestEffort int32 = 0
)

// TierPriority is the value of a tier's PriorityClass (manifests/webhook/priorityclasses.yaml);
// 0, the cluster's default, for an unknown tier.
func TierPriority(t Tier) int32 {
	switch t {
	case TierCritical:
		return PriorityCritical
	case TierStateless:
		return PriorityStateless
	case TierCheckpointed:
		return PriorityCheckpointed
	default:
		return PriorityBestEffort
	}
}

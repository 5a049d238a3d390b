// Package metrics defines the controller's Prometheus metrics, registered with
// controller-runtime's registry (served on the manager's metrics endpoint). Labels are bounded:
// pool names, states, instance types and zones — never Node or Pod names.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// PoolNodes: lifeboat_pool_nodes{pool,state}.
	PoolNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_pool_nodes",
		Help: "Warm-pool nodes by pool and state (warming, standby, active, draining).",
	}, []string{"pool", "state"})
	// Interruptions: lifeboat_interruptions_total{instance_type,zone}. The label was called
	// pool_type until 2026-12 although it always held the instance type (docs/WARMPOOL.md
	// "Metrics").
	Interruptions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_interruptions_total",
		Help: "Interrupted nodes (first notice per node) by instance type and zone.",
	}, []string{"instance_type", "zone"})
	// ResumeSeconds: lifeboat_resume_seconds{phase}: notice → StartInstances issued
	// (phase=start_instances) and notice → resumed Node Ready (phase=node_ready).
	ResumeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lifeboat_resume_seconds",
		Help:    "Time from the interruption notice to StartInstances (phase=start_instances) and to the resumed Node being Ready (phase=node_ready).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120},
	}, []string{"phase"})
	// HandoffSeconds: lifeboat_handoff_seconds{outcome}: handoff start → node empty.
	HandoffSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lifeboat_handoff_seconds",
		Help:    "Time from the start of a lifeboat node's handoff (cordon) to the node being empty, by outcome (drained, deadline).",
		Buckets: prometheus.ExponentialBuckets(5, 2, 10),
	}, []string{"outcome"})
	// PoolCostDollars: lifeboat_pool_cost_dollars{pool,component}: estimated hourly cost.
	PoolCostDollars = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_pool_cost_dollars",
		Help: "Estimated cost of the pool in dollars per hour, by component: ebs (root volumes of all pool instances, hibernated or not) and compute (running pool instances at the configured On-Demand price).",
	}, []string{"pool", "component"})
	// PoolMonthlyCostDollars: lifeboat_pool_monthly_cost_dollars{pool,protection}.
	PoolMonthlyCostDollars = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_pool_monthly_cost_dollars",
		Help: "Estimated monthly cost of the pool's cover (its desired standby nodes), by protection: warm_pool (hibernated: root volumes) and overprovisioning (the same nodes running as Spot, with their volumes; absent without an On-Demand price).",
	}, []string{"pool", "protection"})
	// ResumeDecisions: lifeboat_resume_decisions_total{outcome}.
	ResumeDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_resume_decisions_total",
		Help: "Resume decisions per interrupted node by outcome (resumed, none_needed, insufficient_standby).",
	}, []string{"outcome"})
)

var (
	// BridgeHolds: lifeboat_bridge_holds_total{workload_kind}: Pods whose eviction the bridge held.
	BridgeHolds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_bridge_holds_total",
		Help: "Protected Pods of interrupted Spot nodes whose eviction Lifeboat held while their replacement started on a lifeboat, by workload kind (Deployment, StatefulSet).",
	}, []string{"workload_kind"})
	// BridgeReleases: lifeboat_bridge_releases_total{reason}.
	BridgeReleases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_bridge_releases_total",
		Help: "Protected Pods of interrupted Spot nodes the bridge let go without waiting for a replacement (no_lifeboat, no_seat, no_time_left, lifeboat_not_ready) or moved (moved: a StatefulSet Pod evicted once its lifeboat was Ready).",
	}, []string{"reason"})
	// BridgeRemoved: lifeboat_bridge_removed_pods_total{outcome}: held Pods of surged
	// Deployments that left: bridged (removed by Lifeboat once the surge was Ready) or gone
	// (evicted after their hold, or killed at the reclaim, before that).
	BridgeRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_bridge_removed_pods_total",
		Help: "Held Pods of surged Deployments that left their interrupted node, by outcome: bridged (removed by Lifeboat once the surge was Ready elsewhere) or gone (evicted after the hold's deadline or killed at the reclaim first).",
	}, []string{"outcome"})
)

func init() {
	crmetrics.Registry.MustRegister(PoolNodes, Interruptions, ResumeSeconds, HandoffSeconds, PoolCostDollars, PoolMonthlyCostDollars, ResumeDecisions,
		BridgeHolds, BridgeReleases, BridgeRemoved)
}

// Results of lifeboat_reclaimback_moves_total.
const (
	ResultTried     = "tried"
	ResultSucceeded = "succeeded"
	ResultAborted   = "aborted"
)

var (
	// ReclaimBackFallbackNodes: lifeboat_reclaimback_fallback_nodes{policy}.
	ReclaimBackFallbackNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_reclaimback_fallback_nodes",
		Help: "Karpenter On-Demand fallback nodes of the NodePools a ReclaimBackPolicy selects that Spot could take back (movable now or moving), by policy.",
	}, []string{"policy"})
	// ReclaimBackMoves: lifeboat_reclaimback_moves_total{result}.
	ReclaimBackMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_reclaimback_moves_total",
		Help: "Reclaim-back moves of On-Demand fallback nodes to Spot, by result: tried (started), succeeded (NodeClaim deleted after the replacements were Ready on Spot), aborted (On-Demand again, or the move timed out: undone and cooled down).",
	}, []string{"result"})
	// ReclaimBackNodeHoursReturned: lifeboat_reclaimback_ondemand_node_hours_returned_total.
	ReclaimBackNodeHoursReturned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lifeboat_reclaimback_ondemand_node_hours_returned_total",
		Help: "Estimated On-Demand node-hours not run thanks to reclaim-back: every node moved back to Spot counts from its move on.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(ReclaimBackFallbackNodes, ReclaimBackMoves, ReclaimBackNodeHoursReturned)
}

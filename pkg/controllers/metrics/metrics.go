// Package metrics defines the controller's Prometheus metrics, registered with
// controller-runtime's registry (served on the manager's metrics endpoint). Labels are bounded:
// pool names, states, instance types and zones — never Node or Pod names.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-k8s/lifeboat/pkg/metricdef"
)

var (
	// PoolNodes: lifeboat_pool_nodes{pool,state}.
	PoolNodes = metricdef.GaugeVec("lifeboat_pool_nodes", "Warm-pool nodes by pool and state (warming, standby, active, draining).", "pool", "state")
	// Interruptions: lifeboat_interruptions_total{instance_type,zone}. The label was called
	// pool_type until 2026-12 although it always held the instance type (docs/WARMPOOL.md
	// "Metrics").
	Interruptions = metricdef.CounterVec("lifeboat_interruptions_total", "Interrupted nodes (first notice per node) by instance type and zone.", "instance_type", "zone")
	// ResumeSeconds: lifeboat_resume_seconds{phase}: notice → StartInstances issued
	// (phase=start_instances) and notice → resumed Node Ready (phase=node_ready).
	ResumeSeconds = metricdef.HistogramVec("lifeboat_resume_seconds", "Time from the interruption notice to StartInstances (phase=start_instances) and to the resumed Node being Ready (phase=node_ready).", []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120}, "phase")
	// HandoffSeconds: lifeboat_handoff_seconds{outcome}: handoff start → node empty.
	HandoffSeconds = metricdef.HistogramVec("lifeboat_handoff_seconds", "Time from the start of a lifeboat node's handoff (cordon) to the node being empty, by outcome (drained, deadline).", prometheus.ExponentialBuckets(5, 2, 10), "outcome")
	// PoolCostDollars: lifeboat_pool_cost_dollars{pool,component}: estimated hourly cost.
	PoolCostDollars = metricdef.GaugeVec("lifeboat_pool_cost_dollars", "Estimated cost of the pool in dollars per hour, by component: ebs (root volumes of all pool instances, hibernated or not) and compute (running pool instances at the configured On-Demand price).", "pool", "component")
	// PoolMonthlyCostDollars: lifeboat_pool_monthly_cost_dollars{pool,protection}.
	PoolMonthlyCostDollars = metricdef.GaugeVec("lifeboat_pool_monthly_cost_dollars", "Estimated monthly cost of the pool's cover (its desired standby nodes), by protection: warm_pool (hibernated: root volumes) and overprovisioning (the same nodes running as Spot, with their volumes; absent without an On-Demand price).", "pool", "protection")
	// ResumeDecisions: lifeboat_resume_decisions_total{outcome}.
	ResumeDecisions = metricdef.CounterVec("lifeboat_resume_decisions_total", "Resume decisions per interrupted node by outcome (resumed, none_needed, insufficient_standby).", "outcome")
)

var (
	// BridgeHolds: lifeboat_bridge_holds_total{workload_kind}: Pods whose eviction the bridge held.
	BridgeHolds = metricdef.CounterVec("lifeboat_bridge_holds_total", "Protected Pods of interrupted Spot nodes whose eviction Lifeboat held while their replacement started on a lifeboat, by workload kind (Deployment, StatefulSet).", "workload_kind")
	// BridgeReleases: lifeboat_bridge_releases_total{reason}.
	BridgeReleases = metricdef.CounterVec("lifeboat_bridge_releases_total", "Protected Pods of interrupted Spot nodes the bridge let go without waiting for a replacement (no_lifeboat, no_seat, no_time_left, lifeboat_not_ready) or moved (moved: a StatefulSet Pod evicted once its lifeboat was Ready; moved_to_seat: evicted straight to its handoff seat's node).", "reason")
	// BridgeRemoved: lifeboat_bridge_removed_pods_total{outcome}: held Pods of surged
	// Deployments that left: bridged (removed by Lifeboat once the surge was Ready) or gone
	// (evicted after their hold, or killed at the reclaim, before that).
	BridgeRemoved = metricdef.CounterVec("lifeboat_bridge_removed_pods_total", "Held Pods of surged Deployments that left their interrupted node, by outcome: bridged (removed by Lifeboat once the surge was Ready elsewhere) or gone (evicted after the hold's deadline or killed at the reclaim first).", "outcome")
)

// Results of lifeboat_reclaimback_moves_total.
const (
	ResultTried     = "tried"
	ResultSucceeded = "succeeded"
	ResultAborted   = "aborted"
)

var (
	// ReclaimBackFallbackNodes: lifeboat_reclaimback_fallback_nodes{policy}.
	ReclaimBackFallbackNodes = metricdef.GaugeVec("lifeboat_reclaimback_fallback_nodes", "Karpenter On-Demand fallback nodes of the NodePools a ReclaimBackPolicy selects that Spot could take back (movable now or moving), by policy.", "policy")
	// ReclaimBackMoves: lifeboat_reclaimback_moves_total{result}.
	ReclaimBackMoves = metricdef.CounterVec("lifeboat_reclaimback_moves_total", "Reclaim-back moves of On-Demand fallback nodes to Spot, by result: tried (started), succeeded (NodeClaim deleted after the replacements were Ready on Spot), aborted (On-Demand again, or the move timed out: undone and cooled down).", "result")
	// ReclaimBackNodeHoursReturned: lifeboat_reclaimback_ondemand_node_hours_returned_total.
	ReclaimBackNodeHoursReturned = metricdef.Counter("lifeboat_reclaimback_ondemand_node_hours_returned_total", "Estimated On-Demand node-hours not run thanks to reclaim-back: every node moved back to Spot counts from its move on.")
)

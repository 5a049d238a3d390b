package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +kubebuilder:object:root=true

// LifeboatTaintsArgs configures the LifeboatTaints filter.
type LifeboatTaintsArgs struct {
	metav1.TypeMeta `json:",inline"`

	// ProtectedPodTaintKeys are taint keys that Pods labelled lifeboat.dev/protected=true pass
	// without tolerating them. Default: [lifeboat.dev/lifeboat].
	ProtectedPodTaintKeys []string `json:"protectedPodTaintKeys,omitempty"`
	// ReservedTaintKeys are taint keys that no Pod toleration passes, wildcards included.
	// Default: [lifeboat.dev/lifeboat, lifeboat.dev/standby].
	ReservedTaintKeys []string `json:"reservedTaintKeys,omitempty"`
}

// +kubebuilder:object:root=true

// LifeboatPlacementArgs configures the LifeboatPlacement filter and score.
type LifeboatPlacementArgs struct {
	metav1.TypeMeta `json:",inline"`

	// InterruptionTaintKeys mark nodes under interruption; such nodes are never chosen.
	// Default: [karpenter.sh/disrupted, lifeboat.dev/interrupted].
	InterruptionTaintKeys []string `json:"interruptionTaintKeys,omitempty"`
	// ReclaimedPoolWait is how long after a lifeboat node's start request a protected Pod it
	// will take may wait for it instead of a node of a Spot capacity pool being reclaimed
	// (one of whose nodes carries lifeboat.dev/interrupted). "0s" disables it. Default: 60s.
	ReclaimedPoolWait *metav1.Duration `json:"reclaimedPoolWait,omitempty"`
	// SeatReleaseWait bounds how long a Pod re-created for its handoff seat (annotation
	// lifeboat.dev/seat-host) waits, out of the scheduling queue, for Lifeboat to delete the
	// seat that holds its room on the seat's node, counted from the Pod's creation; then it is
	// scheduled anyway (the seat's node looks full, so it goes elsewhere). "0s" disables the
	// wait. Default: 5s.
	SeatReleaseWait *metav1.Duration `json:"seatReleaseWait,omitempty"`
}

// +kubebuilder:object:root=true

// CapacityPoolSpreadArgs configures the CapacityPoolSpread score.
type CapacityPoolSpreadArgs struct {
	metav1.TypeMeta `json:",inline"`

	// HotPoolPenalty is how many replicas one recent interruption of a pool is worth.
	// Default: 1. 0 ignores interruption telemetry.
	HotPoolPenalty *int32 `json:"hotPoolPenalty,omitempty"`
	// HotPoolHalfLife is the half-life of an interruption's weight. Default: 10m.
	HotPoolHalfLife *metav1.Duration `json:"hotPoolHalfLife,omitempty"`
	// TelemetryNamespace of the telemetry ConfigMap. Default: lifeboat-system.
	TelemetryNamespace *string `json:"telemetryNamespace,omitempty"`
	// TelemetryConfigMapName of the telemetry ConfigMap. Default: lifeboat-pool-telemetry.
	TelemetryConfigMapName *string `json:"telemetryConfigMapName,omitempty"`
}

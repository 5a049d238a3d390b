package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +kubebuilder:object:root=true

// LifeboatTaintsArgs configures the LifeboatTaints filter.
type LifeboatTaintsArgs struct {
	metav1.TypeMeta

	// ProtectedPodTaintKeys are taint keys that Pods labelled lifeboat.dev/protected=true pass
	// without tolerating them (the lifeboat taint, never tolerated in a Pod spec).
	ProtectedPodTaintKeys []string
	// ReservedTaintKeys are taint keys that no Pod toleration passes, not even a wildcard
	// (`operator: Exists` without a key): pool capacity is reserved for protected Pods and
	// hibernated nodes host nobody.
	ReservedTaintKeys []string
}

// +kubebuilder:object:root=true

// LifeboatPlacementArgs configures the LifeboatPlacement filter and score.
type LifeboatPlacementArgs struct {
	metav1.TypeMeta

	// InterruptionTaintKeys mark nodes under interruption or disruption; nodes carrying any of
	// them (whatever the effect or value) are never chosen.
	InterruptionTaintKeys []string
	// ReclaimedPoolWait is how long after a lifeboat node's start request a protected Pod it
	// will take may wait for it instead of landing on a node of a Spot capacity pool being
	// reclaimed. Zero disables the wait.
	ReclaimedPoolWait metav1.Duration
	// SeatReleaseWait bounds how long a Pod re-created for its handoff seat waits, out of the
	// scheduling queue, for the seat to release its room on the seat's node (counted from the
	// Pod's creation); then it is scheduled anyway. Zero disables the wait.
	SeatReleaseWait metav1.Duration
}

// +kubebuilder:object:root=true

// CapacityPoolSpreadArgs configures the CapacityPoolSpread score.
type CapacityPoolSpreadArgs struct {
	metav1.TypeMeta

	// HotPoolPenalty is how many replicas of the workload one recent interruption of a pool is
	// worth when comparing pools. 0 ignores interruption telemetry.
	HotPoolPenalty int32
	// HotPoolHalfLife is the half-life of an interruption's weight: an interruption that
	// happened one half-life ago counts half.
	HotPoolHalfLife metav1.Duration
	// TelemetryNamespace and TelemetryConfigMapName name the ConfigMap the controller writes
	// (pkg/telemetry).
	TelemetryNamespace     string
	TelemetryConfigMapName string
}

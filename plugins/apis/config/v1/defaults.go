package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

const (
	// DefaultHotPoolPenalty: one interruption in the recent past costs a pool one replica.
	DefaultHotPoolPenalty int32 = 1
	// DefaultHotPoolHalfLife: correlated reclaims of one pool cluster within minutes (>92% of
	// co-interruptions within 3 min, docs/FACTS.md), so the signal should fade within the hour.
	DefaultHotPoolHalfLife = 10 * time.Minute
	// DefaultReclaimedPoolWait: a hibernated lifeboat is Ready ~20 s after its start request
	// (docs/FACTS.md); 60 s covers a slow resume and ends well inside the 120 s notice.
	DefaultReclaimedPoolWait = 60 * time.Second
	// DefaultSeatReleaseWait: the controller deletes a seat in the same pass in which the Pod
	// it kept room for is gone, so the scheduler normally sees the release within a second;
	// 5 s covers a slow watch and costs little if the seat is never released.
	DefaultSeatReleaseWait = 5 * time.Second
)

// RegisterDefaults adds the args' defaulting functions to a scheme.
func RegisterDefaults(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&LifeboatTaintsArgs{}, func(obj interface{}) {
		SetDefaults_LifeboatTaintsArgs(obj.(*LifeboatTaintsArgs))
	})
	scheme.AddTypeDefaultingFunc(&LifeboatPlacementArgs{}, func(obj interface{}) {
		SetDefaults_LifeboatPlacementArgs(obj.(*LifeboatPlacementArgs))
	})
	scheme.AddTypeDefaultingFunc(&CapacityPoolSpreadArgs{}, func(obj interface{}) {
		SetDefaults_CapacityPoolSpreadArgs(obj.(*CapacityPoolSpreadArgs))
	})
	return nil
}

// SetDefaults_LifeboatTaintsArgs sets the contract's taints (docs/ARCHITECTURE.md "Nodes of the
// warm pool").
func SetDefaults_LifeboatTaintsArgs(obj *LifeboatTaintsArgs) { //nolint:revive // scheme naming convention
	if obj.ProtectedPodTaintKeys == nil {
		obj.ProtectedPodTaintKeys = []string{v1alpha1.TaintLifeboat}
	}
	if obj.ReservedTaintKeys == nil {
		obj.ReservedTaintKeys = []string{v1alpha1.TaintLifeboat, v1alpha1.TaintStandby}
	}
}

// SetDefaults_LifeboatPlacementArgs marks Karpenter's and Lifeboat's interruption taints.
func SetDefaults_LifeboatPlacementArgs(obj *LifeboatPlacementArgs) { //nolint:revive // scheme naming convention
	if obj.InterruptionTaintKeys == nil {
		obj.InterruptionTaintKeys = []string{v1alpha1.TaintKarpenterDisrupted, v1alpha1.TaintInterrupted}
	}
	if obj.ReclaimedPoolWait == nil {
		obj.ReclaimedPoolWait = &metav1.Duration{Duration: DefaultReclaimedPoolWait}
	}
	if obj.SeatReleaseWait == nil {
		obj.SeatReleaseWait = &metav1.Duration{Duration: DefaultSeatReleaseWait}
	}
}

// SetDefaults_CapacityPoolSpreadArgs points at the controller's telemetry ConfigMap.
func SetDefaults_CapacityPoolSpreadArgs(obj *CapacityPoolSpreadArgs) { //nolint:revive // scheme naming convention
	if obj.HotPoolPenalty == nil {
		obj.HotPoolPenalty = ptr.To(DefaultHotPoolPenalty)
	}
	if obj.HotPoolHalfLife == nil {
		obj.HotPoolHalfLife = &metav1.Duration{Duration: DefaultHotPoolHalfLife}
	}
	if obj.TelemetryNamespace == nil {
		obj.TelemetryNamespace = ptr.To(telemetry.Namespace)
	}
	if obj.TelemetryConfigMapName == nil {
		obj.TelemetryConfigMapName = ptr.To(telemetry.Name)
	}
}

package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Hand-written: the types are small and flat, and the module carries no code generators.

// DeepCopyInto copies the receiver into out.
func (in *LifeboatTaintsArgs) DeepCopyInto(out *LifeboatTaintsArgs) {
	*out = *in
	out.ProtectedPodTaintKeys = append([]string(nil), in.ProtectedPodTaintKeys...)
	out.ReservedTaintKeys = append([]string(nil), in.ReservedTaintKeys...)
}

// DeepCopy returns a copy of the receiver.
func (in *LifeboatTaintsArgs) DeepCopy() *LifeboatTaintsArgs {
	if in == nil {
		return nil
	}
	out := new(LifeboatTaintsArgs)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *LifeboatTaintsArgs) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the receiver into out.
func (in *LifeboatPlacementArgs) DeepCopyInto(out *LifeboatPlacementArgs) {
	*out = *in
	out.InterruptionTaintKeys = append([]string(nil), in.InterruptionTaintKeys...)
	if in.ReclaimedPoolWait != nil {
		wait := *in.ReclaimedPoolWait
		out.ReclaimedPoolWait = &wait
	}
}

// DeepCopy returns a copy of the receiver.
func (in *LifeboatPlacementArgs) DeepCopy() *LifeboatPlacementArgs {
	if in == nil {
		return nil
	}
	out := new(LifeboatPlacementArgs)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *LifeboatPlacementArgs) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the receiver into out.
func (in *CapacityPoolSpreadArgs) DeepCopyInto(out *CapacityPoolSpreadArgs) {
	*out = *in
	out.HotPoolPenalty = copyPtr(in.HotPoolPenalty)
	out.HotPoolHalfLife = copyPtr(in.HotPoolHalfLife)
	out.TelemetryNamespace = copyPtr(in.TelemetryNamespace)
	out.TelemetryConfigMapName = copyPtr(in.TelemetryConfigMapName)
}

// DeepCopy returns a copy of the receiver.
func (in *CapacityPoolSpreadArgs) DeepCopy() *CapacityPoolSpreadArgs {
	if in == nil {
		return nil
	}
	out := new(CapacityPoolSpreadArgs)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *CapacityPoolSpreadArgs) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func copyPtr[T int32 | string | metav1.Duration](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
)

// RegisterConversions adds conversions between the v1 and internal args to a scheme.
func RegisterConversions(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		addConversion(Convert_v1_LifeboatTaintsArgs_To_config_LifeboatTaintsArgs),
		addConversion(Convert_config_LifeboatTaintsArgs_To_v1_LifeboatTaintsArgs),
		addConversion(Convert_v1_LifeboatPlacementArgs_To_config_LifeboatPlacementArgs),
		addConversion(Convert_config_LifeboatPlacementArgs_To_v1_LifeboatPlacementArgs),
		addConversion(Convert_v1_CapacityPoolSpreadArgs_To_config_CapacityPoolSpreadArgs),
		addConversion(Convert_config_CapacityPoolSpreadArgs_To_v1_CapacityPoolSpreadArgs),
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// addConversion returns the registration of convert as a scheme's conversion from *In to *Out.
func addConversion[In, Out any](convert func(*In, *Out)) func(*runtime.Scheme) error {
	return func(s *runtime.Scheme) error {
		return s.AddConversionFunc((*In)(nil), (*Out)(nil), func(a, b interface{}, _ conversion.Scope) error {
			convert(a.(*In), b.(*Out))
			return nil
		})
	}
}

// Convert_v1_LifeboatTaintsArgs_To_config_LifeboatTaintsArgs converts wire args to internal.
func Convert_v1_LifeboatTaintsArgs_To_config_LifeboatTaintsArgs(in *LifeboatTaintsArgs, out *config.LifeboatTaintsArgs) { //nolint:revive // scheme naming convention
	out.ProtectedPodTaintKeys = append([]string(nil), in.ProtectedPodTaintKeys...)
	out.ReservedTaintKeys = append([]string(nil), in.ReservedTaintKeys...)
}

// Convert_config_LifeboatTaintsArgs_To_v1_LifeboatTaintsArgs converts internal args to wire.
func Convert_config_LifeboatTaintsArgs_To_v1_LifeboatTaintsArgs(in *config.LifeboatTaintsArgs, out *LifeboatTaintsArgs) { //nolint:revive // scheme naming convention
	out.ProtectedPodTaintKeys = append([]string(nil), in.ProtectedPodTaintKeys...)
	out.ReservedTaintKeys = append([]string(nil), in.ReservedTaintKeys...)
}

// Convert_v1_LifeboatPlacementArgs_To_config_LifeboatPlacementArgs converts wire args to internal.
func Convert_v1_LifeboatPlacementArgs_To_config_LifeboatPlacementArgs(in *LifeboatPlacementArgs, out *config.LifeboatPlacementArgs) { //nolint:revive // scheme naming convention
	out.InterruptionTaintKeys = append([]string(nil), in.InterruptionTaintKeys...)
	if in.ReclaimedPoolWait != nil {
		out.ReclaimedPoolWait = *in.ReclaimedPoolWait
	}
	if in.SeatReleaseWait != nil {
		out.SeatReleaseWait = *in.SeatReleaseWait
	}
}

// Convert_config_LifeboatPlacementArgs_To_v1_LifeboatPlacementArgs converts internal args to wire.
func Convert_config_LifeboatPlacementArgs_To_v1_LifeboatPlacementArgs(in *config.LifeboatPlacementArgs, out *LifeboatPlacementArgs) { //nolint:revive // scheme naming convention
	out.InterruptionTaintKeys = append([]string(nil), in.InterruptionTaintKeys...)
	wait, release := in.ReclaimedPoolWait, in.SeatReleaseWait
	out.ReclaimedPoolWait, out.SeatReleaseWait = &wait, &release
}

// Convert_v1_CapacityPoolSpreadArgs_To_config_CapacityPoolSpreadArgs converts wire args to
// internal; unset fields become zero values (defaulting runs before conversion).
func Convert_v1_CapacityPoolSpreadArgs_To_config_CapacityPoolSpreadArgs(in *CapacityPoolSpreadArgs, out *config.CapacityPoolSpreadArgs) { //nolint:revive // scheme naming convention
	out.HotPoolPenalty = ptr.Deref(in.HotPoolPenalty, 0)
	if in.HotPoolHalfLife != nil {
		out.HotPoolHalfLife = *in.HotPoolHalfLife
	}
	out.TelemetryNamespace = ptr.Deref(in.TelemetryNamespace, "")
	out.TelemetryConfigMapName = ptr.Deref(in.TelemetryConfigMapName, "")
}

// Convert_config_CapacityPoolSpreadArgs_To_v1_CapacityPoolSpreadArgs converts internal args to wire.
func Convert_config_CapacityPoolSpreadArgs_To_v1_CapacityPoolSpreadArgs(in *config.CapacityPoolSpreadArgs, out *CapacityPoolSpreadArgs) { //nolint:revive // scheme naming convention
	out.HotPoolPenalty = ptr.To(in.HotPoolPenalty)
	halfLife := in.HotPoolHalfLife
	out.HotPoolHalfLife = &halfLife
	out.TelemetryNamespace = ptr.To(in.TelemetryNamespace)
	out.TelemetryConfigMapName = ptr.To(in.TelemetryConfigMapName)
}

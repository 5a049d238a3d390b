package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
)

func TestValidate(t *testing.T) {
	path := field.NewPath("args")
	validSpread := func(mutate func(*config.CapacityPoolSpreadArgs)) error {
		a := &config.CapacityPoolSpreadArgs{HotPoolPenalty: 1, HotPoolHalfLife: metav1.Duration{Duration: time.Minute},
			TelemetryNamespace: "lifeboat-system", TelemetryConfigMapName: "lifeboat-pool-telemetry"}
		mutate(a)
		return ValidateCapacityPoolSpreadArgs(path, a)
	}
	tests := []struct {
		name    string
		err     error
		wantErr []string // field paths; empty = valid
	}{
		{name: "default taints", err: ValidateLifeboatTaintsArgs(path, &config.LifeboatTaintsArgs{
			ProtectedPodTaintKeys: []string{"lifeboat.dev/lifeboat"}, ReservedTaintKeys: []string{"lifeboat.dev/lifeboat", "lifeboat.dev/standby"}})},
		{name: "empty taint lists are allowed", err: ValidateLifeboatTaintsArgs(path, &config.LifeboatTaintsArgs{})},
		{name: "bad and duplicate taint keys", err: ValidateLifeboatTaintsArgs(path, &config.LifeboatTaintsArgs{
			ProtectedPodTaintKeys: []string{"a/b/c"}, ReservedTaintKeys: []string{"x", "x"}}),
			wantErr: []string{"args.protectedPodTaintKeys[0]", "args.reservedTaintKeys[1]"}},
		{name: "placement needs a taint", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{}),
			wantErr: []string{"args.interruptionTaintKeys"}},
		{name: "placement ok", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}})},
		{name: "reclaimed-pool wait out of range", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}, ReclaimedPoolWait: metav1.Duration{Duration: MaxReclaimedPoolWait + time.Second}}),
			wantErr: []string{"args.reclaimedPoolWait"}},
		{name: "negative reclaimed-pool wait", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}, ReclaimedPoolWait: metav1.Duration{Duration: -time.Second}}),
			wantErr: []string{"args.reclaimedPoolWait"}},
		{name: "seat-release wait out of range", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}, SeatReleaseWait: metav1.Duration{Duration: MaxSeatReleaseWait + time.Second}}),
			wantErr: []string{"args.seatReleaseWait"}},
		{name: "negative seat-release wait", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}, SeatReleaseWait: metav1.Duration{Duration: -time.Second}}),
			wantErr: []string{"args.seatReleaseWait"}},
		{name: "seat-release wait off", err: ValidateLifeboatPlacementArgs(path, &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{"karpenter.sh/disrupted"}, SeatReleaseWait: metav1.Duration{}})},
		{name: "spread ok", err: validSpread(func(*config.CapacityPoolSpreadArgs) {})},
		{name: "penalty 0 needs no half-life", err: validSpread(func(a *config.CapacityPoolSpreadArgs) { a.HotPoolPenalty = 0; a.HotPoolHalfLife.Duration = 0 })},
		{name: "penalty too high", err: validSpread(func(a *config.CapacityPoolSpreadArgs) { a.HotPoolPenalty = MaxHotPoolPenalty + 1 }),
			wantErr: []string{"args.hotPoolPenalty"}},
		{name: "negative half-life", err: validSpread(func(a *config.CapacityPoolSpreadArgs) { a.HotPoolHalfLife.Duration = -time.Second }),
			wantErr: []string{"args.hotPoolHalfLife"}},
		{name: "bad names", err: validSpread(func(a *config.CapacityPoolSpreadArgs) {
			a.TelemetryNamespace = "a.b"
			a.TelemetryConfigMapName = "UPPER"
		}),
			wantErr: []string{"args.telemetryNamespace", "args.telemetryConfigMapName"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.wantErr) == 0 {
				if tt.err != nil {
					t.Fatalf("unexpected error: %v", tt.err)
				}
				return
			}
			if tt.err == nil {
				t.Fatalf("no error, want errors on %v", tt.wantErr)
			}
			for _, f := range tt.wantErr {
				if !strings.Contains(tt.err.Error(), f) {
					t.Errorf("error %q does not name %s", tt.err, f)
				}
			}
		})
	}
}

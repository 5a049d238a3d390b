package scheme_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
)

func load(t *testing.T, yaml string) (*schedconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return options.LoadConfigFromFile(logger, path)
}

func argsOf(cfg *schedconfig.KubeSchedulerConfiguration, profile, plugin string) runtime.Object {
	for _, p := range cfg.Profiles {
		if p.SchedulerName != profile {
			continue
		}
		for _, pc := range p.PluginConfig {
			if pc.Name == plugin {
				return pc.Args
			}
		}
	}
	return nil
}

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: lifeboat-scheduler
  plugins:
    multiPoint:
      enabled: [{name: LifeboatTaints}, {name: LifeboatPlacement}, {name: CapacityPoolSpread}]
      disabled: [{name: TaintToleration}]
`

func TestDecode(t *testing.T) {
	defaults := map[string]runtime.Object{
		"LifeboatTaints": &config.LifeboatTaintsArgs{
			ProtectedPodTaintKeys: []string{v1alpha1.TaintLifeboat},
			ReservedTaintKeys:     []string{v1alpha1.TaintLifeboat, v1alpha1.TaintStandby},
		},
		"LifeboatPlacement": &config.LifeboatPlacementArgs{
			InterruptionTaintKeys: []string{v1alpha1.TaintKarpenterDisrupted, v1alpha1.TaintInterrupted},
			ReclaimedPoolWait:     metav1.Duration{Duration: time.Minute},
			SeatReleaseWait:       metav1.Duration{Duration: 5 * time.Second},
		},
		"CapacityPoolSpread": &config.CapacityPoolSpreadArgs{
			HotPoolPenalty: 1, HotPoolHalfLife: metav1.Duration{Duration: 10 * time.Minute},
			TelemetryNamespace: "lifeboat-system", TelemetryConfigMapName: "lifeboat-pool-telemetry",
		},
	}
	tests := []struct {
		name    string
		yaml    string
		want    map[string]runtime.Object
		wantErr string
	}{
		{name: "args are defaulted when no pluginConfig is given", yaml: header, want: defaults},
		{
			name: "partial args are defaulted field by field",
			yaml: header + `  pluginConfig:
  - name: CapacityPoolSpread
    args: {hotPoolPenalty: 3}
`,
			want: map[string]runtime.Object{"CapacityPoolSpread": &config.CapacityPoolSpreadArgs{
				HotPoolPenalty: 3, HotPoolHalfLife: metav1.Duration{Duration: 10 * time.Minute},
				TelemetryNamespace: "lifeboat-system", TelemetryConfigMapName: "lifeboat-pool-telemetry",
			}},
		},
		{
			name: "the seat-release wait is set alone, the rest defaulted",
			yaml: header + `  pluginConfig:
  - name: LifeboatPlacement
    args: {seatReleaseWait: 2s}
`,
			want: map[string]runtime.Object{"LifeboatPlacement": &config.LifeboatPlacementArgs{
				InterruptionTaintKeys: []string{v1alpha1.TaintKarpenterDisrupted, v1alpha1.TaintInterrupted},
				ReclaimedPoolWait:     metav1.Duration{Duration: time.Minute},
				SeatReleaseWait:       metav1.Duration{Duration: 2 * time.Second},
			}},
		},
		{
			name: "unknown fields are rejected by name",
			yaml: header + `  pluginConfig:
  - name: LifeboatPlacement
    args: {interruptionTaints: [a]}
`,
			wantErr: `unknown field "interruptionTaints"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.yaml)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for plugin, want := range tt.want {
				got := argsOf(cfg, "lifeboat-scheduler", plugin)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s args (-want +got):\n%s", plugin, diff)
				}
			}
		})
	}
}

// TestManifestConfig decodes the shipped configuration: it must load and carry typed args.
func TestManifestConfig(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, filepath.Join("..", "..", "..", "..", "manifests", "scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.LeaderElection.ResourceNamespace + "/" + cfg.LeaderElection.ResourceName; got != "lifeboat-system/lifeboat-scheduler" {
		t.Errorf("lease = %s, want lifeboat-system/lifeboat-scheduler", got)
	}
	for _, plugin := range []string{"LifeboatTaints", "LifeboatPlacement", "CapacityPoolSpread"} {
		switch a := argsOf(cfg, v1alpha1.SchedulerName, plugin).(type) {
		case *config.LifeboatTaintsArgs, *config.LifeboatPlacementArgs, *config.CapacityPoolSpreadArgs:
		default:
			t.Errorf("%s args decoded as %T", plugin, a)
		}
	}
}

// TestDecodeArgs: the factories' shared decode-and-validate step names the plugin in every
// error and hands back the defaulted internal args.
func TestDecodeArgs(t *testing.T) {
	okValidate := func(*field.Path, *config.LifeboatPlacementArgs) error { return nil }
	args, err := scheme.DecodeArgs("LifeboatPlacement", nil, &configv1.LifeboatPlacementArgs{}, okValidate)
	if err != nil || len(args.InterruptionTaintKeys) == 0 {
		t.Fatalf("DecodeArgs(nil) = %+v, %v; want the defaulted args", args, err)
	}
	for name, tc := range map[string]struct {
		obj      runtime.Object
		validate func(*field.Path, *config.LifeboatPlacementArgs) error
		want     string
	}{
		"undecoded args": {obj: &runtime.Unknown{}, validate: okValidate, want: "LifeboatPlacement args: args were not decoded"},
		"another plugin's args": {obj: &configv1.LifeboatTaintsArgs{}, validate: okValidate,
			want: "LifeboatPlacement args: want *config.LifeboatPlacementArgs, got *config.LifeboatTaintsArgs"},
		"invalid": {obj: &configv1.LifeboatPlacementArgs{}, validate: func(*field.Path, *config.LifeboatPlacementArgs) error { return errors.New("bad field") },
			want: "invalid LifeboatPlacement args: bad field"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := scheme.DecodeArgs("LifeboatPlacement", tc.obj, &configv1.LifeboatPlacementArgs{}, tc.validate)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error = %v, want prefix %q", err, tc.want)
			}
		})
	}
}

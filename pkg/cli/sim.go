package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate Spot reclaims on a local control plane with real components",
	}
	cmd.AddCommand(newSimRunCommand(), newSimScenariosCommand(), newSimUpCommand(), newSimInterruptCommand())
	return cmd
}

func newSimRunCommand() *cobra.Command {
	var (
		name, out, binDir, modes string
		parallel                 bool
		seed                     int64
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Play a scenario once per mode (baseline = Karpenter alone, lifeboat, overprovisioning) and report side by side",
		Long: `Play a scenario on a real local control plane — etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK and Karpenter with its KWOK provider, plus Lifeboat's binaries and the AWS
emulator in lifeboat mode — once per mode. Writes report.json, report.html and every
component's log under --out, prints a table to stdout and progress to stderr.`,
		Example: "  lifeboat sim run\n  lifeboat sim run --scenario single-node --modes baseline\n  lifeboat sim run --scenario examples/scenarios/zonal-reclaim.yaml --out /tmp/zonal",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := scenario.Load(name)
			if err != nil {
				return err
			}
			if modes != "" {
				s.Modes = nil
				for _, m := range strings.Split(modes, ",") {
					s.Modes = append(s.Modes, scenario.Mode(strings.TrimSpace(m)))
				}
				if errs := s.Validate(); len(errs) > 0 {
					return fmt.Errorf("--modes: %v", errs[0])
				}
			}
			if seed != 0 {
				s.Seed = seed
			}
			if out == "" {
				out = filepath.Join(".lifeboat", "sim", s.Name)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			closeLog, err := logToFile(filepath.Join(out, "sim.log"), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer closeLog()
			ctx = klog.NewContext(ctx, klog.Background())
			opts := sim.Options{BinDir: binDir, OutDir: out, Progress: cmd.ErrOrStderr(), Parallel: parallel}
			if installer, err := sim.NewLifeboatInstaller(binDir); err == nil {
				opts.Lifeboat = installer
			} else if hasMode(s.Modes, scenario.ModeLifeboat) {
				return err
			}
			rep, _, err := sim.Run(ctx, s, opts)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep.String())
			abs, _ := filepath.Abs(out)
			fmt.Fprintf(cmd.OutOrStdout(), "\nreport: %s\n        %s\n", filepath.Join(abs, "report.html"), filepath.Join(abs, "report.json"))
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "scenario", scenario.DefaultName, "built-in scenario name or a scenario file (lifeboat sim scenarios lists the built-ins)")
	cmd.Flags().StringVar(&modes, "modes", "", "comma-separated modes to run (default: the scenario's)")
	cmd.Flags().StringVar(&out, "out", "", "output directory (default .lifeboat/sim/<scenario>)")
	cmd.Flags().StringVar(&binDir, "bin-dir", localcluster.DefaultBinDir(), "directory with the component and Lifeboat binaries (make tools build)")
	cmd.Flags().BoolVar(&parallel, "parallel", false, "run the modes at once, each on its own control plane (faster, twice the CPU)")
	cmd.Flags().Int64Var(&seed, "seed", 0, "override the scenario's seed (which nodes the burst picks, boot and start jitter): run a scenario over several seeds")
	return cmd
}

func hasMode(ms []scenario.Mode, m scenario.Mode) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func newSimScenariosCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "scenarios [NAME]",
		Short: "List the built-in scenarios, or print one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				b, err := scenario.BuiltinSource(args[0])
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			for _, n := range scenario.BuiltinNames() {
				s, err := scenario.Load(n)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-18s %s\n", n, s.Description)
			}
			return nil
		},
	}
}

const (
	upRunDir  = ".lifeboat/sim-up"
	upState   = ".lifeboat/sim-up.json"
	upKubecfg = ".lifeboat/kubeconfig"
)

func newSimUpCommand() *cobra.Command {
	var name, binDir string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster with Lifeboat installed, for hands-on use (Ctrl-C stops it)",
		Long: `Start the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
KWOK, Karpenter with its KWOK provider), install Lifeboat (webhook, scheduler, controller, AWS
emulator, the scenario's WarmPool) and the scenario's workloads, and print the kubeconfig line.
Then trigger notices from another shell with ` + "`lifeboat sim interrupt`" + `.`,
		Example: "  lifeboat sim up\n  lifeboat sim up --scenario single-node",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := scenario.Load(name)
			if err != nil {
				return err
			}
			if s.WarmPool == nil {
				return fmt.Errorf("scenario %s has no warmPool; sim up installs Lifeboat with it", s.Name)
			}
			installer, err := sim.NewLifeboatInstaller(binDir)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			closeLog, err := logToFile(upRunDir+".log", cmd.ErrOrStderr()) // beside the run directory, which Up empties
			if err != nil {
				return err
			}
			defer closeLog()
			ctx = klog.NewContext(ctx, klog.Background())
			kc, _ := filepath.Abs(upKubecfg)
			return sim.Up(ctx, s, installer, upRunDir, kc, upState, cmd.ErrOrStderr(), func() {
				fmt.Fprintf(cmd.OutOrStdout(), "ready: export KUBECONFIG=%s\n", kc)
				fmt.Fprintln(cmd.ErrOrStderr(), "try: lifeboat status; lifeboat sim interrupt --count 3")
			})
		},
	}
	cmd.Flags().StringVar(&name, "scenario", scenario.DefaultName, "scenario whose cluster, timing, workloads and WarmPool to use")
	cmd.Flags().StringVar(&binDir, "bin-dir", localcluster.DefaultBinDir(), "directory with the component and Lifeboat binaries")
	return cmd
}

func newSimInterruptCommand() *cobra.Command {
	var (
		pool   string
		count  int
		spread time.Duration
	)
	cmd := &cobra.Command{
		Use:   "interrupt",
		Short: "Send Spot interruption notices to nodes of the cluster `lifeboat sim up` runs",
		Long: `Interrupt Spot nodes the way AWS and Karpenter's AWS provider do: a notice to Lifeboat's queue,
SpotInterrupted events and the NodeClaim deleted, then after the notice budget the reclaim (the
node and its Pods gone). Waits for the reclaims and prints what happened.`,
		Example: "  lifeboat sim interrupt --count 3\n  lifeboat sim interrupt --pool c5.large/us-east-1a --count 2 --spread 30s",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := scenario.Pool{CapacityType: "spot"}
			if pool != "busiest" {
				t, z, ok := strings.Cut(pool, "/")
				if !ok {
					return fmt.Errorf("--pool: want TYPE/ZONE (e.g. c5.large/us-east-1a) or busiest, got %q", pool)
				}
				p.InstanceType, p.Zone = t, z
			}
			if count < 1 {
				return fmt.Errorf("--count must be ≥ 1")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background())
			markers, err := sim.Interrupt(ctx, upState, p, count, spread, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			for _, m := range markers {
				fmt.Fprintf(cmd.OutOrStdout(), "%-8s %s\n", m.Kind, m.Label)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "busiest", "capacity pool TYPE/ZONE, or busiest (the Spot pool holding the most scenario Pods)")
	cmd.Flags().IntVar(&count, "count", 1, "number of nodes to interrupt")
	cmd.Flags().DurationVar(&spread, "spread", 0, "spread the notices over this long")
	return cmd
}

// logToFile sends the simulation's own log lines (klog: the market model, client-go warnings)
// to path, so that the terminal shows only the progress and the report; it says where.
func logToFile(path string, progress io.Writer) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the simulation log: %w", err)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			f.Close()
			return nil, err
		}
	}
	klog.SetOutput(f)
	fmt.Fprintf(progress, "log of the simulation itself: %s\n", path)
	return func() {
		klog.Flush()
		f.Close()
	}, nil
}

package cli

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/sim"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
	"github.com/lifeboat-k8s/lifeboat/test/cluster"
)

func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate Spot reclaims on a local control plane with real components",
	}
	cmd.AddCommand(newSimRunCommand(), newSimScenariosCommand())
	return cmd
}

func newSimRunCommand() *cobra.Command {
	var (
		name, out, binDir, modes string
		parallel                 bool
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
			if out == "" {
				out = filepath.Join(".lifeboat", "sim", s.Name)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
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
	cmd.Flags().StringVar(&binDir, "bin-dir", cluster.DefaultBinDir(), "directory with the component and Lifeboat binaries (make tools build)")
	cmd.Flags().BoolVar(&parallel, "parallel", false, "run the modes at once, each on its own control plane (faster, twice the CPU)")
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

// Package component is what Lifeboat's long-running binaries (lifeboat-webhook,
// lifeboat-controller) share on the command line: component-base logging (--v, --vmodule,
// --logging-format text|json, --feature-gates for logging) and a cobra command that applies it
// and runs until SIGINT or SIGTERM.
package component

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// Logging is the logging configuration of a binary.
type Logging struct {
	Config *logsapi.LoggingConfiguration
	gate   featuregate.MutableVersionedFeatureGate
}

// NewLogging returns the defaults (text, verbosity 0).
func NewLogging() Logging {
	l := Logging{Config: logsapi.NewLoggingConfiguration(), gate: featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))}
	if err := logsapi.AddFeatureGates(l.gate); err != nil {
		panic(err) // the gates are component-base's own: registering them cannot clash
	}
	return l
}

// AddFlags registers the logging flags.
func (l Logging) AddFlags(fs *pflag.FlagSet) {
	logsapi.AddFlags(l.Config, fs)
	l.gate.AddFlag(fs)
}

// Apply validates the configuration and sets up klog with it.
func (l Logging) Apply() error { return logsapi.ValidateAndApply(l.Config, l.gate) }

// Command describes a binary's command line.
type Command struct {
	Use, Short, Long string
	Logging          Logging
	// AddFlags registers the binary's own flags.
	AddFlags func(*pflag.FlagSet)
	// Run serves until ctx ends (SIGINT or SIGTERM).
	Run func(ctx context.Context) error
}

// New builds the cobra command: flags, logging applied before Run, a signal-bound context.
func New(c Command) *cobra.Command {
	cmd := &cobra.Command{
		Use: c.Use, Short: c.Short, Long: c.Long,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.Logging.Apply(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return c.Run(ctx)
		},
	}
	c.AddFlags(cmd.Flags())
	c.Logging.AddFlags(cmd.Flags())
	return cmd
}

// Package app is lifeboat-controller's command: its options (flags, defaults, validation) and
// Run, which builds the clients and the manager and registers every controller
// (pkg/controllers.Register). cmd/lifeboat-controller only calls NewCommand.
package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/component"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/bridge"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
)

// Options are the flags of lifeboat-controller.
type Options struct {
	// Kubeconfig overrides controller-runtime's lookup (KUBECONFIG, in-cluster, ~/.kube/config).
	Kubeconfig string

	AWS    awsclient.Options
	Bridge bridge.Options
	// QueueURL is the older spelling of --interruption-queue-url (AWS.InterruptionQueueURL).
	QueueURL string

	MetricsAddress, HealthAddress string
	LeaderElect                   bool
	LeaderElectionNamespace       string
	LeaderElectionID              string
	// Namespace is Lifeboat's own: pre-pull Pods, telemetry and resume-ledger ConfigMaps.
	Namespace       string
	TelemetryWindow time.Duration
	BootTimeout     time.Duration
	Resync          time.Duration
	OnDemandPrice   float64
	EBSPrice        float64
	SpotFraction    float64
	SQSWait         time.Duration
	SQSVisibility   time.Duration
	APIClient       component.APIClient
	// ReclaimBack is "auto" (run when the ReclaimBackPolicy CRD is installed; idle without a
	// policy) or "off"; ReclaimBackPoll its requeue period while a move is in flight.
	ReclaimBack     string
	ReclaimBackPoll time.Duration
	// SeatImage runs in the handoff's seats (docs/WARMPOOL.md "Handoff"): mirror it for
	// clusters that pull from a private registry only.
	SeatImage string
	// SeatPrePullImages: a seat mounts the images of the Pod it keeps room for as image
	// volumes, so its node pulls them before the Pod moves there (Kubernetes ≥ 1.35).
	SeatPrePullImages bool

	Logging component.Logging
}

// Values of --reclaim-back.
const (
	ReclaimBackAuto = "auto"
	ReclaimBackOff  = "off"
)

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		Bridge:                  bridge.DefaultOptions(),
		MetricsAddress:          ":8082",
		HealthAddress:           ":8083",
		LeaderElect:             true,
		LeaderElectionNamespace: v1alpha1.DefaultNamespace,
		LeaderElectionID:        "lifeboat-controller",
		Namespace:               v1alpha1.DefaultNamespace,
		TelemetryWindow:         time.Hour,
		SeatImage:               handoff.DefaultSeatImage,
		SeatPrePullImages:       true,
		BootTimeout:             10 * time.Minute,
		Resync:                  time.Minute,
		EBSPrice:                cost.DefaultEBSGiBMonth,
		SpotFraction:            cost.DefaultSpotFraction,
		SQSWait:                 20 * time.Second,
		SQSVisibility:           30 * time.Second,
		APIClient:               component.APIClient{QPS: 50, Burst: 100},
		Logging:                 component.NewLogging(),
		ReclaimBack:             ReclaimBackAuto,
		ReclaimBackPoll:         5 * time.Second,
	}
	return o
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig; when empty, KUBECONFIG, the in-cluster configuration or ~/.kube/config.")
	o.AWS.AddFlags(fs)
	o.Bridge.AddFlags(fs)
	fs.StringVar(&o.QueueURL, "queue-url", o.QueueURL, "Alias of --interruption-queue-url.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Metrics endpoint address (0 disables).")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", o.HealthAddress, "Health and readiness probe address.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader among replicas (lease "+v1alpha1.DefaultNamespace+"/lifeboat-controller, not the scheduler's).")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election lease.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Lifeboat's namespace (pre-pull Pods, the handoff's seats, telemetry and resume-ledger ConfigMaps).")
	fs.StringVar(&o.SeatImage, "seat-image", o.SeatImage, "Image of the handoff's seats, the placeholder Pods that keep room on ordinary capacity for the lifeboat Pods it will evict.")
	fs.BoolVar(&o.SeatPrePullImages, "seat-prepull-images", o.SeatPrePullImages, "Seats mount the images of the Pods they keep room for as image volumes, so those nodes pull the images before the Pods move there (needs Kubernetes 1.35+ and a container runtime with image volumes, e.g. containerd 2.1+; turn off otherwise).")
	fs.DurationVar(&o.TelemetryWindow, "telemetry-window", o.TelemetryWindow, "Sliding window of the capacity-pool interruption telemetry.")
	fs.DurationVar(&o.BootTimeout, "boot-timeout", o.BootTimeout, "Replace a launched instance whose Node has not registered by then.")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Steady-state re-list period of each WarmPool's instances.")
	fs.Float64Var(&o.OnDemandPrice, "on-demand-hourly-price", o.OnDemandPrice, "On-Demand price per pool instance hour, for the pools' cost estimates (WarmPool status.cost, lifeboat_pool_*cost_dollars); 0: compute cost not estimated. A WarmPool's spec.pricing overrides it.")
	fs.Float64Var(&o.SpotFraction, "spot-price-fraction", o.SpotFraction, "Spot price as a fraction of On-Demand, for the overprovisioning comparison in the cost estimates.")
	fs.Float64Var(&o.EBSPrice, "ebs-gib-month-price", o.EBSPrice, "EBS price per GiB-month, for the cost estimates.")
	fs.DurationVar(&o.SQSWait, "sqs-wait-time", o.SQSWait, "SQS long-poll duration (at most 20s, SQS's limit).")
	fs.DurationVar(&o.SQSVisibility, "sqs-visibility-timeout", o.SQSVisibility, "SQS visibility timeout of a received notice (redelivery after a failed handling).")
	fs.StringVar(&o.ReclaimBack, "reclaim-back", o.ReclaimBack, "Reclaim-back of On-Demand fallback nodes to Spot (docs/RECLAIMBACK.md): auto (runs when the ReclaimBackPolicy CRD is installed, acts only on ReclaimBackPolicies) or off.")
	fs.DurationVar(&o.ReclaimBackPoll, "reclaim-back-poll", o.ReclaimBackPoll, "Requeue period of a reclaim-back move in flight.")
	o.APIClient.AddFlags(fs, "a burst of interruptions writes several objects per Node")
}

// Complete fills what the flags leave open: the queue URL alias, the AWS defaults and
// environment.
func (o *Options) Complete() error {
	if o.QueueURL != "" {
		o.AWS.InterruptionQueueURL = o.QueueURL
	}
	return o.AWS.Complete()
}

// Validate says everything that is wrong with the flags at once, before anything is built.
func (o *Options) Validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if err := o.Bridge.Validate(); err != nil {
		add("%v", err)
	}
	positive := map[string]time.Duration{
		"--telemetry-window": o.TelemetryWindow, "--boot-timeout": o.BootTimeout, "--resync": o.Resync,
		"--sqs-visibility-timeout": o.SQSVisibility,
	}
	for _, name := range []string{"--telemetry-window", "--boot-timeout", "--resync", "--sqs-visibility-timeout"} {
		if positive[name] <= 0 {
			add("%s %s must be positive", name, positive[name])
		}
	}
	if o.SQSWait < 0 || o.SQSWait > 20*time.Second {
		add("--sqs-wait-time %s must be between 0 and 20s (SQS's long-poll limit)", o.SQSWait)
	}
	if o.OnDemandPrice < 0 || o.EBSPrice < 0 {
		add("prices must not be negative (--on-demand-hourly-price %g, --ebs-gib-month-price %g)", o.OnDemandPrice, o.EBSPrice)
	}
	if o.SpotFraction <= 0 || o.SpotFraction > 1 {
		add("--spot-price-fraction %g must be in (0, 1]", o.SpotFraction)
	}
	if strings.TrimSpace(o.SeatImage) == "" {
		add("--seat-image must name an image (default %s)", handoff.DefaultSeatImage)
	}
	if err := o.APIClient.Validate(); err != nil {
		add("%v", err)
	}
	if o.ReclaimBack != ReclaimBackAuto && o.ReclaimBack != ReclaimBackOff {
		add("--reclaim-back %q must be %s or %s", o.ReclaimBack, ReclaimBackAuto, ReclaimBackOff)
	}
	if o.ReclaimBackPoll <= 0 {
		add("--reclaim-back-poll %s must be positive", o.ReclaimBackPoll)
	}
	if o.Namespace == "" {
		add("--namespace must not be empty")
	}
	if o.LeaderElect && (o.LeaderElectionNamespace == "" || o.LeaderElectionID == "") {
		add("with --leader-elect, --leader-election-namespace and --leader-election-id must be set")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid flags: %s", strings.Join(errs, "; "))
	}
	return nil
}

package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/component"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/warmpool"
	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
)

// NewCommand is lifeboat-controller's command line.
func NewCommand() *cobra.Command {
	o := NewOptions()
	return component.New(component.Command{
		Use:   "lifeboat-controller",
		Short: "Lifeboat's warm-pool controllers: keep hibernated lifeboats, resume them on Spot notices, bridge and hand off",
		Long: "lifeboat-controller runs the warm pool, interruption handling, the bridge, handoff, recycle, garbage\n" +
			"collection, the NodePool check and the capacity-pool telemetry. See docs/WARMPOOL.md.",
		Logging:  o.Logging,
		AddFlags: o.AddFlags,
		Run:      func(ctx context.Context) error { return Run(ctx, o) },
	})
}

// Run completes and validates o, then runs the controllers until ctx ends.
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	ctrl.SetLogger(logger)
	if err := o.Complete(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	clients, err := awsclient.New(ctx, o.AWS)
	if err != nil {
		return fmt.Errorf("AWS clients: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("kubeconfig: %w (in a cluster, run with a ServiceAccount; outside, set KUBECONFIG or --kubeconfig)", err)
	}
	o.APIClient.Apply(cfg)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        controllers.Scheme(),
		Cache:                         controllers.CacheOptions(o.Namespace),
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:        o.HealthAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	deps := controllers.Deps{
		Instances:       cloud.NewInstances(clients.EC2, cloud.InstancesOptions{}),
		Clock:           clock.RealClock{},
		Namespace:       o.Namespace,
		SeatImage:       o.SeatImage,
		SeatPrePullOff:  !o.SeatPrePullImages,
		TelemetryWindow: o.TelemetryWindow,
		Bridge:          o.Bridge,
		PlacementScorer: cloud.NewPlacementScorer(clients.EC2, cloud.PlacementOptions{}),
		ReclaimBack:     reclaimback.Options{Off: o.ReclaimBack == ReclaimBackOff, Poll: o.ReclaimBackPoll, Region: clients.Config.Region},
		WarmPool: warmpool.Options{
			BootTimeout: o.BootTimeout, Resync: o.Resync,
			Prices: cost.Prices{OnDemandHourly: o.OnDemandPrice, SpotFraction: o.SpotFraction, EBSGiBMonth: o.EBSPrice},
		},
	}
	if o.AWS.InterruptionQueueURL != "" {
		deps.Queue = &interruptionqueue.Consumer{SQS: clients.SQS, QueueURL: o.AWS.InterruptionQueueURL, WaitTime: o.SQSWait, VisibilityTimeout: o.SQSVisibility}
	} else {
		logger.Info("No interruption queue URL: relying on Karpenter's SpotInterrupted events only")
	}
	if _, err := controllers.Register(ctx, mgr, deps); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

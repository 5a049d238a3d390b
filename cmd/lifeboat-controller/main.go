// Command lifeboat-controller runs the warm-pool controllers: warm pool convergence,
// interruption handling, handoff, recycle, garbage collection, the NodePool check and the
// capacity-pool telemetry (docs/WARMPOOL.md). It is thin: flags, clients, manager, Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	cloudinterruption "github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/bridge"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/warmpool"
)

type options struct {
	aws                     awsclient.Options
	bridge                  bridge.Options
	queueURL                string
	metricsAddr, healthAddr string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	namespace               string
	telemetryWindow         time.Duration
	bootTimeout, resync     time.Duration
	onDemandPrice, ebsPrice float64
	sqsWait, sqsVisibility  time.Duration
	kubeQPS                 float32
	kubeBurst               int
}

func main() {
	o := options{}
	fs := pflag.NewFlagSet("lifeboat-controller", pflag.ExitOnError)
	o.aws.AddFlags(fs)
	o.bridge = bridge.DefaultOptions()
	o.bridge.AddFlags(fs)
	fs.StringVar(&o.queueURL, "queue-url", "", "Alias of --interruption-queue-url.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8082", "Metrics endpoint address (0 disables).")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8083", "Health and readiness probe address.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader among replicas (lease "+v1alpha1.DefaultNamespace+"/lifeboat-controller, not the scheduler's).")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", v1alpha1.DefaultNamespace, "Namespace of the leader election lease.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "lifeboat-controller", "Name of the leader election lease.")
	fs.StringVar(&o.namespace, "namespace", v1alpha1.DefaultNamespace, "Lifeboat's namespace (pre-pull Pods, telemetry and resume-ledger ConfigMaps).")
	fs.DurationVar(&o.telemetryWindow, "telemetry-window", time.Hour, "Sliding window of the capacity-pool interruption telemetry.")
	fs.DurationVar(&o.bootTimeout, "boot-timeout", 10*time.Minute, "Replace a launched instance whose Node has not registered by then.")
	fs.DurationVar(&o.resync, "resync", time.Minute, "Steady-state re-list period of each WarmPool's instances.")
	fs.Float64Var(&o.onDemandPrice, "on-demand-hourly-price", 0, "On-Demand price per pool instance hour, for lifeboat_pool_cost_dollars (0: compute cost not estimated).")
	fs.Float64Var(&o.ebsPrice, "ebs-gib-month-price", 0.08, "EBS price per GiB-month, for lifeboat_pool_cost_dollars.")
	fs.DurationVar(&o.sqsWait, "sqs-wait-time", 20*time.Second, "SQS long-poll duration.")
	fs.DurationVar(&o.sqsVisibility, "sqs-visibility-timeout", 30*time.Second, "SQS visibility timeout of a received notice (redelivery after a failed handling).")
	fs.Float32Var(&o.kubeQPS, "kube-api-qps", 50, "Client-side rate limit of Kubernetes API requests per second (a burst of interruptions writes several objects per Node).")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 100, "Burst of the Kubernetes API rate limit.")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])

	ctx := ctrl.SetupSignalHandler()
	ctrl.SetLogger(klog.Background())
	if err := run(ctx, o); err != nil {
		klog.Background().Error(err, "lifeboat-controller failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.queueURL != "" {
		o.aws.InterruptionQueueURL = o.queueURL
	}
	if err := o.bridge.Validate(); err != nil {
		return err
	}
	clients, err := awsclient.New(ctx, o.aws)
	if err != nil {
		return fmt.Errorf("AWS clients: %w", err)
	}
	if err := o.aws.Complete(); err != nil {
		return err
	}
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = o.kubeQPS, o.kubeBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        controllers.Scheme(),
		Cache:                         controllers.CacheOptions(o.namespace),
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.healthAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNamespace,
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
		Namespace:       o.namespace,
		TelemetryWindow: o.telemetryWindow,
		Bridge:          o.bridge,
		WarmPool: warmpool.Options{
			BootTimeout: o.bootTimeout, Resync: o.resync,
			OnDemandHourlyPrice: o.onDemandPrice, EBSGiBMonthPrice: o.ebsPrice,
		},
	}
	if o.aws.InterruptionQueueURL != "" {
		deps.Queue = &cloudinterruption.Consumer{SQS: clients.SQS, QueueURL: o.aws.InterruptionQueueURL, WaitTime: o.sqsWait, VisibilityTimeout: o.sqsVisibility}
	} else {
		klog.FromContext(ctx).Info("No interruption queue URL: relying on Karpenter's SpotInterrupted events only")
	}
	if _, err := controllers.Register(ctx, mgr, deps); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/component"
	"github.com/lifeboat-k8s/lifeboat/pkg/elect"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/audit"
	"github.com/lifeboat-k8s/lifeboat/webhooks/eviction"
	"github.com/lifeboat-k8s/lifeboat/webhooks/pod"
	"github.com/lifeboat-k8s/lifeboat/webhooks/state"
	"github.com/lifeboat-k8s/lifeboat/webhooks/webhookmetrics"
	"github.com/lifeboat-k8s/lifeboat/webhooks/workload"
)

// AuditLease is the Lease (in --namespace) of the replica that runs the audit.
const AuditLease = "lifeboat-webhook-audit"

// NewCommand is lifeboat-webhook's command line.
func NewCommand() *cobra.Command {
	o := NewOptions()
	return component.New(component.Command{
		Use:   "lifeboat-webhook",
		Short: "Lifeboat's admission webhooks: protect Pods of Spot workloads, require PodDisruptionBudgets",
		Long: "lifeboat-webhook mutates Pods of protected workloads for their placement tier and validates protected\n" +
			"Deployments, StatefulSets, Jobs and CronJobs. See docs/POLICY.md.",
		Logging:  o.Logging,
		AddFlags: o.AddFlags,
		Run:      func(ctx context.Context) error { return Run(ctx, o) },
	})
}

// Handlers returns the three webhooks' HTTP handlers by path, instrumented and bounded in time.
// The server, the fuzz targets and the benchmarks all use exactly these.
func Handlers(cfg policy.Config, cluster *state.Cluster, timeout time.Duration) map[string]http.Handler {
	hook := func(h admission.Handler) *admission.Webhook {
		return &admission.Webhook{Handler: webhookmetrics.Handler(withTimeout(h, timeout)), LogConstructor: logConstructor}
	}
	live := cluster.Live
	if live == nil {
		live = cluster.Cache
	}
	return map[string]http.Handler{
		pod.Path:      webhookmetrics.HTTP("pods", hook(&pod.Mutator{Config: cfg, Cluster: cluster})),
		workload.Path: webhookmetrics.HTTP("workloads", hook(&workload.Validator{Config: cfg, Cluster: cluster})),
		eviction.Path: webhookmetrics.HTTP("evictions", hook(&eviction.Holder{Reader: live, Metadata: cluster.PodMetadata, Clock: clock.RealClock{}, Pending: cfg.PendingHold, Exempt: cfg.Exempt})),
	}
}

func withTimeout(h admission.Handler, d time.Duration) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h.Handle(ctx, req)
	})
}

// logConstructor keeps per-request values few: the object and the request UID (to match the
// apiserver's audit log). Namespace and name are in the object reference.
func logConstructor(base klog.Logger, req *admission.Request) klog.Logger {
	if req == nil {
		return base
	}
	return base.WithValues("object", klog.KRef(req.Namespace, req.Name), "operation", req.Operation, "kind", req.Kind.Kind, "uid", req.UID)
}

// Run serves until ctx ends, then shuts down gracefully: not-ready first, serving for
// ShutdownDelay, then draining in-flight requests.
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	ctrl.SetLogger(logger)
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.Policy()
	if err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %q (empty: in-cluster): %w", o.Kubeconfig, err)
	}
	restConfig = rest.CopyConfig(restConfig)
	restConfig.UserAgent = "lifeboat-webhook"
	o.APIClient.Apply(restConfig)

	certDir := o.CertDir
	if o.SelfManagedTLS && certDir == "" {
		if certDir, err = os.MkdirTemp("", "lifeboat-webhook-certs-"); err != nil {
			return err
		}
		defer os.RemoveAll(certDir)
	} else if o.SelfManagedTLS {
		// The rotator writes tls.crt and tls.key there: a directory that does not exist yet
		// would leave the webhook without a certificate, never Ready.
		if err := os.MkdirAll(certDir, 0o700); err != nil {
			return fmt.Errorf("--tls-cert-dir %s: %w", certDir, err)
		}
	}
	mgr, certs, err := newManager(restConfig, o, certDir, logger)
	if err != nil {
		return err
	}

	// Register the informers before the manager starts so that they sync at startup, not on the
	// first admission request.
	// The warm pools' Nodes: is a lifeboat active (scheduler routing), where were the seats of
	// the Pods a lifeboat's handoff evicts.
	watched := append(state.MetadataObjects(), state.PodMetadataObject(), &policyv1.PodDisruptionBudget{}, &schedulingv1.PriorityClass{},
		state.PoolNodeMetadataObject())
	for _, obj := range watched {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	cluster := &state.Cluster{Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), PodMetadata: mgr.GetCache(), PoolNodes: mgr.GetCache()}
	for path, h := range Handlers(cfg, cluster, o.RequestTimeout) {
		mgr.GetWebhookServer().Register(path, h)
	}

	var rotatorReady chan struct{}
	if o.SelfManagedTLS {
		if rotatorReady, err = addCertRotation(mgr, o, certs, certDir); err != nil {
			return err
		}
	}
	if err := addAudit(mgr, o, cfg, cluster, restConfig); err != nil {
		return err
	}
	var draining atomic.Bool
	if err := addHealthChecks(ctx, mgr, certs, rotatorReady, &draining); err != nil {
		return err
	}

	mgrCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-mgrCtx.Done():
			return
		}
		draining.Store(true)
		logger.Info("Shutting down: reporting not ready, then draining", "delay", o.ShutdownDelay)
		time.Sleep(o.ShutdownDelay)
		stop()
	}()
	logger.Info("Starting lifeboat-webhook", "port", o.Port, "selfManagedTLS", o.SelfManagedTLS, "audit", o.AuditInterval)
	if err := mgr.Start(mgrCtx); err != nil {
		return fmt.Errorf("webhook manager: %w", err)
	}
	logger.Info("Stopped")
	return nil
}

// newManager builds the manager: caches (with self-managed TLS, exactly one Secret), metrics,
// probes and the webhook server. certs is nil without self-managed TLS.
func newManager(restConfig *rest.Config, o *Options, certDir string, logger klog.Logger) (manager.Manager, *secretCerts, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	// Pods' metadata is cached (webhooks/eviction): without managed fields, a few hundred
	// bytes per Pod.
	// Of the Nodes, only the warm pools' are cached (the Pod webhook asks whether a lifeboat is
	// active), as metadata.
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		state.PoolNodeMetadataObject(): {Label: state.PoolNodeSelector()},
	}}
	tlsOpts := []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		if o.DisableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}}
	var certs *secretCerts
	if o.SelfManagedTLS {
		ns, name, _ := strings.Cut(o.TLSSecret, "/")
		// The only Secret the webhook may read: cache exactly that one.
		cacheOpts.ByObject[&corev1.Secret{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{ns: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", name),
		}
		certs = &secretCerts{key: types.NamespacedName{Namespace: ns, Name: name}, dir: certDir, poll: 2 * time.Second}
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.GetCertificate = certs.GetCertificate })
	}
	gracefulTimeout := 30 * time.Second
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logger,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress: o.HealthAddress,
		PprofBindAddress:       o.PprofAddress,
		// No manager-level election: it would exit the process on a lost lease, taking an
		// admission replica down with the audit. The audit campaigns on its own (addAudit).
		GracefulShutdownTimeout: &gracefulTimeout,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.BindAddress, Port: o.Port, CertDir: certDir, TLSOpts: tlsOpts,
		}),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, certs, nil
}

// addCertRotation generates and rotates the CA and serving certificate in the Secret and
// injects the CA bundle into the webhook configurations; the channel closes once it has.
func addCertRotation(mgr manager.Manager, o *Options, certs *secretCerts, certDir string) (chan struct{}, error) {
	ready := make(chan struct{})
	certs.reader = mgr.GetCache()
	if err := mgr.Add(certs); err != nil {
		return nil, err
	}
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      certs.key,
		CertDir:        certDir,
		CAName:         "lifeboat-webhook-ca",
		CAOrganization: "lifeboat",
		DNSName:        o.DNSNames[0],
		ExtraDNSNames:  o.DNSNames[1:],
		IsReady:        ready,
		Webhooks: []rotator.WebhookInfo{
			{Name: o.MutatingConfig, Type: rotator.Mutating},
			{Name: o.ValidatingConfig, Type: rotator.Validating},
		},
		FieldOwner:     "lifeboat-webhook",
		ControllerName: "lifeboat-webhook-cert-rotator",
	}); err != nil {
		return nil, fmt.Errorf("set up certificate rotation: %w", err)
	}
	return ready, nil
}

// addAudit runs the audit: on the replica that holds AuditLease, or with --leader-elect=false
// on every replica.
func addAudit(mgr manager.Manager, o *Options, cfg policy.Config, cluster *state.Cluster, restConfig *rest.Config) error {
	if o.AuditInterval <= 0 {
		return nil
	}
	auditor := &audit.Auditor{
		Config: cfg, Cluster: cluster, Lister: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("lifeboat-webhook"), Interval: o.AuditInterval,
	}
	if !o.LeaderElect {
		return mgr.Add(auditor)
	}
	leases, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	return mgr.Add(&elect.Campaign{Leases: leases.CoordinationV1(), Namespace: o.Namespace, Name: AuditLease, Task: auditor.Start})
}

// addHealthChecks: /healthz pings; /readyz needs the server started, the caches synced, with
// self-managed TLS the certificates in place, and no shutdown under way.
func addHealthChecks(ctx context.Context, mgr manager.Manager, certs *secretCerts, rotatorReady chan struct{}, draining *atomic.Bool) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	checks := map[string]healthz.Checker{
		"webhook-server": mgr.GetWebhookServer().StartedChecker(),
		"informers": func(*http.Request) error {
			syncCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if !mgr.GetCache().WaitForCacheSync(syncCtx) {
				return errors.New("informer caches have not synced")
			}
			return nil
		},
		"shutdown": func(*http.Request) error {
			if draining.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
	}
	if certs != nil {
		checks["certificates"] = func(*http.Request) error {
			select {
			case <-rotatorReady:
			default:
				return errors.New("the CA bundle is not injected into the webhook configurations yet")
			}
			if !certs.Ready() {
				return errors.New("the serving certificate is not loaded yet")
			}
			return nil
		}
	}
	for name, check := range checks {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return err
		}
	}
	return nil
}

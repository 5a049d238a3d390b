// Package server wires Lifeboat's admission webhooks into a controller-runtime manager: the
// webhook server (TLS from files or self-managed), informer caches, the audit, health and
// metrics endpoints, and graceful shutdown. cmd/lifeboat-webhook only calls NewCommand.
package server

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/component"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// Names of the objects in manifests/webhook/; flags override them.
const (
	DefaultMutatingConfig   = "lifeboat-pods"
	DefaultValidatingConfig = "lifeboat-workloads"
	DefaultSecret           = "lifeboat-webhook-tls"
	DefaultService          = "lifeboat-webhook"
)

// Options are the flags of lifeboat-webhook.
type Options struct {
	Kubeconfig string
	APIClient  component.APIClient

	BindAddress string
	Port        int
	// CertDir holds tls.crt and tls.key. Without SelfManagedTLS they come from outside (a mounted
	// Secret, cert-manager) and are reloaded when they change; with it, the webhook writes them.
	CertDir        string
	SelfManagedTLS bool
	// TLSSecret (namespace/name) stores the self-managed CA and serving certificate.
	TLSSecret string
	// DNSNames are the serving certificate's names (self-managed mode).
	DNSNames []string
	// MutatingConfig and ValidatingConfig are the webhook configurations that receive the CA bundle.
	MutatingConfig   string
	ValidatingConfig string

	MetricsAddress string
	HealthAddress  string
	PprofAddress   string

	Namespace     string
	SchedulerName string
	// SchedulerRouting: which protected Pods get SchedulerName (policy.SchedulerRouting).
	SchedulerRouting string
	SpotTaintKey     string
	NoticeBudget     time.Duration
	PendingHold      time.Duration
	TierClasses      map[string]string
	AuditInterval    time.Duration
	LeaderElect      bool
	ShutdownDelay    time.Duration
	DisableHTTP2     bool
	RequestTimeout   time.Duration

	Logging component.Logging
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		Port: 9443,
		// Every eviction in the cluster is one or two live reads (webhooks/eviction), at up to
		// Karpenter's 100 evictions per second plus its retries of held Pods.
		APIClient:        component.APIClient{QPS: 200, Burst: 400},
		TLSSecret:        v1alpha1.DefaultNamespace + "/" + DefaultSecret,
		DNSNames:         []string{DefaultService + "." + v1alpha1.DefaultNamespace + ".svc"},
		MutatingConfig:   DefaultMutatingConfig,
		ValidatingConfig: DefaultValidatingConfig,
		MetricsAddress:   ":8080",
		HealthAddress:    ":8081",
		Namespace:        v1alpha1.DefaultNamespace,
		SchedulerName:    v1alpha1.SchedulerName,
		SchedulerRouting: string(policy.RouteWhileLifeboatActive),
		SpotTaintKey:     v1alpha1.TaintSpot,
		NoticeBudget:     policy.DefaultNoticeBudget,
		PendingHold:      policy.DefaultPendingHold,
		TierClasses:      map[string]string{},
		AuditInterval:    5 * time.Minute,
		LeaderElect:      true,
		ShutdownDelay:    5 * time.Second,
		RequestTimeout:   2 * time.Second,
		Logging:          component.NewLogging(),
	}
	for t, c := range policy.DefaultPriorityClasses() {
		o.TierClasses[string(t)] = c
	}
	return o
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig; in-cluster configuration when empty.")
	o.APIClient.AddFlags(fs, "every eviction in the cluster is one or two live reads; a drain of many nodes evicts at up to Karpenter's 100 per second")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the webhook server listens on (all addresses when empty).")
	fs.IntVar(&o.Port, "port", o.Port, "Port of the webhook server.")
	fs.StringVar(&o.CertDir, "tls-cert-dir", o.CertDir, "Directory with tls.crt and tls.key, reloaded when they change. With --self-managed-tls the webhook writes them there (a temporary directory when empty).")
	fs.BoolVar(&o.SelfManagedTLS, "self-managed-tls", o.SelfManagedTLS, "Generate and rotate the CA and serving certificate (stored in --tls-secret) and inject the CA bundle into the webhook configurations.")
	fs.StringVar(&o.TLSSecret, "tls-secret", o.TLSSecret, "namespace/name of the Secret holding the self-managed certificates; it must exist (it may be empty).")
	fs.StringSliceVar(&o.DNSNames, "tls-dns-names", o.DNSNames, "DNS names of the self-managed serving certificate (the webhook Service's name first).")
	fs.StringVar(&o.MutatingConfig, "mutating-webhook-configuration", o.MutatingConfig, "MutatingWebhookConfiguration that receives the self-managed CA bundle.")
	fs.StringVar(&o.ValidatingConfig, "validating-webhook-configuration", o.ValidatingConfig, "ValidatingWebhookConfiguration that receives the self-managed CA bundle.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address of the Prometheus /metrics endpoint; 0 disables it.")
	fs.StringVar(&o.PprofAddress, "pprof-bind-address", o.PprofAddress, "Address of Go's /debug/pprof endpoints, for profiling; empty or 0 disables them (the default). Profiles reveal memory contents: bind to localhost.")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", o.HealthAddress, "Address of /healthz and /readyz.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Lifeboat's own namespace: never touched, holds the audit's leader election lease.")
	fs.StringVar(&o.SchedulerName, "scheduler-name", o.SchedulerName, "schedulerName written into protected Pods that use the default scheduler (see --scheduler-routing); empty leaves it alone.")
	fs.StringVar(&o.SchedulerRouting, "scheduler-routing", o.SchedulerRouting, "Which protected Pods get --scheduler-name: WhileLifeboatActive (those created while a lifeboat node is active, the Pods that may be seated on it; the default scheduler binds every other Pod, so the two schedulers never bind into the same free room in steady state) or Always (every protected Pod; spreads them over capacity pools in steady state, but two schedulers then race for the same nodes and a kubelet rejects the overflow with OutOfcpu).")
	fs.StringVar(&o.SpotTaintKey, "spot-taint-key", o.SpotTaintKey, "Key of the taint on Spot nodes that protected Pods of Spot tiers tolerate (effect NoSchedule, operator Exists).")
	fs.DurationVar(&o.NoticeBudget, "notice-budget", o.NoticeBudget, "Warn about workloads whose Pods take longer than this to stop (the Spot notice is 120s).")
	fs.DurationVar(&o.PendingHold, "eviction-pending-hold", o.PendingHold, "Hold the eviction of a protected Pod on a draining Spot node at most this long while Lifeboat's controller has not decided about it (makes the bridge race-free against a drain that starts from the same notice); 0 disables it.")
	fs.StringToStringVar(&o.TierClasses, "tier-priority-classes", o.TierClasses, "PriorityClass of each tier, e.g. critical=lifeboat-critical; these are the only classes the webhook assigns (system-* is refused).")
	fs.DurationVar(&o.AuditInterval, "audit-interval", o.AuditInterval, "How often to report protected workloads admitted unmutated or without a PDB; 0 disables the audit.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect one replica to run the audit (every replica serves admission requests).")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "On SIGTERM, report not-ready and keep serving this long before closing, so the Service stops routing here first.")
	fs.BoolVar(&o.DisableHTTP2, "disable-http2", o.DisableHTTP2, "Serve HTTP/1.1 only. HTTP/2 (the default) lets the apiserver multiplex admission calls over one connection; with HTTP/1.1 bursts of Pod creations open new TLS connections (see docs/benchmarks/webhook.md). Go's HTTP/2 server bounds rapid resets (CVE-2023-44487).")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "Upper bound on the time spent deciding one admission request (the configurations' timeoutSeconds is the outer bound).")
}

// Policy turns the flags into the policy configuration and validates it.
func (o *Options) Policy() (policy.Config, error) {
	c := policy.DefaultConfig()
	c.SchedulerName = o.SchedulerName
	c.SchedulerRouting = policy.SchedulerRouting(o.SchedulerRouting)
	c.SpotTaintKey = o.SpotTaintKey
	c.NoticeBudget = o.NoticeBudget
	c.OwnNamespace = o.Namespace
	c.PendingHold = o.PendingHold
	// Flags override the defaults tier by tier.
	c.PriorityClasses = policy.DefaultPriorityClasses()
	for t, name := range o.TierClasses {
		c.PriorityClasses[v1alpha1.Tier(t)] = name
	}
	return c, c.Validate()
}

// Validate checks the flags that do not belong to the policy.
func (o *Options) Validate() error {
	var errs []string
	if o.Port <= 0 || o.Port > 65535 {
		errs = append(errs, fmt.Sprintf("--port %d is not a port", o.Port))
	}
	if !o.SelfManagedTLS && o.CertDir == "" {
		errs = append(errs, "set --tls-cert-dir (certificates from a Secret or cert-manager) or --self-managed-tls")
	}
	if o.SelfManagedTLS {
		if ns, name, ok := strings.Cut(o.TLSSecret, "/"); !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Sprintf("--tls-secret %q must be namespace/name", o.TLSSecret))
		}
		if len(o.DNSNames) == 0 {
			errs = append(errs, "--tls-dns-names is empty")
		}
	}
	if err := o.APIClient.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, "--request-timeout must be positive")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

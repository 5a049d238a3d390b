// Package release installs the Lifeboat Helm chart into a local control plane with the real
// helm binary, and runs the release's three components as local processes configured from what
// the chart installed.
//
// The local control plane has no kubelet that could run the chart's images, so each component
// runs as a child process of the harness, configured from the installed objects — the
// container args and env of the Deployments, the scheduler's ConfigMap, the controller's
// settings ConfigMap — and authenticated with a token of the chart's ServiceAccount (the
// TokenRequest API, as the kubelet does for a Pod), so it has exactly the chart's RBAC. The
// apiserver reaches the webhook through the chart's Service and webhook configurations
// unchanged: with --enable-aggregator-routing (Cluster options) it resolves the Service to its
// EndpointSlice, which Install points at the local webhook process. The webhook's certificate
// is the one it generates for lifeboat-webhook.<namespace>.svc in the chart's Secret.
//
// `lifeboat sim` installs Lifeboat this way, and so does the chart's integration test: the
// demo takes the path users take.
package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// The chart's component names: Deployments, ServiceAccounts, log files of the processes.
const (
	Webhook    = "lifeboat-webhook"
	Scheduler  = "lifeboat-scheduler"
	Controller = "lifeboat-controller"
)

// Leases the components hold once they run (leader election, the webhook's audit).
var Leases = []string{Scheduler, Controller, "lifeboat-webhook-audit"}

// Options of a release.
type Options struct {
	// Helm is the helm binary; Chart the chart directory (charts/lifeboat).
	Helm, Chart string
	// Name and Namespace of the release (default lifeboat, lifeboat-system). Install creates
	// the namespace with Pod Security "restricted" enforced, as docs/INSTALL.md says.
	Name, Namespace string
	// BinDir holds lifeboat-webhook, lifeboat-scheduler and lifeboat-controller.
	BinDir string
	// Values are values files (-f), Set are --set key=value pairs, in that order.
	Values, Set []string
	// WorkDir receives the helm home, the components' kubeconfigs, configuration and certs.
	WorkDir string
	// ControllerEnv is added to the controller's environment: the AWS credentials that IRSA
	// or Pod Identity would give the Pod.
	ControllerEnv []string
	// ControllerArgs are appended to the controller's chart args (after the chart's, so they
	// win): settings that are for a local process only, such as a short SQS wait.
	ControllerArgs []string
}

func (o *Options) complete() error {
	if o.Name == "" {
		o.Name = "lifeboat"
	}
	if o.Namespace == "" {
		o.Namespace = "lifeboat-system"
	}
	if o.Helm == "" || o.Chart == "" || o.BinDir == "" || o.WorkDir == "" {
		return errors.New("release: Helm, Chart, BinDir and WorkDir are required")
	}
	for _, p := range []string{o.Helm, filepath.Join(o.Chart, "Chart.yaml")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: build the tools with `make tools` (or pass --bin-dir)", p)
		}
	}
	for _, b := range []string{Webhook, Scheduler, Controller} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("%s not found in %s: build it with `make build` (or pass --bin-dir)", b, o.BinDir)
		}
	}
	return os.MkdirAll(o.WorkDir, 0o755)
}

// Release is an installed chart and, once Start ran, its running components.
type Release struct {
	o           Options
	c           *localcluster.Cluster
	hostIP      string
	webhookPort int
	pids        []int
	// MetricsURL and HealthURL of each running component (by the names above).
	MetricsURL, HealthURL map[string]string
}

// Install creates the namespace, runs `helm install` and points the webhook Service at the
// port the local webhook process will listen on.
func Install(ctx context.Context, c *localcluster.Cluster, o Options) (*Release, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	ip, err := HostIPv4()
	if err != nil {
		return nil, err
	}
	port, err := localcluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	r := &Release{o: o, c: c, hostIP: ip, webhookPort: port[0], MetricsURL: map[string]string{}, HealthURL: map[string]string{}}
	if err := r.createNamespace(ctx); err != nil {
		return nil, err
	}
	if err := r.pointServiceAtLocalWebhook(ctx); err != nil {
		return nil, err
	}
	if _, err := r.Helm(ctx, append([]string{"install", o.Name, o.Chart}, r.valueArgs()...)...); err != nil {
		return nil, err
	}
	return r, nil
}

// Upgrade runs `helm upgrade` with the release's values and then set (--set key=value).
func (r *Release) Upgrade(ctx context.Context, set ...string) error {
	args := append([]string{"upgrade", r.o.Name, r.o.Chart}, r.valueArgs()...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	_, err := r.Helm(ctx, args...)
	return err
}

// Uninstall runs `helm uninstall --wait`.
func (r *Release) Uninstall(ctx context.Context) error {
	_, err := r.Helm(ctx, "uninstall", r.o.Name, "--wait", "--timeout", "60s")
	return err
}

// Helm runs helm against the cluster and the release's namespace, with its own helm home
// under WorkDir; the error carries helm's output.
func (r *Release) Helm(ctx context.Context, args ...string) ([]byte, error) {
	args = append(args, "--kubeconfig", r.c.KubeconfigPath(), "--namespace", r.o.Namespace)
	cmd := exec.CommandContext(ctx, r.o.Helm, args...)
	home := filepath.Join(r.o.WorkDir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s%s", args[0], err, stderr.String(), out)
	}
	return out, nil
}

func (r *Release) valueArgs() []string {
	var args []string
	for _, f := range r.o.Values {
		args = append(args, "-f", f)
	}
	for _, s := range r.o.Set {
		args = append(args, "--set", s)
	}
	return args
}

func (r *Release) createNamespace(ctx context.Context) error {
	_, err := r.c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   r.o.Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", r.o.Namespace, err)
	}
	return nil
}

// pointServiceAtLocalWebhook gives the chart's webhook Service an endpoint: the local webhook
// process. The EndpointSlice controller leaves slices it does not manage alone.
func (r *Release) pointServiceAtLocalWebhook(ctx context.Context) error {
	_, err := r.c.Client().DiscoveryV1().EndpointSlices(r.o.Namespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: Webhook + "-local", Labels: map[string]string{
			discoveryv1.LabelServiceName: Webhook,
			discoveryv1.LabelManagedBy:   "lifeboat-localcluster",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{r.hostIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(r.webhookPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("point the webhook Service at the local webhook: %w", err)
	}
	return nil
}

// HostIPv4 is one of this machine's non-loopback IPv4 addresses: EndpointSlices refuse
// loopback addresses, so the local webhook listens on it.
func HostIPv4() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("this machine has no non-loopback IPv4 address: the apiserver cannot route the chart's webhook Service to a local process")
}

// Stop sends SIGTERM to the components Start ran and waits (15 s each) until they are gone.
func (r *Release) Stop() {
	for _, pid := range r.pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for _, pid := range r.pids {
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return !localcluster.ProcessAlive(pid), nil
		})
	}
	r.pids = nil
}

// WaitLeases waits until every lease in Leases has a holder.
func (r *Release) WaitLeases(ctx context.Context) error {
	for _, lease := range Leases {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := r.c.Client().CoordinationV1().Leases(r.o.Namespace).Get(ctx, lease, metav1.GetOptions{})
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
		})
		if err != nil {
			return fmt.Errorf("lease %s/%s not acquired (the chart's RBAC? see %s.log in %s): %w", r.o.Namespace, lease, strings.TrimSuffix(lease, "-audit"), r.c.RunDir(), err)
		}
	}
	return nil
}

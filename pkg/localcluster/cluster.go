// Package localcluster starts and stops a real local Kubernetes control plane for tests and for
// `lifeboat sim`: etcd, kube-apiserver (RBAC), kube-controller-manager, KWOK (fake kubelets
// driven by this project's stages, with per-node-selector boot and Pod start delays and a
// power switch for hibernation), and Karpenter with its KWOK cloud provider.
//
// Binaries come from bin/ (`make tools`); each component logs to <RunDir>/<name>.log.
// Children are started with Pdeathsig from a thread that lives as long as the process, so they
// die with the harness even when a test panics or times out before Stop.
package localcluster

import (
	"context"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options selects components and their behaviour. The zero value starts etcd and
// kube-apiserver only: a few seconds, enough for admission and scheduler integration tests.
type Options struct {
	// BinDir holds the component binaries. Default: $LIFEBOAT_BIN_DIR, else <repo>/bin.
	BinDir string
	// RunDir receives certificates, kubeconfig, data and one log per component.
	// Default: a new temporary directory, removed by Stop unless KeepRunDir.
	RunDir     string
	KeepRunDir bool

	// ControllerManager starts kube-controller-manager (ReplicaSets, Deployments, Jobs,
	// node lifecycle, garbage collection, service-account tokens).
	ControllerManager bool
	// Scheduler starts the stock kube-scheduler (profile default-scheduler). Karpenter only
	// provisions for Pods a scheduler marked Unschedulable, so Karpenter implies it.
	Scheduler bool
	// KWOK starts KWOK as the fake kubelet of every Node annotated kwok.x-k8s.io/node=fake.
	KWOK bool
	// Karpenter starts Karpenter with its KWOK cloud provider, applies its CRDs, a
	// KWOKNodeClass and NodePools (implies KWOK and ControllerManager).
	Karpenter bool

	// NodeBootDelays: time from Node creation to Ready, by Node labels (first match wins).
	NodeBootDelays []DelayRule
	// PodStartDelays: time from a Pod's binding to Running/Ready (image pull + app start), by
	// the labels of the Pod's Node (first match wins).
	PodStartDelays []DelayRule
	// SchedulerConfig replaces the stock scheduler's KubeSchedulerConfiguration (YAML); the
	// harness fills in clientConnection.kubeconfig and disables leader election.
	SchedulerConfig string
	// DelaySeed makes the delay rules' jitter reproducible.
	DelaySeed int64
	// KarpenterRegistrationDelay: how long Karpenter's KWOK provider waits before it creates
	// the Node of a new NodeClaim (instance launch). Boot delays add to it.
	KarpenterRegistrationDelay time.Duration
	// InstanceTypes offered by Karpenter's KWOK provider. Default: DefaultInstanceTypes().
	InstanceTypes []InstanceType
	// NodePools to apply, as YAML documents. Default: DefaultNodePool (Spot + On-Demand).
	NodePools []string
	// KarpenterEnv adds environment variables to Karpenter (e.g. BATCH_MAX_DURATION).
	KarpenterEnv []string

	// ExtraAPIServerFlags are appended to kube-apiserver's command line.
	ExtraAPIServerFlags []string
	// StartTimeout bounds Start. Default 3 minutes.
	StartTimeout time.Duration
	// Logf receives progress lines ("etcd ready", ...). Default: none.
	Logf func(format string, args ...any)
}

// Cluster is a running local control plane.
type Cluster struct {
	opts       Options
	runDir     string
	ownRunDir  bool
	pki        *pki
	kubeconfig string
	apiPort    int
	restConfig *rest.Config
	client     kubernetes.Interface

	// keepRunDir, when set, is asked at Stop whether to keep the run directory (StartT keeps
	// the logs of failed tests).
	keepRunDir func() bool

	// drawEpoch is where the delay draws' order restarts (RestartDrawOrder).
	drawEpoch atomic.Pointer[time.Time]

	mu      sync.Mutex
	procs   []*process // in start order
	cancel  context.CancelFunc
	stopped bool
}

// Start brings up the selected components and waits until each is ready.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Karpenter {
		opts.KWOK = true
		opts.ControllerManager = true
		opts.Scheduler = true
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.BinDir == "" {
		opts.BinDir = DefaultBinDir()
	}
	if err := checkBinaries(opts); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	if opts.RunDir == "" {
		dir, err := os.MkdirTemp("", "lifeboat-cluster-")
		if err != nil {
			return nil, err
		}
		c.runDir, c.ownRunDir = dir, !opts.KeepRunDir
	} else {
		if err := os.MkdirAll(opts.RunDir, 0o755); err != nil {
			return nil, err
		}
		c.runDir = opts.RunDir
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (component logs in %s)", err, c.runDir)
			c.ownRunDir = false // keep the logs of a failed start
			_ = c.Stop()
		}
	}()
	startCtx, cancelStart := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancelStart()
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel

	if c.pki, err = newPKI(filepath.Join(c.runDir, "pki")); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := c.startEtcdAndAPIServer(startCtx); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := c.startControllerManager(startCtx); err != nil {
			return nil, err
		}
	}
	if opts.Scheduler {
		if err := c.startScheduler(startCtx); err != nil {
			return nil, err
		}
	}
	if opts.KWOK {
		if err := c.startKWOK(startCtx, bgCtx); err != nil {
			return nil, err
		}
	}
	if opts.Karpenter {
		if err := c.startKarpenter(startCtx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// KeepRunDirIf makes Stop keep the run directory (the component logs) when keep reports true
// at that time, e.g. a test's Failed.
func (c *Cluster) KeepRunDirIf(keep func() bool) { c.keepRunDir = keep }

// Stop ends every component (reverse start order) and waits for each to exit.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ownRunDir && len(errs) == 0 && (c.keepRunDir == nil || !c.keepRunDir()) {
		_ = os.RemoveAll(c.runDir)
	}
	return errors.Join(errs...)
}

// PIDs lists the process IDs of every component started, running or not.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, p := range c.procs {
		out[p.name] = p.Pid()
	}
	return out
}

// LogTails returns the last n bytes of each component's log, for failure reports.
func (c *Cluster) LogTails(n int64) string {
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "===== %s (%s) =====\n%s\n", p.name, p.logPath, p.tail(n))
	}
	return b.String()
}

// RESTConfig is an admin (system:masters) client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Dynamic is an admin dynamic client, for CRDs such as NodePools and NodeClaims.
func (c *Cluster) Dynamic() dynamic.Interface { return dynamic.NewForConfigOrDie(c.RESTConfig()) }

// KubeconfigPath is an admin kubeconfig for kubectl and child processes.
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// RunDir holds certificates, data and component logs.
func (c *Cluster) RunDir() string { return c.runDir }

// BinDir holds the component binaries.
func (c *Cluster) BinDir() string { return c.opts.BinDir }

// CACertFile is the PEM file of the CA that signed the apiserver's serving certificate.
func (c *Cluster) CACertFile() string { return c.pki.CACert }

// Running reports whether every component is still running.
func (c *Cluster) Running() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.exited() {
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.name, p.waitErr, p.tail(3000))
		}
	}
	return nil
}

func (c *Cluster) track(p *process) {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
}

func (c *Cluster) start(name, bin string, args, env []string) (*process, error) {
	p, err := startProcess(c.runDir, name, filepath.Join(c.opts.BinDir, bin), args, env)
	if err != nil {
		return nil, err
	}
	c.track(p)
	return p, nil
}

// DefaultBinDir is $LIFEBOAT_BIN_DIR, else bin/ at the repository root (found by walking up
// from the working directory to go.mod), else ./bin.
func DefaultBinDir() string {
	if d := os.Getenv("LIFEBOAT_BIN_DIR"); d != "" {
		return d
	}
	if root, err := RepoRoot(); err == nil {
		return filepath.Join(root, "bin")
	}
	return "bin"
}

// RepoRoot finds the directory of Lifeboat's go.mod above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/lifeboat-k8s/lifeboat") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the lifeboat repository")
		}
		dir = parent
	}
}

// Binary names in BinDir.
const (
	BinEtcd              = "etcd"
	BinAPIServer         = "kube-apiserver"
	BinControllerManager = "kube-controller-manager"
	BinScheduler         = "kube-scheduler"
	BinKWOK              = "kwok"
	BinKarpenter         = "karpenter-kwok"
)

func checkBinaries(opts Options) error {
	need := []string{BinEtcd, BinAPIServer}
	if opts.ControllerManager {
		need = append(need, BinControllerManager)
	}
	if opts.Scheduler {
		need = append(need, BinScheduler)
	}
	if opts.KWOK {
		need = append(need, BinKWOK)
	}
	if opts.Karpenter {
		need = append(need, BinKarpenter)
	}
	var missing []string
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("component binaries missing in %s: %s; build them with `make tools` (or point LIFEBOAT_BIN_DIR at them)",
			opts.BinDir, strings.Join(missing, ", "))
	}
	return nil
}

func (c *Cluster) startEtcdAndAPIServer(ctx context.Context) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	began := time.Now()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := c.start("etcd", BinEtcd, []string{
		"--name=lifeboat",
		"--data-dir=" + filepath.Join(c.runDir, "etcd-data"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=lifeboat=" + peerURL,
		"--unsafe-no-fsync=true", // throwaway data: durability costs seconds per test on slow disks
		"--quota-backend-bytes=4294967296",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, etcd, "etcd health", func(ctx context.Context) bool { return httpOK(ctx, etcdURL+"/health") }); err != nil {
		return err
	}
	c.opts.Logf("etcd ready in %s", time.Since(began).Round(time.Millisecond))

	began = time.Now()
	c.apiPort = apiPort
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir=" + filepath.Join(c.runDir, "apiserver-certs"),
		"--tls-cert-file=" + c.pki.ServingCert,
		"--tls-private-key-file=" + c.pki.ServingKey,
		"--client-ca-file=" + c.pki.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki.ServiceAccPub,
		"--service-account-signing-key-file=" + c.pki.ServiceAccount,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// No kubelets mount tokens here: Pods can be created without a ServiceAccount object.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
		"--profiling=false",
		"--v=1",
	}
	args = append(args, c.opts.ExtraAPIServerFlags...)
	api, err := c.start("kube-apiserver", BinAPIServer, args, nil)
	if err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.runDir, "kubeconfig")
	if err := writeKubeconfig(c.kubeconfig, fmt.Sprintf("https://127.0.0.1:%d", apiPort), c.pki); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c.restConfig = cfg
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := waitFor(ctx, api, "kube-apiserver /readyz", func(ctx context.Context) bool {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	}); err != nil {
		return err
	}
	// The default namespace and the system RBAC roles appear shortly after readyz.
	if err := waitFor(ctx, api, "default namespace and bootstrap RBAC", func(ctx context.Context) bool {
		_, err1 := c.client.CoreV1().Namespaces().Get(ctx, "default", getOpts)
		_, err2 := c.client.RbacV1().ClusterRoles().Get(ctx, "system:kube-scheduler", getOpts)
		return err1 == nil && err2 == nil
	}); err != nil {
		return err
	}
	c.opts.Logf("kube-apiserver ready in %s on port %d", time.Since(began).Round(time.Millisecond), apiPort)
	return nil
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	began := time.Now()
	port, err := freePort()
	if err != nil {
		return err
	}
	kcm, err := c.start("kube-controller-manager", BinControllerManager, []string{
		"--kubeconfig=" + c.kubeconfig,
		"--authentication-kubeconfig=" + c.kubeconfig,
		"--authorization-kubeconfig=" + c.kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--leader-elect=false",
		"--service-account-private-key-file=" + c.pki.ServiceAccount,
		"--root-ca-file=" + c.pki.CACert,
		"--use-service-account-credentials=false",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		// KWOK plays hundreds of kubelets from one process; on a loaded machine its heartbeats
		// and Lease renewals fall behind the default 50 s grace, KCM marks the Node NotReady
		// and its Pods Ready=False, and no kubelet ever sets them Ready again. Nothing here
		// relies on heartbeat loss (power-off is an explicit stage; a reclaim deletes the
		// Node), so give the simulated kubelets slack.
		"--node-monitor-grace-period=5m",
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	// KCM is ready when its service-account controller has created the default ServiceAccount.
	if err := waitFor(ctx, kcm, "kube-controller-manager (default ServiceAccount)", func(ctx context.Context) bool {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", getOpts)
		return err == nil
	}); err != nil {
		return err
	}
	c.opts.Logf("kube-controller-manager ready in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	began := time.Now()
	port, err := freePort()
	if err != nil {
		return err
	}
	cfg := c.opts.SchedulerConfig
	if cfg == "" {
		cfg = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
	}
	cfg += fmt.Sprintf("clientConnection:\n  kubeconfig: %s\n  qps: 200\n  burst: 400\nleaderElection:\n  leaderElect: false\n", c.kubeconfig)
	cfgPath := filepath.Join(c.runDir, "kube-scheduler.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	s, err := c.start("kube-scheduler", BinScheduler, []string{
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + c.kubeconfig,
		"--authorization-kubeconfig=" + c.kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, s, "kube-scheduler /healthz", func(ctx context.Context) bool {
		return httpsOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	}); err != nil {
		return err
	}
	c.opts.Logf("kube-scheduler ready in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *Cluster) startKWOK(ctx, bgCtx context.Context) error {
	began := time.Now()
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(c.runDir, "kwok.yaml")
	if err := writeKWOKConfig(cfgPath); err != nil {
		return err
	}
	kwok, err := c.start("kwok", BinKWOK, []string{
		"--kubeconfig=" + c.kubeconfig,
		"--config=" + cfgPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KWOKAnnotation + "=" + KWOKAnnotationValue,
		fmt.Sprintf("--server-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--node-port=%d", ports[1]),
		"--node-lease-duration-seconds=40",
	}, nil)
	if err != nil {
		return err
	}
	dc := &delayController{client: c.client, nodeRules: c.opts.NodeBootDelays, podRules: c.opts.PodStartDelays, seed: c.opts.DelaySeed,
		podDraws: drawKeys{epoch: &c.drawEpoch}, nodeDraws: drawKeys{epoch: &c.drawEpoch}}
	if err := dc.run(bgCtx); err != nil {
		return err
	}
	if err := waitFor(ctx, kwok, "kwok /healthz", func(ctx context.Context) bool {
		return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0]))
	}); err != nil {
		return err
	}
	c.opts.Logf("kwok ready in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// StartProcess runs another component (e.g. one of Lifeboat's binaries in `lifeboat sim`) as a
// child of the harness: it logs to <RunDir>/<name>.log, is stopped by Stop, and dies with the
// harness like the others. bin is a path; env is added to the harness' environment.
func (c *Cluster) StartProcess(name, bin string, args, env []string) (pid int, err error) {
	p, err := startProcess(c.runDir, name, bin, args, env)
	if err != nil {
		return 0, err
	}
	c.track(p)
	return p.Pid(), nil
}

// WaitHealthy polls url (http or https, certificate not verified) until it answers 200, or the
// named process exits, or ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context, name, url string) error {
	var proc *process
	c.mu.Lock()
	for _, p := range c.procs {
		if p.name == name {
			proc = p
		}
	}
	c.mu.Unlock()
	return waitFor(ctx, proc, name+" "+url, func(ctx context.Context) bool {
		if strings.HasPrefix(url, "https://") {
			return httpsOK(ctx, url)
		}
		return httpOK(ctx, url)
	})
}

// FreePorts returns n distinct free loopback ports.
func FreePorts(n int) ([]int, error) { return freePorts(n) }

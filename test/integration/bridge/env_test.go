package bridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

const (
	poolName     = "bridge"
	queueName    = "lifeboat-interruptions"
	image        = "registry.k8s.io/pause:3.10"
	zone         = "us-east-1a"
	instanceType = "m5.xlarge"
	poolSize     = 2
)

// The state machine of the emulated pool instances is fast: what the bridge must get right is
// the order of events, and the test's rounds must be cheap. A resume (StartInstances → Node
// Ready) takes about a second, unless a test delays it (resumeDelayBinder).
func fastDelays() awsemu.Delays {
	return awsemu.Delays{Launch: 300 * time.Millisecond, NodeBoot: 500 * time.Millisecond, Stop: 500 * time.Millisecond,
		Start: 300 * time.Millisecond, NodeResume: 500 * time.Millisecond, Terminate: 300 * time.Millisecond}
}

// resumeDelayBinder is the emulator's KWOK binding with one knob: a resumed pool instance's
// Node turns Ready extra later than the emulator's own resume delay — the "lifeboat resumes
// late" of pkg/sim/testdata/late-lifeboat.yaml, switchable per test on the shared emulator.
type resumeDelayBinder struct {
	awsemu.KubeNodeBinder
	extra atomic.Int64 // nanoseconds
}

func (b *resumeDelayBinder) PowerOn(ctx context.Context, inst awsemu.BoundInstance) error {
	d := time.Duration(b.extra.Load())
	if d <= 0 {
		return b.KubeNodeBinder.PowerOn(ctx, inst)
	}
	return localcluster.SetPower(ctx, b.Client, inst.PrivateDNSName, true, d)
}

// setResumeDelay delays every resume from now on by d, until the test ends.
func (e *env) setResumeDelay(t *testing.T, d time.Duration) {
	e.binder.extra.Store(int64(d))
	t.Cleanup(func() { e.binder.extra.Store(0) })
}

// env is the shared environment.
type env struct {
	c         *localcluster.Cluster
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	emu       *awsemu.Server
	queueURL  string
	binder    *resumeDelayBinder
	binDir    string
	manifests string
	webhook   *proc
	scheduler *proc
	failed    atomic.Bool
}

var (
	sharedOnce sync.Once
	sharedEnv  *env
	sharedErr  error
)

// shared returns the shared environment, starting it on first use, with the webhook running.
func shared(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no control plane (make test-unit); the bridge's integration tests need one")
	}
	sharedOnce.Do(func() {
		began := time.Now()
		sharedEnv, sharedErr = startShared()
		if sharedErr == nil {
			t.Logf("shared environment up in %s (component logs in %s)", time.Since(began).Round(time.Millisecond), sharedEnv.c.RunDir())
		}
	})
	if sharedErr != nil {
		t.Fatalf("start the shared environment: %v", sharedErr)
	}
	e := sharedEnv
	t.Cleanup(func() {
		if t.Failed() {
			e.failed.Store(true)
		}
	})
	if !e.webhook.running() {
		if err := e.webhook.start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func stopShared(failed bool) error {
	e := sharedEnv
	if e == nil {
		return nil
	}
	if failed || e.failed.Load() {
		e.failed.Store(true)
		fmt.Fprintf(os.Stderr, "component logs (tails) from %s:\n%s\n", e.c.RunDir(), e.c.LogTails(6000))
	}
	emuErr := e.emu.Close()
	return errors.Join(e.c.Stop(), emuErr)
}

// clusterOptions: Karpenter offers one instance type in one zone (Spot and On-Demand), so the
// six replicas of a round land on one Spot node it launches for them, and every Karpenter node
// is one capacity pool. Pods start a second after their binding (a cached image and a quick
// app) on every node. Karpenter's provisioning batch waits 2 s of quiet (localcluster's default
// is 0.5 s): the ReplicaSet controller creates a round's Pods in slow-start batches (1, 2, 3),
// each through the Pod webhook, and on a loaded machine a shorter window split them over two
// nodes (3 + 3, seen 2026-12-02).
func clusterOptions() localcluster.Options {
	return localcluster.Options{
		Karpenter:    true,
		KarpenterEnv: []string{"BATCH_IDLE_DURATION=2s", "BATCH_MAX_DURATION=5s"},
		InstanceTypes: []localcluster.InstanceType{{Name: instanceType, CPU: "4", Memory: "16Gi", Pods: "58", Offerings: []localcluster.Offering{
			{Zone: zone, CapacityType: "spot", Price: 0.067, Available: true},
			{Zone: zone, CapacityType: "on-demand", Price: 0.192, Available: true},
		}}},
		NodePools:      []string{nodePool(fastPool, 100, ""), nodePool(slowPool, 1, "slow")},
		NodeBootDelays: []localcluster.DelayRule{{Selector: map[string]string{labelBoot: "slow"}, Delay: slowBoot}},
		PodStartDelays: []localcluster.DelayRule{{Selector: map[string]string{}, Delay: time.Second}},
		Logf:           func(format string, args ...any) { fmt.Fprintf(os.Stderr, "localcluster: "+format+"\n", args...) },
	}
}

// Two NodePools. Karpenter launches from the heavier "fast" one, whose KWOK nodes are Ready at
// once, so a round's Spot node costs little. A test that needs Karpenter's replacements to be
// as slow as on AWS (30–80 s, more than a lifeboat's resume) caps "fast" at zero CPU
// (capKarpenter): Karpenter then launches from "slow", whose nodes boot in slowBoot. Neither
// weight nor limits are part of the NodePool's template hash, so switching drifts no node.
const (
	fastPool  = "fast"
	slowPool  = "slow"
	labelBoot = "bridge.lifeboat.dev/boot"
	slowBoot  = 30 * time.Second
)

func nodePool(name string, weight int, boot string) string {
	p := localcluster.NodePool{Name: name, Weight: weight}
	if boot != "" {
		p.Labels = map[string]string{labelBoot: boot}
	}
	return p.YAML()
}

// capKarpenter makes Karpenter's new capacity slow (see fastPool) until the test ends.
func (e *env) capKarpenter(t *testing.T) {
	t.Helper()
	patch := func(body string) error {
		_, err := e.dyn.Resource(localcluster.NodePoolGVR).Patch(context.Background(), fastPool, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	if err := patch(`{"spec":{"limits":{"cpu":"0"}}}`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch(`{"spec":{"limits":null}}`); err != nil {
			t.Error(err)
		}
	})
}

func startShared() (_ *env, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	e := &env{binDir: localcluster.DefaultBinDir(), manifests: filepath.Join(root, "manifests")}
	for _, b := range []string{"lifeboat-webhook", "lifeboat-scheduler", "lifeboat-controller"} {
		if _, err := os.Stat(filepath.Join(e.binDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %s: build it with `make build` (or set LIFEBOAT_BIN_DIR)", b, e.binDir)
		}
	}
	c, err := localcluster.Start(ctx, clusterOptions())
	if err != nil {
		return nil, err
	}
	c.KeepRunDirIf(e.failed.Load)
	e.c, e.kube, e.dyn = c, c.Client(), c.Dynamic()
	defer func() {
		if err != nil {
			e.failed.Store(true)
			err = fmt.Errorf("%w\n%s", err, c.LogTails(4000))
			_ = c.Stop()
		}
	}()
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{filepath.Join(e.manifests, "crds")}); err != nil {
		return nil, err
	}
	for _, f := range []string{"namespace.yaml", "webhook/priorityclasses.yaml"} {
		b, err := os.ReadFile(filepath.Join(e.manifests, f))
		if err != nil {
			return nil, err
		}
		if err := c.ApplyYAML(ctx, string(b)); err != nil {
			return nil, fmt.Errorf("apply manifests/%s: %w", f, err)
		}
	}
	e.binder = &resumeDelayBinder{KubeNodeBinder: awsemu.KubeNodeBinder{Client: c.Client()}}
	e.emu, err = awsemu.Start(awsemu.New(awsemu.Options{Delays: fastDelays(), Binder: e.binder, Seed: 13}), "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the AWS emulator: %w", err)
	}
	e.queueURL = e.emu.CreateQueue(e.emu.URL, queueName)
	if err := e.startWebhook(ctx); err != nil {
		return nil, err
	}
	if err := e.startScheduler(ctx); err != nil {
		return nil, err
	}
	if err := c.ApplyYAML(ctx, warmPoolYAML); err != nil {
		return nil, fmt.Errorf("create the WarmPool: %w", err)
	}
	return e, nil
}

// warmPoolYAML: two standby m5.xlarge lifeboats (each seats a round's six 500m replicas),
// handed off as soon as the replacements are Ready, so a round's lifeboat is gone soon after
// its workload is.
const warmPoolYAML = `apiVersion: lifeboat.dev/v1alpha1
kind: WarmPool
metadata:
  name: ` + poolName + `
spec:
  size: 2
  instanceTypes: [` + instanceType + `]
  subnetIDs: [subnet-a]
  imageID: ami-0123456789abcdef0
  rootVolumeGiB: 40
  activeDuration: 30s
  handoff: WhenReplacementReady
  prePull:
    policy: List
    images: ["` + image + `"]
`

// proc is one of Lifeboat's binaries run as a child of the harness (it logs to the cluster's
// run directory and dies with the harness). Tests stop and kill it by its PID.
type proc struct {
	c         *localcluster.Cluster
	name, bin string
	args, env []string
	healthURL string

	mu  sync.Mutex
	pid int
}

func (p *proc) start(ctx context.Context) error {
	pid, err := p.c.StartProcess(p.name, p.bin, p.args, p.env)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return p.c.WaitHealthy(ctx, p.name, p.healthURL)
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0 && localcluster.ProcessAlive(p.pid)
}

// signal sends sig to the process and waits until it is gone; after grace it sends SIGKILL.
func (p *proc) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid == 0 || !localcluster.ProcessAlive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", p.name, pid, err)
	}
	deadline := time.Now().Add(grace)
	for localcluster.ProcessAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
			grace = 0
			if sig == syscall.SIGKILL {
				return fmt.Errorf("%s (pid %d) did not die after SIGKILL", p.name, pid)
			}
			sig = syscall.SIGKILL
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// stop ends the process gracefully (SIGTERM).
func (p *proc) stop() error { return p.signal(syscall.SIGTERM, 20*time.Second) }

// kill ends it at once (SIGKILL): a crash.
func (p *proc) kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

func (e *env) startWebhook(ctx context.Context) error {
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.c.RunDir(), "webhook-certs")
	ca, err := localcluster.WriteServingCert(certDir, "127.0.0.1")
	if err != nil {
		return err
	}
	// The port stays the same across restarts: the registered configurations point at it.
	e.webhook = &proc{c: e.c, name: "lifeboat-webhook", bin: filepath.Join(e.binDir, "lifeboat-webhook"),
		args: []string{
			"--kubeconfig=" + e.c.KubeconfigPath(),
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--port=%d", ports[0]),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[2]),
			"--leader-elect=false",
			"--shutdown-delay=0s",
			"--tls-cert-dir=" + certDir,
			"--v=2",
		},
		healthURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])}
	if err := e.webhook.start(ctx); err != nil {
		return err
	}
	return localcluster.RegisterLoopbackWebhooks(ctx, e.kube, filepath.Join(e.manifests, "webhook", "webhooks.yaml"), ports[0], ca)
}

// startScheduler runs lifeboat-scheduler with manifests/scheduler/config.yaml (kubeconfig
// filled in, leader election off: one replica).
func (e *env) startScheduler(ctx context.Context) error {
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(e.manifests, "scheduler", "config.yaml"))
	if err != nil {
		return err
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("manifests/scheduler/config.yaml: %w", err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = e.c.KubeconfigPath()
	cfg["clientConnection"] = conn
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(e.c.RunDir(), "lifeboat-scheduler.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	e.scheduler = &proc{c: e.c, name: "lifeboat-scheduler", bin: filepath.Join(e.binDir, "lifeboat-scheduler"),
		args: []string{
			"--config=" + path,
			"--authentication-kubeconfig=" + e.c.KubeconfigPath(),
			"--authorization-kubeconfig=" + e.c.KubeconfigPath(),
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"-v=3", // each scheduling attempt and the plugin's narrowing: logLinesAbout
		},
		healthURL: fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0])}
	return e.scheduler.start(ctx)
}

// logLinesAbout returns the lines of Lifeboat's component logs (scheduler, controller, webhook)
// that mention s, each prefixed with its component, at most max per component (the last ones).
func (e *env) logLinesAbout(s string, max int) string {
	var b strings.Builder
	for _, name := range []string{"lifeboat-scheduler", "lifeboat-controller", "lifeboat-webhook"} {
		raw, err := os.ReadFile(filepath.Join(e.c.RunDir(), name+".log"))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, err)
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, s) {
				lines = append(lines, l)
			}
		}
		if len(lines) > max {
			lines = lines[len(lines)-max:]
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "%s| %s\n", name, l)
		}
	}
	return b.String()
}

// bridgeFlags are the controller's bridge flags of a test. The notice is shortened (AWS: 120 s)
// so that a test that waits for the reclaim stays short; the holds' deadlines follow from it.
type bridgeFlags struct {
	notice, margin, resumeTimeout time.Duration
}

// startController runs lifeboat-controller against the emulator with the test's bridge flags;
// it is stopped (SIGTERM, by PID) when the test ends.
func (e *env) startController(t *testing.T, f bridgeFlags) *proc {
	t.Helper()
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	o := e.emu.ClientOptions()
	creds, err := o.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{c: e.c, name: "lifeboat-controller", bin: filepath.Join(e.binDir, "lifeboat-controller"),
		args: []string{
			"--ec2-endpoint=" + e.emu.URL,
			"--sqs-endpoint=" + e.emu.URL,
			"--aws-region=" + o.Region,
			"--queue-url=" + e.queueURL,
			"--sqs-wait-time=1s",
			"--sqs-visibility-timeout=5s",
			"--leader-elect=false",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
			"--resync=5s",
			"--bridge-notice=" + f.notice.String(),
			"--bridge-margin=" + f.margin.String(),
			"--bridge-resume-timeout=" + f.resumeTimeout.String(),
			"--v=2",
		},
		env: []string{
			"KUBECONFIG=" + e.c.KubeconfigPath(),
			"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID,
			"AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey,
			"AWS_REGION=" + o.Region,
		},
		healthURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Error(err)
		}
	})
	if err := p.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// poolNodes lists the pool's Nodes.
func (e *env) poolNodes(ctx context.Context) ([]corev1.Node, error) {
	list, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPool + "=" + poolName})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// seatReady: a lifeboat that can seat Pods now (active, Ready, the standby taint off).
func seatReady(n *corev1.Node) bool {
	return n.Labels[v1alpha1.LabelPool] != "" && nodeutil.State(n) == v1alpha1.NodeStateActive && n.DeletionTimestamp == nil &&
		nodeutil.Ready(n) && !nodeutil.HasTaint(n, v1alpha1.TaintStandby)
}

// quiesce brings the cluster to a test's (or round's) start: the Karpenter nodes of earlier
// tests retired, no lifeboat active, one in standby.
func (e *env) quiesce(t *testing.T) {
	t.Helper()
	e.clearLeftoverPending(t)
	e.retireKarpenterNodes(t)
	e.waitPoolIdle(t, 120*time.Second)
}

// clearLeftoverPending removes the unbound Pods that earlier tests' namespaces (deleted at
// their cleanup, asynchronously) still hold: Karpenter provisions for every Pending Pod, so a
// leftover replica provisioned together with the next test's Pods packs them onto two nodes
// instead of one (seen: 5 leftover Pods + 3 new ones → NodeClaims of 7 and 1 Pods).
func (e *env) clearLeftoverPending(t *testing.T) {
	t.Helper()
	waitFor(t, "no Pending Pods left by earlier tests", 60*time.Second, func(ctx context.Context) (bool, string) {
		pods, err := e.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending,spec.nodeName="})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for i := range pods.Items {
			p := &pods.Items[i]
			ns, err := e.kube.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			if err == nil && ns.DeletionTimestamp == nil {
				continue // a live namespace's Pod: not a leftover
			}
			left = append(left, p.Namespace+"/"+p.Name)
			if err := e.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
		}
		return len(left) == 0, fmt.Sprintf("deleting leftover Pending Pods %v", left)
	})
}

// waitPoolIdle waits until no lifeboat is active (a new protected Pod would land on an active
// one, not on the Spot node a test wants it on) and at least one is in standby.
func (e *env) waitPoolIdle(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, "the warm pool idle (none active, one in standby)", timeout, func(ctx context.Context) (bool, string) {
		nodes, err := e.poolNodes(ctx)
		if err != nil {
			return false, err.Error()
		}
		count := map[string]int{}
		for i := range nodes {
			count[string(nodeutil.State(&nodes[i]))]++
		}
		return count[string(v1alpha1.NodeStateActive)] == 0 && count[string(v1alpha1.NodeStateStandby)] >= 1, fmt.Sprintf("pool nodes by state %v", count)
	})
}

// waitFor polls cond every 100 ms until it holds; on timeout the test fails with cond's last
// description.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func poll(timeout time.Duration, cond func(ctx context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	for {
		ok, desc := cond(ctx)
		if ok {
			return nil
		}
		if ctx.Err() == nil {
			last = desc
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s (last: %s)", timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

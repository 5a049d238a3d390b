package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// Lifeboat's binaries, built by `make build` into the bin directory.
const (
	BinWebhook    = "lifeboat-webhook"
	BinScheduler  = "lifeboat-scheduler"
	BinController = "lifeboat-controller"
)

// LifeboatInstaller installs Lifeboat into a simulation's control plane from the same binaries,
// flags and configuration files the manifests deploy: the CRD, namespace and PriorityClasses
// from manifests/, the webhook with manifests/webhook/webhooks.yaml pointed at its loopback
// port, the scheduler with manifests/scheduler/config.yaml, the controller against the AWS
// emulator (in this process, bound to KWOK), and the scenario's WarmPool.
type LifeboatInstaller struct {
	BinDir, ManifestsDir string
	// EmulatorURL and QueueURL are set by Install (for `lifeboat sim up`).
	EmulatorURL, QueueURL string
}

// NewLifeboatInstaller finds Lifeboat's binaries and manifests, and says how to build them
// when they are missing.
func NewLifeboatInstaller(binDir string) (*LifeboatInstaller, error) {
	var missing []string
	for _, b := range []string{BinWebhook, BinScheduler, BinController} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("Lifeboat binaries missing in %s: %s; build them with `make build` (or pass --bin-dir)", binDir, strings.Join(missing, ", "))
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, fmt.Errorf("lifeboat mode reads manifests/ of the Lifeboat repository; run from inside it: %w", err)
	}
	return &LifeboatInstaller{BinDir: binDir, ManifestsDir: filepath.Join(root, "manifests")}, nil
}

// Install implements Installer.
func (l *LifeboatInstaller) Install(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario, runDir string) (Notifier, error) {
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{filepath.Join(l.ManifestsDir, "crds")}); err != nil {
		return nil, err
	}
	for _, f := range []string{"namespace.yaml", "webhook/priorityclasses.yaml"} {
		b, err := os.ReadFile(filepath.Join(l.ManifestsDir, f))
		if err != nil {
			return nil, err
		}
		if err := c.ApplyYAML(ctx, string(b)); err != nil {
			return nil, fmt.Errorf("apply manifests/%s: %w", f, err)
		}
	}
	emu, queueURL, err := l.startEmulator(c, s)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); _ = emu.Close() }()
	l.EmulatorURL, l.QueueURL = emu.URL, queueURL
	if err := l.startWebhook(ctx, c, runDir, bridgeOn(s)); err != nil {
		return nil, err
	}
	if err := l.startScheduler(ctx, c, runDir); err != nil {
		return nil, err
	}
	if err := l.startController(ctx, c, emu, queueURL, s.Timing.Notice.Duration, bridgeOn(s)); err != nil {
		return nil, err
	}
	if err := l.createWarmPool(ctx, c, s); err != nil {
		return nil, err
	}
	return &sqsNotifier{emu: emu}, nil
}

// Ready implements Installer: the pool has its standby nodes (launched, pre-pulled,
// hibernated). The pool warms while Karpenter boots the workloads' nodes.
func (l *LifeboatInstaller) Ready(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario) error {
	return waitStandby(ctx, c, s)
}

// startEmulator runs the AWS emulator in this process: pool instances boot like Karpenter's
// nodes (launch + boot = karpenterBoot) and resume in lifeboatResume.
func (l *LifeboatInstaller) startEmulator(c *localcluster.Cluster, s *scenario.Scenario) (*awsemu.Server, string, error) {
	t := s.Timing
	launch := 5 * time.Second
	d := awsemu.DefaultDelays()
	d.Launch, d.Start = launch, launch/2
	d.NodeBoot = max(t.KarpenterBoot.Mean.Duration-launch, time.Second)
	d.NodeResume = max(t.LifeboatResume.Mean.Duration-d.Start, time.Second)
	d.Stop = 5 * time.Second
	emu, err := awsemu.Start(awsemu.New(awsemu.Options{Delays: d, Binder: &awsemu.KubeNodeBinder{Client: c.Client()}, Seed: uint64(s.Seed)}), "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("start the AWS emulator: %w", err)
	}
	return emu, emu.CreateQueue(emu.URL, QueueName), nil
}

func (l *LifeboatInstaller) startWebhook(ctx context.Context, c *localcluster.Cluster, runDir string, bridge bool) error {
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return err
	}
	certDir := filepath.Join(runDir, "webhook-certs")
	ca, err := localcluster.WriteServingCert(certDir, "127.0.0.1")
	if err != nil {
		return err
	}
	if _, err := c.StartProcess("lifeboat-webhook", filepath.Join(l.BinDir, BinWebhook), []string{
		"--kubeconfig=" + c.KubeconfigPath(),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--port=%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[2]),
		"--leader-elect=false",
		"--tls-cert-dir=" + certDir,
		"--eviction-pending-hold=" + map[bool]string{true: policy.DefaultPendingHold.String(), false: "0s"}[bridge],
	}, nil); err != nil {
		return err
	}
	if err := c.WaitHealthy(ctx, "lifeboat-webhook", fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil {
		return err
	}
	return localcluster.RegisterLoopbackWebhooks(ctx, c.Client(), filepath.Join(l.ManifestsDir, "webhook", "webhooks.yaml"), ports[0], ca)
}

// startScheduler runs the scheduler with manifests/scheduler/config.yaml; only
// clientConnection.kubeconfig is filled in (with --config, kube-scheduler ignores --kubeconfig).
func (l *LifeboatInstaller) startScheduler(ctx context.Context, c *localcluster.Cluster, runDir string) error {
	port, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(l.ManifestsDir, "scheduler", "config.yaml"))
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
	conn["kubeconfig"] = c.KubeconfigPath()
	cfg["clientConnection"] = conn
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(runDir, "lifeboat-scheduler.yaml")
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		return err
	}
	if _, err := c.StartProcess("lifeboat-scheduler", filepath.Join(l.BinDir, BinScheduler), []string{
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + c.KubeconfigPath(),
		"--authorization-kubeconfig=" + c.KubeconfigPath(),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port[0]),
	}, nil); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, "lifeboat-scheduler", fmt.Sprintf("https://127.0.0.1:%d/healthz", port[0]))
}

// startController runs the controller against the emulator; the bridge's notice is the
// scenario's (a shortened notice shortens the holds), its resume timeout at most half of it.
func (l *LifeboatInstaller) startController(ctx context.Context, c *localcluster.Cluster, emu *awsemu.Server, queueURL string, notice time.Duration, bridge bool) error {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return err
	}
	o := emu.ClientOptions()
	creds, err := o.Credentials.Retrieve(ctx)
	if err != nil {
		return err
	}
	if _, err := c.StartProcess("lifeboat-controller", filepath.Join(l.BinDir, BinController), []string{
		"--ec2-endpoint=" + emu.URL,
		"--sqs-endpoint=" + emu.URL,
		"--aws-region=" + o.Region,
		"--queue-url=" + queueURL,
		"--sqs-wait-time=2s",
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		"--resync=10s",
		"--bridge-notice=" + notice.String(),
		"--bridge-resume-timeout=" + min(50*time.Second, notice/2).String(),
		"--bridge-margin=" + min(15*time.Second, notice/4).String(),
		fmt.Sprintf("--disable-bridge=%t", !bridge),
	}, []string{
		"KUBECONFIG=" + c.KubeconfigPath(),
		"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey,
		"AWS_REGION=" + o.Region,
	}); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, "lifeboat-controller", fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
}

func (l *LifeboatInstaller) createWarmPool(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario) error {
	wp := s.WarmPool
	size := intstr.Parse(wp.Size)
	pool := &v1alpha1.WarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.Group + "/v1alpha1", Kind: "WarmPool"},
		ObjectMeta: metav1.ObjectMeta{Name: WarmPoolName},
		Spec: v1alpha1.WarmPoolSpec{
			Size:           size,
			InstanceTypes:  wp.InstanceTypes,
			ImageID:        "ami-0123456789abcdef0",
			RootVolumeGiB:  int32(wp.EBSGiBPerNode),
			ActiveDuration: &metav1.Duration{Duration: wp.ActiveDuration.Duration},
			Handoff:        v1alpha1.HandoffPolicy(wp.Handoff),
			AfterUse:       v1alpha1.AfterUsePolicy(wp.AfterUse),
			PrePull:        v1alpha1.PrePull{Policy: v1alpha1.PrePullAuto},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		return err
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := c.ApplyYAML(ctx, string(b)); err != nil {
		return fmt.Errorf("create WarmPool: %w", err)
	}
	return nil
}

// waitStandby waits until the pool has its standby nodes (launched, pre-pulled, hibernated).
func waitStandby(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario) error {
	want := 0
	fmt.Sscanf(s.WarmPool.Size, "%d", &want)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: v1alpha1.LabelPool + "=" + WarmPoolName + "," + v1alpha1.LabelState + "=" + string(v1alpha1.NodeStateStandby)})
		if err == nil && len(nodes.Items) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool did not reach %d standby nodes in 5m (see lifeboat-controller.log)", want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// sqsNotifier sends the EventBridge Spot Instance Interruption Warning to Lifeboat's queue for
// nodes backed by EC2 instances. Karpenter's KWOK nodes have kwok:// provider IDs, not EC2
// instance IDs; Lifeboat learns of their notices from the SpotInterrupted events the market
// records, as it does from Karpenter's AWS provider in production.
type sqsNotifier struct{ emu *awsemu.Server }

func (n *sqsNotifier) NotifySpotInterruption(_ context.Context, node *corev1.Node, at time.Time) error {
	body, ok := spotInterruptionBody(node, at)
	if !ok {
		return nil
	}
	_, err := n.emu.SendMessage(QueueName, body)
	return err
}

// QueueName is Lifeboat's interruption queue in the emulator.
const QueueName = "lifeboat-interruptions"

// spotInterruptionBody is the EventBridge "EC2 Spot Instance Interruption Warning" for the
// node's instance; false for nodes not backed by an EC2 instance.
func spotInterruptionBody(node *corev1.Node, at time.Time) (string, bool) {
	id := instanceID(node.Spec.ProviderID)
	if id == "" {
		return "", false
	}
	body, _ := json.Marshal(map[string]any{
		"version": "0", "id": "sim-" + id + "-" + fmt.Sprint(at.UnixNano()), "detail-type": "EC2 Spot Instance Interruption Warning",
		"source": "aws.ec2", "account": "000000000000", "time": at.UTC().Format(time.RFC3339), "region": "us-east-1",
		"resources": []string{"arn:aws:ec2:us-east-1b:instance/" + id},
		"detail":    map[string]string{"instance-id": id, "instance-action": "terminate"},
	})
	return string(body), true
}

// instanceID extracts i-… from aws:///zone/i-….
func instanceID(providerID string) string {
	if !strings.HasPrefix(providerID, "aws://") {
		return ""
	}
	parts := strings.Split(providerID, "/")
	return parts[len(parts)-1]
}

// bridgeOn: the scenario runs Lifeboat with the bridge (the default).
func bridgeOn(s *scenario.Scenario) bool {
	return s.WarmPool == nil || s.WarmPool.Bridge == nil || *s.WarmPool.Bridge
}

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
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/release"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// Lifeboat's binaries, built by `make build` into the bin directory.
const (
	BinWebhook    = "lifeboat-webhook"
	BinScheduler  = "lifeboat-scheduler"
	BinController = "lifeboat-controller"
)

// LifeboatInstaller installs Lifeboat into a simulation's control plane the way users do: the
// AWS emulator (in this process, bound to KWOK) stands in for AWS, and `helm install` of
// charts/lifeboat with values written from the scenario (<run dir>/lifeboat-values.yaml)
// installs the CRD, the PriorityClasses, RBAC, the webhook configurations and the scenario's
// WarmPool. The chart's components run as local processes configured from what the chart
// installed (pkg/localcluster/release): the control plane has no kubelet to run images.
type LifeboatInstaller struct {
	BinDir, ChartDir string
	// EmulatorURL and QueueURL are set by Install (for `lifeboat sim up`).
	EmulatorURL, QueueURL string
	// Release is the installed chart, set by Install.
	Release *release.Release
}

// NewLifeboatInstaller finds Lifeboat's binaries, helm and the chart, and says how to build
// them when they are missing.
func NewLifeboatInstaller(binDir string) (*LifeboatInstaller, error) {
	var missing []string
	for _, b := range []string{BinWebhook, BinScheduler, BinController, "helm"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing in %s: %s; build them with `make tools build` (or pass --bin-dir)", binDir, strings.Join(missing, ", "))
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, fmt.Errorf("lifeboat mode installs charts/lifeboat of the Lifeboat repository; run from inside it: %w", err)
	}
	return &LifeboatInstaller{BinDir: binDir, ChartDir: filepath.Join(root, "charts", "lifeboat")}, nil
}

// Install implements Installer.
func (l *LifeboatInstaller) Install(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario, runDir string) (Notifier, error) {
	emu, queueURL, err := l.startEmulator(c, s)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); _ = emu.Close() }()
	l.EmulatorURL, l.QueueURL = emu.URL, queueURL
	valuesFile := filepath.Join(runDir, "lifeboat-values.yaml")
	if err := writeValues(valuesFile, chartValues(s, emu.URL, queueURL)); err != nil {
		return nil, err
	}
	o := emu.ClientOptions()
	creds, err := o.Credentials.Retrieve(ctx)
	if err != nil {
		return nil, err
	}
	rel, err := release.Install(ctx, c, release.Options{
		Helm: filepath.Join(l.BinDir, "helm"), Chart: l.ChartDir, BinDir: l.BinDir,
		Values:  []string{valuesFile},
		WorkDir: filepath.Join(runDir, "chart"),
		// What IRSA or Pod Identity gives the controller's Pod in a real cluster.
		ControllerEnv: []string{"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey},
	})
	if err != nil {
		return nil, err
	}
	if err := rel.Start(ctx); err != nil {
		return nil, err
	}
	l.Release = rel
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

// chartValues are the chart values of a scenario: the emulator as AWS, no Pods for the
// components (they run as local processes; Pods would take the simulated nodes' capacity),
// the bridge's timing from the scenario's notice (a shortened notice shortens the holds, the
// resume timeout at most half of it), and the scenario's WarmPool.
func chartValues(s *scenario.Scenario, emulatorURL, queueURL string) map[string]any {
	bridge := bridgeOn(s)
	notice := s.Timing.Notice.Duration
	return map[string]any{
		"aws": map[string]any{
			"region": "us-east-1", "ec2Endpoint": emulatorURL, "sqsEndpoint": emulatorURL, "interruptionQueueURL": queueURL,
		},
		"webhook": map[string]any{
			"replicas": 0,
			"extraArgs": []string{
				"--eviction-pending-hold=" + map[bool]string{true: policy.DefaultPendingHold.String(), false: "0s"}[bridge],
			},
		},
		"scheduler": map[string]any{"replicas": 0},
		"controller": map[string]any{
			"resync": "10s",
			"extraArgs": []string{
				"--sqs-wait-time=2s",
				"--bridge-notice=" + notice.String(),
				"--bridge-resume-timeout=" + min(50*time.Second, notice/2).String(),
				"--bridge-margin=" + min(15*time.Second, notice/4).String(),
				fmt.Sprintf("--disable-bridge=%t", !bridge),
			},
		},
		"warmPools": []any{map[string]any{"name": WarmPoolName, "spec": warmPoolSpec(s)}},
	}
}

func warmPoolSpec(s *scenario.Scenario) v1alpha1.WarmPoolSpec {
	wp := s.WarmPool
	return v1alpha1.WarmPoolSpec{
		Size:           intstr.Parse(wp.Size),
		InstanceTypes:  wp.InstanceTypes,
		ImageID:        "ami-0123456789abcdef0",
		RootVolumeGiB:  int32(wp.EBSGiBPerNode),
		ActiveDuration: &metav1.Duration{Duration: wp.ActiveDuration.Duration},
		Handoff:        v1alpha1.HandoffPolicy(wp.Handoff),
		AfterUse:       v1alpha1.AfterUsePolicy(wp.AfterUse),
		PrePull:        v1alpha1.PrePull{Policy: v1alpha1.PrePullAuto},
	}
}

// writeValues writes chart values as YAML (through JSON, so API types keep their field names).
func writeValues(path string, values map[string]any) error {
	b, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	header := "# Chart values `lifeboat sim` installed charts/lifeboat with, written from the scenario.\n"
	return os.WriteFile(path, append([]byte(header), b...), 0o644)
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

// SetPlacementScore sets the Spot placement score the emulator's GetSpotPlacementScores answers.
func (n *sqsNotifier) SetPlacementScore(instanceType, zone string, score int) {
	n.emu.SetPlacementScore(instanceType, zone, score)
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

package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// UpState is what `lifeboat sim up` writes for `lifeboat sim interrupt`.
type UpState struct {
	Kubeconfig  string        `json:"kubeconfig"`
	EmulatorURL string        `json:"emulatorURL"`
	QueueURL    string        `json:"queueURL"`
	Region      string        `json:"region"`
	Notice      time.Duration `json:"notice"`
	Scenario    string        `json:"scenario"`
}

// Up starts a local control plane with Lifeboat installed and the scenario's workloads, writes
// the kubeconfig and the state file, calls ready, and runs until ctx ends.
func Up(ctx context.Context, s *scenario.Scenario, installer *LifeboatInstaller, runDir, kubeconfig, stateFile string, progress io.Writer, ready func()) error {
	_ = os.RemoveAll(runDir)
	copts := clusterOptions(s)
	copts.BinDir, copts.RunDir, copts.KeepRunDir = installer.BinDir, runDir, true
	fmt.Fprintf(progress, "starting the local control plane (logs in %s)\n", runDir)
	c, err := localcluster.Start(ctx, copts)
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Fprintf(progress, "installing Lifeboat with helm (charts/lifeboat, values in %s) and the warm pool of scenario %s\n", filepath.Join(runDir, "lifeboat-values.yaml"), s.Name)
	if _, err := installer.Install(ctx, c, s, runDir); err != nil {
		return err
	}
	if err := createWorkloads(ctx, c, s.Workloads, true); err != nil {
		return err
	}
	// Notices sent before the workloads run would interrupt Pods still Pending: wait for them
	// as `sim run` does before t0.
	obsCtx, stopObs := context.WithCancel(ctx)
	obs, err := newObserver(obsCtx, ClientsOf(c), workloadKeys(s), nodePrice(s))
	if err != nil {
		stopObs()
		return err
	}
	fmt.Fprintf(progress, "waiting for every workload to be ready (Karpenter boots nodes in ~%s)\n", s.Timing.KarpenterBoot.Mean)
	err = waitWarm(ctx, obs, s, s.WarmupTimeout.Duration)
	stopObs()
	if err != nil {
		return err
	}
	fmt.Fprintln(progress, "waiting for the warm pool's standby nodes")
	if err := installer.Ready(ctx, c, s); err != nil {
		return err
	}
	b, err := os.ReadFile(c.KubeconfigPath())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	st, _ := json.MarshalIndent(UpState{Kubeconfig: kubeconfig, EmulatorURL: installer.EmulatorURL, QueueURL: installer.QueueURL,
		Region: "us-east-1", Notice: s.Timing.Notice.Duration, Scenario: s.Name}, "", "  ")
	if err := os.WriteFile(stateFile, st, 0o644); err != nil {
		return err
	}
	defer os.Remove(stateFile)
	ready()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(progress, "stopping every component...")
			return nil
		case <-t.C:
			if err := c.Running(); err != nil {
				return err
			}
		}
	}
}

// Interrupt delivers count Spot notices to nodes of a pool of the cluster `lifeboat sim up`
// started, spread over spread, the way the market does in a scenario, and waits for their
// reclaims. It returns the markers of what happened.
func Interrupt(ctx context.Context, stateFile string, pool scenario.Pool, count int, spread time.Duration, progress io.Writer) ([]report.Marker, error) {
	raw, err := os.ReadFile(stateFile)
	if err != nil {
		return nil, fmt.Errorf("no running `lifeboat sim up` (%v): start one first", err)
	}
	var st UpState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", stateFile, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	clients, err := awsclient.New(ctx, awsclient.Options{Region: st.Region, SQSEndpoint: st.EmulatorURL, EC2Endpoint: st.EmulatorURL,
		Credentials: aws.AnonymousCredentials{}})
	if err != nil {
		return nil, err
	}
	cl := Clients{Kube: kube, Dynamic: dyn}
	obs, err := newObserver(ctx, cl, nil, nil)
	if err != nil {
		return nil, err
	}
	obs.begin()
	s := &scenario.Scenario{Timing: scenario.Timing{Notice: scenario.Duration{Duration: st.Notice}},
		Events: []scenario.Event{{Kind: scenario.EventBurst, Pool: pool, Count: count, Spread: scenario.Duration{Duration: spread}}}}
	m := &market{c: cl, s: s, obs: obs, killed: map[string]int{}, noticed: map[string]time.Time{},
		notifier: sqsClientNotifier{client: clients.SQS, queueURL: st.QueueURL}}
	fmt.Fprintf(progress, "%d notice(s) to the busiest matching Spot pool, reclaim %s after each\n", count, st.Notice)
	if err := m.play(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, n := range m.killed {
		m.markers = append(m.markers, report.Marker{Kind: "killed", Label: fmt.Sprintf("%s: %d Pods killed at reclaim", k, n)})
	}
	return m.markers, nil
}

type sqsClientNotifier struct {
	client   *sqs.Client
	queueURL string
}

func (n sqsClientNotifier) NotifySpotInterruption(ctx context.Context, node *corev1.Node, at time.Time) error {
	body, ok := spotInterruptionBody(node, at)
	if !ok {
		return nil
	}
	_, err := n.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(n.queueURL), MessageBody: aws.String(body)})
	return err
}

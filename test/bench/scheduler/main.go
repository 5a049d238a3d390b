// Command scheduler benchmarks lifeboat-scheduler in the style of kube-scheduler's
// scheduler_perf: one run of the real binary against the real local apiserver (no kubelets),
// with two profiles in one process — default-scheduler (stock plugins) and
// lifeboat-scheduler (manifests/scheduler/config.yaml) — fed interleaved, identical
// workloads. It writes a JSON report. Run it with hack/bench-scheduler.sh (make bench-scheduler).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

type options struct {
	binary, config, out, workDir string
	nodes, pods, reps, owners    int
	poolFraction, protectedFrac  float64
	qps                          int
	percentageOfNodesToScore     int
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "path of the built lifeboat-scheduler binary (required)")
	flag.StringVar(&o.config, "config", "manifests/scheduler/config.yaml", "configuration whose lifeboat-scheduler profile is measured")
	flag.StringVar(&o.out, "out", ".lifeboat/bench/scheduler.json", "report file")
	flag.StringVar(&o.workDir, "work-dir", ".lifeboat/bench/scheduler", "scheduler config and log")
	flag.IntVar(&o.nodes, "nodes", 1000, "nodes")
	flag.IntVar(&o.pods, "pods", 5000, "pods per measurement")
	flag.IntVar(&o.reps, "reps", 5, "interleaved repetitions (each measures both profiles)")
	flag.IntVar(&o.owners, "owners", 50, "workloads (controller owners) the pods belong to")
	flag.Float64Var(&o.poolFraction, "pool-fraction", 0.1, "fraction of nodes that are active lifeboat pool nodes")
	flag.Float64Var(&o.protectedFrac, "protected-fraction", 0.5, "fraction of pods labelled lifeboat.dev/protected=true")
	flag.IntVar(&o.percentageOfNodesToScore, "lifeboat-percentage-of-nodes-to-score", -1,
		"override the lifeboat profile's percentageOfNodesToScore (0 = kube-scheduler's adaptive default; -1 = as in the config)")
	flag.IntVar(&o.qps, "client-qps", 5000, "scheduler client QPS and burst (scheduler_perf does not throttle its client either)")
	klog.InitFlags(nil)
	flag.Parse()
	if o.binary == "" {
		fmt.Fprintln(os.Stderr, "--binary is required")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scheduler:", err)
		os.Exit(1)
	}
}

const profileDefault = "default-scheduler"

var profiles = []string{profileDefault, v1alpha1.SchedulerName}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	c, err := localcluster.Start(ctx, localcluster.Options{Logf: logf})
	if err != nil {
		return fmt.Errorf("start local control plane: %w", err)
	}
	defer c.Stop()

	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	client := kubernetes.NewForConfigOrDie(cfg)

	logf("creating %d nodes (%d lifeboat pool nodes)", o.nodes, int(float64(o.nodes)*o.poolFraction))
	if err := createNodes(ctx, client, o); err != nil {
		return err
	}

	configPath := filepath.Join(o.workDir, "config.yaml")
	if err := writeBenchConfig(o, c.KubeconfigPath(), configPath); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	sched, err := startScheduler(o, configPath, port)
	if err != nil {
		return err
	}
	defer sched.stop()
	metricsURL := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
	if err := waitHealthy(ctx, port); err != nil {
		return err
	}

	report := Report{
		Command: os.Args, Nodes: o.nodes, PoolNodes: int(float64(o.nodes) * o.poolFraction), PodsPerRun: o.pods,
		ProtectedFraction: o.protectedFrac, Owners: o.owners, Reps: o.reps, ClientQPS: o.qps,
		LifeboatPercentageOfNodesToScoreOverride: o.percentageOfNodesToScore,
		SchedulerPerfBasicThreshold:              680, Started: time.Now().UTC(),
	}
	for rep := range o.reps {
		order := profiles
		if rep%2 == 1 { // alternate which profile goes first
			order = []string{profiles[1], profiles[0]}
		}
		for _, profile := range order {
			before, err := scrape(ctx, metricsURL)
			if err != nil {
				return err
			}
			res, err := measure(ctx, client, sched, o, rep, profile)
			if err != nil {
				return err
			}
			after, err := scrape(ctx, metricsURL)
			if err != nil {
				return err
			}
			res.ExtensionPointP99Ms = extensionPointP99(before, after, profile)
			res.PluginP99Ms = pluginP99(before, after, []string{"LifeboatTaints", "LifeboatPlacement", "CapacityPoolSpread", "TaintToleration", "NodeResourcesFit", "PodTopologySpread"})
			logf("rep %d %-18s %7.1f pods/s (created in %.1fs, scheduled in %.1fs) p99 %v", rep+1, profile, res.PodsPerSecond, res.CreateSeconds, res.ElapsedSeconds, res.ExtensionPointP99Ms)
			report.Runs = append(report.Runs, res)
			if err := deletePods(ctx, client, res.Namespace); err != nil {
				return err
			}
		}
	}
	report.Summarize()
	report.Finished = time.Now().UTC()
	b, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	logf("%s", report.SummaryLine())
	logf("wrote %s", o.out)
	return nil
}

// Capacity pools of the benchmark cluster.
var (
	instanceTypes = []string{"m5.large", "m5.xlarge", "c5.large", "c5.xlarge", "r5.large"}
	zones         = []string{"us-east-1a", "us-east-1b", "us-east-1c"}
)

// createNodes creates ordinary nodes over instance types × zones × {spot, on-demand} and
// active lifeboat pool nodes, each with scheduler_perf's default node shape.
func createNodes(ctx context.Context, client kubernetes.Interface, o options) error {
	poolNodes := int(float64(o.nodes) * o.poolFraction)
	alloc := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("32Gi"), v1.ResourcePods: resource.MustParse("110"),
	}
	return parallel(ctx, o.nodes, 32, func(ctx context.Context, i int) error {
		typ, zone := instanceTypes[i%len(instanceTypes)], zones[(i/len(instanceTypes))%len(zones)]
		name := fmt.Sprintf("node-%04d", i)
		labels := map[string]string{v1.LabelHostname: name, v1.LabelOSStable: "linux", v1alpha1.LabelInstanceType: typ, v1alpha1.LabelZone: zone}
		var taints []v1.Taint
		if i < poolNodes {
			name = fmt.Sprintf("lifeboat-%04d", i)
			labels[v1.LabelHostname] = name
			labels[v1alpha1.LabelPool] = "bench"
			labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateActive)
			taints = []v1.Taint{{Key: v1alpha1.TaintLifeboat, Value: "bench", Effect: v1.TaintEffectNoSchedule}}
		} else {
			labels[v1alpha1.LabelCapacityType] = []string{"spot", "on-demand"}[i%2]
		}
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc, Conditions: []v1.NodeCondition{
				{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()},
			}},
		}
		created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		// TaintNodesByCondition added node.kubernetes.io/not-ready; no controller lifts it here.
		created.Spec.Taints = taints
		_, err = client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// writeBenchConfig derives the benchmark configuration from the manifest: the
// lifeboat-scheduler profile verbatim, plus a stock default-scheduler profile; no leader
// election; the harness kubeconfig; an unthrottled client.
func writeBenchConfig(o options, kubeconfig, path string) error {
	raw, err := os.ReadFile(o.config)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("parse %s: %w", o.config, err)
	}
	profilesAny, _ := doc["profiles"].([]any)
	var lifeboat any
	for _, p := range profilesAny {
		if m, ok := p.(map[string]any); ok && m["schedulerName"] == v1alpha1.SchedulerName {
			lifeboat = m
		}
	}
	if lifeboat == nil {
		return fmt.Errorf("%s has no %s profile", o.config, v1alpha1.SchedulerName)
	}
	switch {
	case o.percentageOfNodesToScore == 0:
		delete(lifeboat.(map[string]any), "percentageOfNodesToScore")
	case o.percentageOfNodesToScore > 0:
		lifeboat.(map[string]any)["percentageOfNodesToScore"] = o.percentageOfNodesToScore
	}
	doc["profiles"] = []any{map[string]any{"schedulerName": profileDefault}, lifeboat}
	doc["leaderElection"] = map[string]any{"leaderElect": false}
	doc["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": o.qps, "burst": o.qps}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// schedulerProcess is the benchmarked binary.
type schedulerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *schedulerProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func startScheduler(o options, configPath string, port int) (*schedulerProcess, error) {
	logPath := filepath.Join(o.workDir, "lifeboat-scheduler.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.binary, "--config="+configPath, fmt.Sprintf("--secure-port=%d", port),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &schedulerProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done); logFile.Close() }()
	return p, nil
}

func waitHealthy(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		resp, err := insecureClient.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

// measure creates the pods of one run while the scheduler is paused (SIGSTOP), resumes it and
// waits until all are bound: throughput = pods / (last bind − resume). Pausing keeps the
// apiserver's pod-creation rate (shared CPU, other work on the machine) out of the figure, and
// models the lifeboat case: a burst of evicted Pods waiting at once.
func measure(ctx context.Context, client kubernetes.Interface, sched *schedulerProcess, o options, rep int, profile string) (Run, error) {
	ns := fmt.Sprintf("bench-%d-%s", rep+1, profile)
	res := Run{Rep: rep + 1, Profile: profile, Namespace: ns, Pods: o.pods}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	var bound atomic.Int64
	var lastBind atomic.Int64
	allBound := make(chan struct{})
	var once sync.Once
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	seen := sync.Map{}
	onPod := func(obj any) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		if _, dup := seen.LoadOrStore(p.UID, true); dup {
			return
		}
		lastBind.Store(time.Now().UnixNano())
		if bound.Add(1) == int64(o.pods) {
			once.Do(func() { close(allBound) })
		}
	}
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) }}); err != nil {
		return res, err
	}
	stopCh := make(chan struct{})
	defer close(stopCh)
	factory.Start(stopCh)
	factory.WaitForCacheSync(stopCh)

	owners := make([]metav1.OwnerReference, o.owners)
	for i := range owners {
		owners[i] = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("app-%d", i),
			UID: types.UID(fmt.Sprintf("%s-app-%d", ns, i)), Controller: ptr.To(true)}
	}
	protectedEvery := 0
	if o.protectedFrac > 0 {
		protectedEvery = int(1 / o.protectedFrac)
	}
	if err := sched.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return res, fmt.Errorf("pause scheduler: %w", err)
	}
	start := time.Now()
	err := parallel(ctx, o.pods, 64, func(ctx context.Context, i int) error {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: ns,
				Labels:          map[string]string{"app": owners[i%len(owners)].Name},
				OwnerReferences: []metav1.OwnerReference{owners[i%len(owners)]}},
			Spec: v1.PodSpec{
				SchedulerName: profile,
				Containers: []v1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("500Mi")},
				}}},
			},
		}
		if protectedEvery > 0 && i%protectedEvery == 0 {
			p.Labels[v1alpha1.LabelProtected] = "true"
		}
		_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("create pods: %w", err)
	}
	res.CreateSeconds = time.Since(start).Seconds()
	resumed := time.Now()
	if err := sched.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return res, fmt.Errorf("resume scheduler: %w", err)
	}
	select {
	case <-allBound:
	case <-time.After(15 * time.Minute):
		return res, fmt.Errorf("%s: only %d of %d pods bound after 15 minutes", profile, bound.Load(), o.pods)
	}
	res.ElapsedSeconds = time.Unix(0, lastBind.Load()).Sub(resumed).Seconds()
	res.PodsPerSecond = float64(o.pods) / res.ElapsedSeconds

	// Where protected pods went (lifeboat nodes hold 10 % of capacity).
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	for _, p := range pods.Items {
		if p.Labels[v1alpha1.LabelProtected] == "true" && len(p.Spec.NodeName) > 9 && p.Spec.NodeName[:9] == "lifeboat-" {
			res.ProtectedOnLifeboatNodes++
		}
	}
	return res, nil
}

func deletePods(ctx context.Context, client kubernetes.Interface, ns string) error {
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, *metav1.NewDeleteOptions(0), metav1.ListOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		return fmt.Errorf("pods of %s not deleted: %w", ns, err)
	}
	return client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

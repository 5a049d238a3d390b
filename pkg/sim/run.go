package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// Installer installs Lifeboat (its three binaries, the AWS emulator and the WarmPool) into a
// running cluster for lifeboat mode, and returns the notifier the market sends notices to.
type Installer interface {
	Install(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario, runDir string) (Notifier, error)
	// Ready waits until the installation is ready for the market (the warm pool in standby).
	Ready(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario) error
}

// Options configure a simulation run.
type Options struct {
	BinDir string
	// OutDir receives report.json, report.html and one run directory per mode.
	OutDir string
	// Progress receives one line per phase (stderr in the CLI).
	Progress io.Writer
	// Lifeboat installs Lifeboat in lifeboat mode; lifeboat mode fails without it.
	Lifeboat Installer
	// Parallel runs the modes at once, each on its own control plane (halves wall time,
	// doubles CPU load).
	Parallel bool
	// Interval is the sampling interval (default 1 s).
	Interval time.Duration
	// WarmupTimeout bounds the wait for every workload to be ready before t0 (default: the
	// scenario's warmupTimeout).
	WarmupTimeout time.Duration
	// PairTimeout bounds how long a mode of a parallel run waits at t0 for the other modes, so
	// that their markets start together and pair their victims (default: WarmupTimeout + 5 min
	// + the settling wait's bound).
	PairTimeout time.Duration
}

// Run plays the scenario once per mode and builds the report.
func Run(ctx context.Context, s *scenario.Scenario, opts Options) (*report.Report, []*report.Run, error) {
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	if opts.WarmupTimeout == 0 {
		opts.WarmupTimeout = s.WarmupTimeout.Duration
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.OutDir == "" {
		opts.OutDir = filepath.Join(".lifeboat", "sim", s.Name)
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, nil, err
	}
	if opts.PairTimeout == 0 {
		opts.PairTimeout = opts.WarmupTimeout + 5*time.Minute + settleTimeout
	}
	// With several modes, the markets interrupt nodes of the same workloads in each (pair.go).
	pair := newPairing(s.Modes, opts.Parallel, opts.PairTimeout)
	runs := make([]*report.Run, len(s.Modes))
	errs := make([]error, len(s.Modes))
	var wg sync.WaitGroup
	for i, mode := range s.Modes {
		do := func() {
			defer pair.leave(string(mode)) // a mode that fails before t0 holds no other up
			runs[i], errs[i] = runMode(ctx, s, mode, opts, pair)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("mode %s: %w", mode, errs[i])
			}
		}
		if opts.Parallel {
			wg.Add(1)
			go func() { defer wg.Done(); do() }()
		} else {
			do()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	rep := report.New(s.Name, s.Shortened, s.Cluster.SpotDiscount, runs)
	if err := writeReports(opts.OutDir, rep, runs); err != nil {
		return nil, nil, err
	}
	return rep, runs, nil
}

func writeReports(dir string, rep *report.Report, runs []*report.Run) error {
	jf, err := os.Create(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	defer jf.Close()
	if err := rep.WriteJSON(jf); err != nil {
		return err
	}
	hf, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	defer hf.Close()
	return report.WriteHTML(hf, rep, runs)
}

func progress(opts Options, mode scenario.Mode, began time.Time, format string, args ...any) {
	fmt.Fprintf(opts.Progress, "[%s %6s] %s\n", mode, time.Since(began).Round(time.Second), fmt.Sprintf(format, args...))
}

func runMode(ctx context.Context, s *scenario.Scenario, mode scenario.Mode, opts Options, pair *pairing) (*report.Run, error) {
	began := time.Now()
	runDir := filepath.Join(opts.OutDir, string(mode))
	_ = os.RemoveAll(runDir)
	copts := clusterOptions(s)
	copts.BinDir, copts.RunDir, copts.KeepRunDir = opts.BinDir, runDir, true
	progress(opts, mode, began, "starting the local control plane (logs in %s)", runDir)
	c, err := localcluster.Start(ctx, copts)
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	var notifier Notifier = noNotifier{}
	switch mode {
	case scenario.ModeLifeboat:
		if opts.Lifeboat == nil {
			return nil, fmt.Errorf("lifeboat mode needs Lifeboat's binaries; build them with `make build`")
		}
		progress(opts, mode, began, "installing Lifeboat with helm (charts/lifeboat, values in %s; the AWS emulator stands in for AWS)", filepath.Join(runDir, "lifeboat-values.yaml"))
		if notifier, err = opts.Lifeboat.Install(ctx, c, s, runDir); err != nil {
			return nil, fmt.Errorf("install Lifeboat: %w", err)
		}
	case scenario.ModeOverprovisioning:
		progress(opts, mode, began, "creating balloon Pods sized to the warm pool")
		if err := createBalloons(ctx, c, s); err != nil {
			return nil, err
		}
	}
	keys := workloadKeys(s)
	infos := map[string]report.WorkloadInfo{}
	for _, w := range s.Workloads {
		infos[workloadKey(w)] = report.WorkloadInfo{Replicas: w.Replicas, PDBFloor: pdbFloor(w), Protected: w.Protected}
	}
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	cl := ClientsOf(c)
	obs, err := newObserver(obsCtx, cl, keys, nodePrice(s))
	if err != nil {
		return nil, err
	}
	if mode == scenario.ModeLifeboat && s.ReclaimBack != nil {
		go labelZoneIDs(obsCtx, cl, obs)
	}
	warmUntil := time.Now().Add(opts.WarmupTimeout)
	waves := s.RampWaves()
	for i, wave := range waves {
		progress(opts, mode, began, "creating %s", rampStep(wave, i, len(waves)))
		if err := createWorkloads(ctx, c, wave, mode == scenario.ModeLifeboat); err != nil {
			return nil, err
		}
		if i < len(waves)-1 {
			progress(opts, mode, began, "waiting for the scheduler to place them before the next wave (ramp: %s)", s.Ramp)
			if err := waitPlaced(ctx, obs, wave, time.Until(warmUntil)); err != nil {
				return nil, err
			}
		}
	}
	progress(opts, mode, began, "waiting for every workload to be ready (Karpenter boots nodes in ~%s)", s.Timing.KarpenterBoot.Mean)
	if err := waitWarm(ctx, obs, s, time.Until(warmUntil)); err != nil {
		return nil, err
	}
	if mode == scenario.ModeLifeboat {
		progress(opts, mode, began, "waiting for the warm pool to hibernate its standby nodes")
		if err := opts.Lifeboat.Ready(ctx, c, s); err != nil {
			return nil, err
		}
	}
	progress(opts, mode, began, "waiting for Karpenter to remove the ramp's empty nodes (consolidation), so every mode starts from a settled cluster")
	if why, err := waitSettled(ctx, obs, settleTimeout); err != nil {
		return nil, err
	} else if why != "" {
		progress(opts, mode, began, "Karpenter's nodes did not settle in %s (%s); starting anyway — this mode's free room at t0 may differ from the others'", settleTimeout, why)
	}
	if pair != nil && opts.Parallel {
		progress(opts, mode, began, "waiting for the other modes to reach t0 (their markets pair their victims)")
	}
	if err := pair.waitT0(ctx, string(mode)); err != nil {
		return nil, err
	}
	obs.begin()
	for k, share := range layoutOf(obs.podList()) {
		if i, ok := infos[k]; ok {
			i.NodesAtStart, i.SharedNodesAtStart = share.nodes, share.shared
			infos[k] = i
		}
	}
	// From t0 on, the modes' delays are drawn alike (the i-th replacement Pod of a workload,
	// the i-th new Node of a NodePool), whatever their ramps and settling created before.
	c.RestartDrawOrder(obs.start)
	go obs.run(obsCtx, opts.Interval)
	m := &market{c: cl, s: s, obs: obs, notifier: notifier, mode: string(mode), pair: pair,
		killed: map[string]int{}, exposed: map[string]int{}, noticed: map[string]time.Time{}}
	if mode == scenario.ModeLifeboat {
		m.reclaimBack = s.ReclaimBack
	}
	progress(opts, mode, began, "t0: playing %d market events over %s", len(s.Events), s.Duration)
	playErr := make(chan error, 1)
	go func() { playErr <- m.play(ctx) }()
	if err := sleepUntil(ctx, obs.start.Add(s.Duration.Duration)); err != nil {
		return nil, err
	}
	stopObs()
	select {
	case err := <-playErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	case <-time.After(10 * time.Second):
	}
	if err := c.Running(); err != nil {
		return nil, fmt.Errorf("a component died during the run: %w", err)
	}
	samples, activeSecs, billedByType, resumed := obs.snapshot()
	m.mu.Lock()
	for k, n := range m.killed {
		i := infos[k]
		i.Killed = n
		infos[k] = i
	}
	for k, n := range m.exposed {
		i := infos[k]
		i.Noticed = n
		infos[k] = i
	}
	markers := append([]report.Marker(nil), m.markers...)
	m.mu.Unlock()
	run := &report.Run{
		Mode: string(mode), Interval: opts.Interval, Samples: samples, Markers: markers, Workloads: infos,
		KarpenterLaunched: obs.launchedClaims(), LifeboatResumed: resumed, LifeboatActiveNodeSeconds: activeSecs,
	}
	run.Resumes = obs.resumes(m.noticeAt)
	run.KarpenterBoots = obs.nodeBoots()
	c0 := costs(s, billedByType)
	run.LifeboatDollars, run.OverprovisioningDollars = c0.lifeboatRun, c0.overprovisioningRun
	run.RunsPerMonth, run.LifeboatDollarsPerMonth, run.OverprovisioningDollarsPerMonth = s.Cost.RunsPerMonth, c0.lifeboatMonth, c0.overprovisioningMonth
	progress(opts, mode, began, "done: %d samples, %d notices", len(samples), countKind(markers, "notice"))
	return run, nil
}

func countKind(ms []report.Marker, kind string) int {
	n := 0
	for _, m := range ms {
		if m.Kind == kind {
			n++
		}
	}
	return n
}

// costEstimate is what both protections cost, for the run and projected over a month.
type costEstimate struct {
	lifeboatRun, overprovisioningRun     float64
	lifeboatMonth, overprovisioningMonth float64
}

// costs estimates both protections for the same capacity with the product's cost model
// (pkg/cost, as in a WarmPool's status.cost): the warm pool pays EBS while hibernated plus
// On-Demand time while active; overprovisioning keeps the same number of nodes of the pool's
// first type running the whole time at the Spot price (balloons land on the cheapest capacity
// that protected Pods may use), with their volumes. The monthly figures pay the pool's EBS and
// the balloons for a whole month, plus the run's active lifeboat time RunsPerMonth times.
func costs(s *scenario.Scenario, billedByType map[string]float64) costEstimate {
	wp := s.WarmPool
	if wp == nil {
		return costEstimate{}
	}
	size := 0
	fmt.Sscanf(wp.Size, "%d", &size)
	prices := cost.Prices{SpotFraction: s.Cluster.SpotDiscount, EBSGiBMonth: cost.DefaultEBSGiBMonth}
	if len(wp.InstanceTypes) > 0 {
		prices.OnDemandHourly = onDemandPrice(s, wp.InstanceTypes[0])
	}
	est := cost.Of(cost.Pool{Cover: size, RootVolumeGiB: float64(wp.EBSGiBPerNode)}, prices)
	active := 0.0
	for t, secs := range billedByType {
		active += onDemandPrice(s, t) * secs / 3600
	}
	runShare := s.Duration.Hours() / cost.HoursPerMonth
	return costEstimate{
		lifeboatRun:           est.WarmPoolMonthly*runShare + active,
		overprovisioningRun:   est.OverprovisioningMonthly * runShare,
		lifeboatMonth:         est.WarmPoolMonthly + s.Cost.RunsPerMonth*active,
		overprovisioningMonth: est.OverprovisioningMonthly,
	}
}

func createNamespace(ctx context.Context, c *localcluster.Cluster, name string, labels map[string]string) error {
	_, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// rampStep names the workloads of one ramp wave for the progress line: "3 workloads" when the
// ramp is one wave, else "wave 1 of 2 (priority 10000): shop/web, shop/api".
func rampStep(wave []scenario.Workload, i, n int) string {
	if n == 1 {
		return fmt.Sprintf("%d workloads", len(wave))
	}
	keys := make([]string, 0, len(wave))
	for _, w := range wave {
		keys = append(keys, workloadKey(w))
	}
	return fmt.Sprintf("wave %d of %d (priority %d under Lifeboat): %s", i+1, n, wave[0].LifeboatPriority(), strings.Join(keys, ", "))
}

func createWorkloads(ctx context.Context, c *localcluster.Cluster, ws []scenario.Workload, protect bool) error {
	client := c.Client()
	for _, w := range ws {
		if err := createNamespace(ctx, c, w.Namespace, nil); err != nil {
			return err
		}
		obj, pdb := objects(w, protect)
		// The PDB first: the webhook rejects a protected workload without one (enforce mode).
		if pdb != nil {
			if _, err := client.PolicyV1().PodDisruptionBudgets(w.Namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create PDB %s/%s: %w", w.Namespace, w.Name, err)
			}
		}
		var err error
		switch o := obj.(type) {
		case *appsv1.Deployment:
			_, err = client.AppsV1().Deployments(w.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.StatefulSet:
			_, err = client.AppsV1().StatefulSets(w.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *batchv1.Job:
			_, err = client.BatchV1().Jobs(w.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("create %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
		}
	}
	return nil
}

// waitPlaced waits until the scheduler has bound every Pod of the workloads (Replicas of each,
// not terminating): the next ramp wave's Pods then cannot take their places.
func waitPlaced(ctx context.Context, obs *observer, ws []scenario.Workload, timeout time.Duration) error {
	missing, err := waitPods(ctx, obs, ws, timeout, "placed", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if missing != "" {
		return fmt.Errorf("ramp wave not placed within the warm-up (warmupTimeout): %s%s", missing, notReadyPods(obs, 5))
	}
	return err
}

func waitWarm(ctx context.Context, obs *observer, s *scenario.Scenario, timeout time.Duration) error {
	missing, err := waitPods(ctx, obs, s.Workloads, timeout, "ready", podReady)
	if missing != "" {
		return fmt.Errorf("workloads not ready after %s: %s%s", timeout, missing, notReadyPods(obs, 5))
	}
	return err
}

// waitPods polls the observer's Pods until every workload of ws has Replicas Pods that are not
// terminating and pass ok, or until timeout; then it returns what was missing ("shop/web has
// 3/12 ready", with word), "" when nothing was.
func waitPods(ctx context.Context, obs *observer, ws []scenario.Workload, timeout time.Duration, word string, ok func(*corev1.Pod) bool) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		count := map[string]int32{}
		for _, p := range obs.podList() {
			if p.DeletionTimestamp == nil && p.Labels[LabelWorkload] != "" && ok(p) {
				count[podWorkloadKey(p)]++
			}
		}
		missing := ""
		for _, w := range ws {
			if count[workloadKey(w)] < w.Replicas {
				missing = fmt.Sprintf("%s has %d/%d %s", workloadKey(w), count[workloadKey(w)], w.Replicas, word)
				break
			}
		}
		if missing == "" || time.Now().After(deadline) {
			return missing, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// notReadyPods describes up to max scenario Pods that are not ready (phase, node, the reason
// of their unmet condition), so a warm-up timeout says what it waited for.
func notReadyPods(obs *observer, max int) string {
	var b strings.Builder
	n := 0
	for _, obj := range obs.pods.List() {
		p := obj.(*corev1.Pod)
		if p.Labels[LabelWorkload] == "" || (p.DeletionTimestamp == nil && podReady(p)) {
			continue
		}
		if n++; n > max {
			continue
		}
		why := ""
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				why += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		fmt.Fprintf(&b, "\n  %s/%s: phase %s, node %q, scheduler %s, deleting %v,%s", p.Namespace, p.Name, p.Status.Phase,
			p.Spec.NodeName, p.Spec.SchedulerName, p.DeletionTimestamp != nil, why)
	}
	if n > max {
		fmt.Fprintf(&b, "\n  … and %d more", n-max)
	}
	return b.String()
}

// createBalloons keeps spare capacity equal to the warm pool: one low-priority pause Pod per
// pool node, each the size of the pool's first instance type, which protected Pods preempt.
func createBalloons(ctx context.Context, c *localcluster.Cluster, s *scenario.Scenario) error {
	if s.WarmPool == nil {
		return fmt.Errorf("overprovisioning mode sizes its balloons from warmPool; the scenario has none")
	}
	size := 0
	fmt.Sscanf(s.WarmPool.Size, "%d", &size)
	var cpu, mem string
	for _, it := range s.Cluster.InstanceTypes {
		if it.Name == s.WarmPool.InstanceTypes[0] {
			cpu, mem = it.CPU, it.Memory
		}
	}
	cpuQ, memQ := resource.MustParse(cpu), resource.MustParse(mem)
	// Leave room for system reservations so a balloon fits on a node of that size.
	cpuQ.SetMilli(cpuQ.MilliValue() * 8 / 10)
	memQ.Set(memQ.Value() * 8 / 10)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "balloon"}, Value: -10,
		PreemptionPolicy: ptr.To(corev1.PreemptNever), Description: "overprovisioning balloons"}
	if _, err := c.Client().SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		return err
	}
	if err := createNamespace(ctx, c, "balloons", nil); err != nil {
		return err
	}
	labels := map[string]string{"app": "balloon"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "balloon", Namespace: "balloons"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(size)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				PriorityClassName: "balloon", TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpuQ, corev1.ResourceMemory: memQ}}}},
			}},
		},
	}
	_, err := c.Client().AppsV1().Deployments("balloons").Create(ctx, d, metav1.CreateOptions{})
	return err
}

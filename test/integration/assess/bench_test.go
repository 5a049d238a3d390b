package assess

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

var (
	benchSetup sync.Once
	benchPods  int
	benchBin   string
)

// Benchmark size (issue 15's goal: 5,000 Pods / 1,000 nodes / 800 workloads).
const (
	benchNodes        = 1000
	benchNamespaces   = 20
	benchDeployments  = 600 // × 7 Pods
	benchStatefulSets = 100 // × 6 Pods
	benchJobs         = 50  // × 2 Pods
	benchCronJobs     = 50  // × 1 Job × 2 Pods
)

// BenchmarkAssess creates the fleet on the local control plane, then runs the real `lifeboat
// assess` binary against it, once per iteration, and reports wall time and peak RSS of that
// process (not of the test). It checks that table and JSON agree; it asserts no timing.
//
//	flock /tmp/lifeboat-heavy.lock go test ./test/integration/assess -run '^$' -bench Assess -benchtime 3x
func BenchmarkAssess(b *testing.B) {
	ctx := context.Background()
	// The testing package calls a benchmark more than once (b.N = 1, then the asked count):
	// the fleet and the binary are made once.
	benchSetup.Do(func() {
		began := time.Now()
		benchPods = createBenchFleet(ctx, b, shared)
		b.Logf("created %d nodes, %d workloads, %d Pods in %s", benchNodes, benchDeployments+benchStatefulSets+benchJobs+benchCronJobs, benchPods, time.Since(began).Round(time.Second))
		benchBin = filepath.Join(os.TempDir(), fmt.Sprintf("lifeboat-assess-bench-%d", os.Getpid()))
		root, _ := localcluster.RepoRoot()
		build := exec.Command("go", "build", "-o", benchBin, "./cmd/lifeboat")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build ./cmd/lifeboat: %v\n%s", err, out)
		}
	})
	if benchBin == "" {
		b.Fatal("benchmark setup failed")
	}
	pods, bin := benchPods, benchBin
	run := func(format string) (string, time.Duration, int64) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, "assess", "--kubeconfig", shared.KubeconfigPath(), "-o", format)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("lifeboat assess: %v\n%s", err, errOut.String())
		}
		wall := time.Since(start)
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
		return out.String(), wall, rss
	}
	var walls []time.Duration
	var maxRSS int64
	var js string
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, wall, rss := run("json")
		walls = append(walls, wall)
		maxRSS = max(maxRSS, rss)
		js = out
	}
	b.StopTimer()
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	b.ReportMetric(float64(walls[len(walls)/2].Milliseconds()), "ms/assess-median")
	b.ReportMetric(float64(maxRSS)/1024, "MiB-peak-RSS")

	var rep assess.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		b.Fatal(err)
	}
	table, tableWall, tableRSS := run("table")
	b.Logf("json: median %s, peak RSS %.0f MiB; table: %s, %.0f MiB; %d workloads, %d Pods, %d nodes, %d bytes of JSON",
		walls[len(walls)/2].Round(time.Millisecond), float64(maxRSS)/1024, tableWall.Round(time.Millisecond), float64(tableRSS)/1024,
		rep.Summary.Workloads, rep.Summary.Pods, rep.Summary.Nodes, len(js))
	// JSON and table figures agree.
	m := regexp.MustCompile(`(\d+) workloads, (\d+) Pods, (\d+) nodes`).FindStringSubmatch(table)
	cost := regexp.MustCompile(`spend \$([0-9.]+)/month`).FindStringSubmatch(table)
	if m == nil || cost == nil || m[1] != strconv.Itoa(rep.Summary.Workloads) || m[2] != strconv.Itoa(rep.Summary.Pods) ||
		m[3] != strconv.Itoa(rep.Summary.Nodes) || cost[1] != fmt.Sprintf("%.2f", rep.Summary.MonthlyCost) {
		b.Errorf("table summary %v %v disagrees with JSON %+v", m, cost, rep.Summary)
	}
	if rep.Summary.Pods < pods || rep.Summary.Nodes < benchNodes { // other tests of the package may add theirs
		b.Errorf("assessed %d Pods on %d nodes, created %d on %d", rep.Summary.Pods, rep.Summary.Nodes, pods, benchNodes)
	}
}

// createBenchFleet creates nodes, workloads and their Pods (bound to nodes, as a scheduler
// would) with a pool of writers. Returns the number of Pods.
func createBenchFleet(ctx context.Context, b *testing.B, c *localcluster.Cluster) int {
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(cfg)
	jobs := make(chan func() error, 256)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range jobs {
				if err := f(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	co := metav1.CreateOptions{}
	shapes := []struct {
		name, cpu, mem string
	}{{"m5.large", "2", "8Gi"}, {"m5.xlarge", "4", "16Gi"}, {"c5.xlarge", "4", "8Gi"}, {"r5.large", "2", "16Gi"}, {"m6i.xlarge", "4", "16Gi"}}
	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	nodeName := func(i int) string { return fmt.Sprintf("bench-node-%04d", i%benchNodes) }
	for i := 0; i < benchNodes; i++ {
		t := shapes[i%len(shapes)]
		capacity := "spot"
		if i%4 == 0 {
			capacity = "on-demand"
		}
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(t.cpu), corev1.ResourceMemory: resource.MustParse(t.mem), corev1.ResourcePods: resource.MustParse("58")}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{
			"node.kubernetes.io/instance-type": t.name, "topology.kubernetes.io/zone": zones[i%len(zones)], "karpenter.sh/capacity-type": capacity}},
			Status: corev1.NodeStatus{Capacity: l, Allocatable: l}}
		jobs <- func() error { _, err := cs.CoreV1().Nodes().Create(ctx, n, co); return err }
	}
	for i := 0; i < benchNamespaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%02d", i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, co); err != nil {
			b.Fatal(err)
		}
	}
	podSeq := 0
	pods := 0
	tmpl := func(app string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: corev1.PodSpec{RestartPolicy: restart,
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/" + app + ":1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
	}
	addPods := func(ns, prefix string, n int, t corev1.PodTemplateSpec, owner metav1.OwnerReference) {
		for k := 0; k < n; k++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, k), Labels: t.Labels,
				OwnerReferences: []metav1.OwnerReference{owner}}, Spec: *t.Spec.DeepCopy()}
			p.Spec.NodeName = nodeName(podSeq * 7919) // spread over nodes
			podSeq++
			pods++
			jobs <- func() error { _, err := cs.CoreV1().Pods(ns).Create(ctx, p, co); return err }
		}
	}
	yes := true
	ref := func(apiVersion, kind, name string, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + kindUID(kind, uid)), Controller: &yes}
	}
	// Owners are created synchronously in the loop below only where a UID is needed; the
	// assess owner walk matches by name, so the Pods can be queued at once.
	for i := 0; i < benchDeployments; i++ {
		ns, name := fmt.Sprintf("bench-%02d", i%benchNamespaces), fmt.Sprintf("dep-%03d", i)
		t := tmpl(name, corev1.RestartPolicyAlways)
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(7)), Selector: sel, Template: t}}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-rs", OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "Deployment", name, ns+name)}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(7)), Selector: sel, Template: t}}
		jobs <- func() error { _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, co); return err }
		jobs <- func() error { _, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, rs, co); return err }
		if i%2 == 0 {
			mu20 := intstr.FromString("20%")
			p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &mu20, Selector: sel}}
			jobs <- func() error { _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, p, co); return err }
		}
		addPods(ns, name+"-rs", 7, t, ref("apps/v1", "ReplicaSet", name+"-rs", ns+name+"rs"))
	}
	for i := 0; i < benchStatefulSets; i++ {
		ns, name := fmt.Sprintf("bench-%02d", i%benchNamespaces), fmt.Sprintf("sts-%03d", i)
		t := tmpl(name, corev1.RestartPolicyAlways)
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(6)), ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: t}}
		jobs <- func() error { _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, s, co); return err }
		addPods(ns, name, 6, t, ref("apps/v1", "StatefulSet", name, ns+name))
	}
	for i := 0; i < benchJobs+benchCronJobs; i++ {
		ns, name := fmt.Sprintf("bench-%02d", i%benchNamespaces), fmt.Sprintf("job-%03d", i)
		t := tmpl(name, corev1.RestartPolicyNever)
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: batchv1.JobSpec{Parallelism: ptr(int32(2)), Template: t}}
		if i >= benchJobs {
			cron := "cron-" + name
			j.OwnerReferences = []metav1.OwnerReference{ref("batch/v1", "CronJob", cron, ns+cron)}
			cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cron}, Spec: batchv1.CronJobSpec{Schedule: "*/5 * * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: ptr(int32(2)), Template: t}}}}
			jobs <- func() error { _, err := cs.BatchV1().CronJobs(ns).Create(ctx, cj, co); return err }
		}
		jobs <- func() error { _, err := cs.BatchV1().Jobs(ns).Create(ctx, j, co); return err }
		addPods(ns, name, 2, t, ref("batch/v1", "Job", name, ns+name))
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("create the benchmark fleet: %v", firstErr)
	}
	return pods
}

func kindUID(kind, key string) string { return fmt.Sprintf("%s-%x", kind, len(key)) + key }

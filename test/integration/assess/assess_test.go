// Package assess runs `lifeboat assess` against the real local control plane (etcd and
// kube-apiserver with RBAC, Karpenter's CRDs): the fixture fleet of pkg/assess/assesstest is
// created as real objects, and the command runs as the ServiceAccount of manifests/assess
// with a real token — the shipped ClusterRole is what authorizes it.
package assess

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
	"github.com/lifeboat-k8s/lifeboat/pkg/assess/assesstest"
	"github.com/lifeboat-k8s/lifeboat/pkg/cli"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

var update = flag.Bool("update", false, "rewrite testdata/fleet.golden.json from this run")

// shared is the package's control plane: etcd and kube-apiserver (RBAC) with Karpenter's CRDs.
var shared *localcluster.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here needs the control plane; -short is "no control plane" (make test-unit).
		fmt.Println("-short: not starting the local control plane; assess's integration tests do not run")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start local control plane: %v\n", err)
		return 1
	}
	shared = c
	code := func() int {
		dirs, err := localcluster.KarpenterCRDDirs(c.BinDir())
		if err == nil {
			err = localcluster.ApplyCRDDirs(ctx, c, dirs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "Karpenter CRDs: %v\n", err)
			return 1
		}
		code := m.Run()
		if benchBin != "" {
			_ = os.Remove(benchBin)
		}
		return code
	}()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "component logs (tails) from %s:\n%s\n", c.RunDir(), c.LogTails(4000))
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop local control plane: %v\n", err)
		return 1
	}
	return code
}

func repoFile(t testing.TB, rel string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// createFleet creates the fixture as real objects, owners first, resolving each dependent's
// controller reference to the UID the API server gave its owner.
func createFleet(ctx context.Context, t testing.TB, c *localcluster.Cluster, f *assesstest.Fleet) {
	t.Helper()
	cs := c.Client()
	uids := map[string]types.UID{} // "Kind/ns/name"
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	own := func(m *metav1.ObjectMeta) {
		if v, ok := m.Annotations[assesstest.OwnerAnnotation]; ok {
			_, kind, name, _ := assesstest.ParseOwner(v)
			uid := uids[kind+"/"+m.Namespace+"/"+name]
			if uid == "" {
				uid = types.UID("00000000-0000-0000-0000-" + fmt.Sprintf("%012d", len(name))) // an owner that does not exist (custom controller)
			}
			assesstest.SetOwner(m, uid)
		}
	}
	create := metav1.CreateOptions{}
	for _, o := range f.Namespaces {
		_, err := cs.CoreV1().Namespaces().Create(ctx, o, create)
		must("namespace "+o.Name, err)
	}
	for _, o := range f.Nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, o, create)
		must("node "+o.Name, err)
	}
	for _, o := range f.StorageClasses {
		_, err := cs.StorageV1().StorageClasses().Create(ctx, o, create)
		must("storageclass "+o.Name, err)
	}
	for _, o := range f.PVs {
		_, err := cs.CoreV1().PersistentVolumes().Create(ctx, o, create)
		must("pv "+o.Name, err)
	}
	for _, o := range f.PVCs {
		_, err := cs.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, o, create)
		must("pvc "+o.Name, err)
	}
	for _, o := range f.PDBs {
		_, err := cs.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, create)
		must("pdb "+o.Name, err)
	}
	for _, o := range f.Deployments {
		got, err := cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, create)
		must("deployment "+o.Name, err)
		uids["Deployment/"+o.Namespace+"/"+o.Name] = got.UID
	}
	for _, o := range f.StatefulSets {
		got, err := cs.AppsV1().StatefulSets(o.Namespace).Create(ctx, o, create)
		must("statefulset "+o.Name, err)
		uids["StatefulSet/"+o.Namespace+"/"+o.Name] = got.UID
	}
	for _, o := range f.CronJobs {
		got, err := cs.BatchV1().CronJobs(o.Namespace).Create(ctx, o, create)
		must("cronjob "+o.Name, err)
		uids["CronJob/"+o.Namespace+"/"+o.Name] = got.UID
	}
	for _, o := range f.Jobs {
		o = o.DeepCopy()
		own(&o.ObjectMeta)
		got, err := cs.BatchV1().Jobs(o.Namespace).Create(ctx, o, create)
		must("job "+o.Name, err)
		uids["Job/"+o.Namespace+"/"+o.Name] = got.UID
	}
	for _, o := range f.ReplicaSets {
		o = o.DeepCopy()
		own(&o.ObjectMeta)
		got, err := cs.AppsV1().ReplicaSets(o.Namespace).Create(ctx, o, create)
		must("replicaset "+o.Name, err)
		uids["ReplicaSet/"+o.Namespace+"/"+o.Name] = got.UID
	}
	for _, o := range f.Pods {
		o = o.DeepCopy()
		own(&o.ObjectMeta)
		_, err := cs.CoreV1().Pods(o.Namespace).Create(ctx, o, create)
		must("pod "+o.Name, err)
	}
	b, err := json.Marshal(f.NodePool.Object)
	if err != nil {
		t.Fatal(err)
	}
	must("nodepool", c.ApplyYAML(ctx, string(b)))
}

// serviceAccountKubeconfig applies manifests/assess and writes a kubeconfig that
// authenticates as its ServiceAccount with a real token (TokenRequest API).
func serviceAccountKubeconfig(ctx context.Context, t testing.TB, c *localcluster.Cluster) string {
	t.Helper()
	if err := c.ApplyYAML(ctx, repoFile(t, "manifests/namespace.yaml"), repoFile(t, "manifests/assess/rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Client().CoreV1().ServiceAccounts("lifeboat-system").CreateToken(ctx, "lifeboat-assess",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the lifeboat-assess ServiceAccount: %v", err)
	}
	return writeKubeconfig(t, c, &clientcmdapi.AuthInfo{Token: tok.Status.Token})
}

func writeKubeconfig(t testing.TB, c *localcluster.Cluster, auth *clientcmdapi.AuthInfo) string {
	t.Helper()
	ca, err := os.ReadFile(c.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.RESTConfig().Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["user"] = auth
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptr[T any](v T) *T { return &v }

// runCLI runs the real `lifeboat` command tree in-process.
func runCLI(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := cli.NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

var generatedAt = regexp.MustCompile(`"generatedAt": "[^"]*"`)

// TestFleet is the acceptance test: the fixture fleet gives exactly the classes and
// reasons of the golden JSON (and docs/ASSESS.md), under the shipped ClusterRole only; the
// scenario it writes passes the validator.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	createFleet(ctx, t, shared, assesstest.NewFleet())
	kc := serviceAccountKubeconfig(ctx, t, shared)
	scen := filepath.Join(t.TempDir(), "fleet.yaml")

	out, stderr, err := runCLI(t, "assess", "--kubeconfig", kc, "-o", "json", "--scenario-out", scen)
	if err != nil {
		t.Fatalf("lifeboat assess as the lifeboat-assess ServiceAccount: %v\n%s", err, stderr)
	}
	var rep assess.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("decode -o json: %v\n%s", err, out)
	}
	for _, f := range rep.Findings {
		if f.Code == "list-failed" {
			t.Errorf("the shipped ClusterRole is not sufficient: %s", f.Message)
		}
	}
	got := generatedAt.ReplaceAllString(out, `"generatedAt": "(normalized)"`)
	golden := filepath.Join("testdata", "fleet.golden.json")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("assess -o json differs from %s (run with -update after checking the change):\n%s", golden, lineDiff(string(want), got))
	}

	// The classes, reason for reason, as docs/ASSESS.md's fixture table states them.
	wantClasses := map[string]string{
		"shop/deployment/web": "ready", "shop/deployment/tmp-declared": "ready",
		"batch/job/ci-runner": "ready", "batch/job/resumable-train": "ready", "batch/cronjob/nightly-report": "ready",
		"shop/deployment/api-nopdb": "ready-with-changes:missing-pdb", "shop/deployment/frontend-zero": "ready-with-changes:pdb-allows-no-disruption",
		"shop/deployment/single": "ready-with-changes:single-replica", "shop/deployment/slow-stop": "ready-with-changes:shutdown-over-notice",
		"shop/deployment/cache-scratch": "ready-with-changes:emptydir", "shop/deployment/node-logs": "ready-with-changes:hostpath",
		"shop/deployment/pinned": "ready-with-changes:pinned-on-demand", "shop/deployment/no-consolidate": "ready-with-changes:do-not-disrupt",
		"shop/deployment/norequests": "ready-with-changes:missing-requests", "batch/pod/debug-shell": "ready-with-changes:no-controller",
		"batch/replicaset/legacy-rs": "ready-with-changes:orphan-replicaset", "shop/deployment/double-pdb": "ready-with-changes:multiple-pdbs",
		"batch/job/train-model": "checkpoint-needed:long-running-job", "shop/statefulset/queue-worker": "checkpoint-needed:stateful-volumes",
		"shop/statefulset/orders-db": "poor-fit:quorum-like", "shop/deployment/reports-db": "poor-fit:database", "shop/deployment/local-data": "poor-fit:local-volume",
	}
	gotClasses := map[string]string{}
	for _, w := range rep.Workloads {
		v := string(w.Class)
		var codes []string
		for _, r := range w.Reasons {
			codes = append(codes, string(r.Code))
		}
		if len(codes) > 0 {
			v += ":" + strings.Join(codes, ",")
		}
		gotClasses[w.Ref()] = v
	}
	for ref, want := range wantClasses {
		if gotClasses[ref] != want {
			t.Errorf("%s: got %q, want %q", ref, gotClasses[ref], want)
		}
	}
	if len(gotClasses) != len(wantClasses) {
		t.Errorf("%d workloads, want %d: %v", len(gotClasses), len(wantClasses), gotClasses)
	}

	s, err := scenario.Load(scen)
	if err != nil {
		t.Fatalf("the --scenario-out file does not pass the scenario validator: %v", err)
	}
	if len(s.Workloads) == 0 || s.WarmPool == nil || len(s.Events) != 1 {
		t.Errorf("scenario: %d workloads, warm pool %v, %d events", len(s.Workloads), s.WarmPool, len(s.Events))
	}
	t.Run("the scenario runs in the simulation with both modes", func(t *testing.T) { runFleetScenario(t, s) })

	// The table tells the same story as the JSON.
	table, _, err := runCLI(t, "assess", "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range rep.Workloads {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(w.Ref()) + ` +` + regexp.QuoteMeta(string(w.Class)) + ` .* ` + fmt.Sprintf("%.2f", w.MonthlyCost) + ` `).MatchString(table) {
			t.Errorf("table row of %s (class %s, $%.2f) missing:\n%s", w.Ref(), w.Class, w.MonthlyCost, table)
		}
	}
	if !strings.Contains(table, rep.Curve.Headline) {
		t.Errorf("table lacks the curve headline %q", rep.Curve.Headline)
	}

	// One namespace: -n scopes every namespaced List.
	nsOut, _, err := runCLI(t, "assess", "--kubeconfig", kc, "-n", "batch", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var nsRep assess.Report
	if err := json.Unmarshal([]byte(nsOut), &nsRep); err != nil {
		t.Fatal(err)
	}
	for _, w := range nsRep.Workloads {
		if w.Namespace != "batch" {
			t.Errorf("-n batch assessed %s", w.Ref())
		}
	}
	if nsRep.Scope != "namespace batch" || nsRep.Summary.Workloads != 6 {
		t.Errorf("-n batch: scope %q, %d workloads, want 6", nsRep.Scope, nsRep.Summary.Workloads)
	}
}

// TestClusterRoleIsMinimal: the ClusterRole grants list and nothing else, on exactly the kinds
// assess lists; an identity without it is refused with a pointer to manifests/assess.
func TestClusterRoleIsMinimal(t *testing.T) {
	var role rbacv1.ClusterRole
	doc := strings.Split(repoFile(t, "manifests/assess/rbac.yaml"), "\n---\n")[0]
	if err := yaml.Unmarshal([]byte(doc), &role); err != nil || role.Kind != "ClusterRole" {
		t.Fatalf("first document of manifests/assess/rbac.yaml: %v %q", err, role.Kind)
	}
	var granted []string
	for _, r := range role.Rules {
		if len(r.Verbs) != 1 || r.Verbs[0] != "list" || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: want verbs [list] only", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				granted = append(granted, strings.TrimSuffix(res+"."+g, "."))
			}
		}
	}
	sort.Strings(granted)
	want := []string{"cronjobs.batch", "deployments.apps", "jobs.batch", "namespaces", "nodepools.karpenter.sh", "nodes",
		"persistentvolumeclaims", "persistentvolumes", "poddisruptionbudgets.policy", "pods", "replicasets.apps",
		"rollouts.argoproj.io", "statefulsets.apps", "storageclasses.storage.k8s.io"}
	if strings.Join(granted, " ") != strings.Join(want, " ") {
		t.Errorf("ClusterRole grants list on\n  %v\nwant exactly the kinds assess lists\n  %v", granted, want)
	}

	// Without the role: a clear refusal, not a half-empty report.
	ctx := context.Background()
	cs := shared.Client().(*kubernetes.Clientset)
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1ServiceAccount, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, corev1ServiceAccount.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := writeKubeconfig(t, shared, &clientcmdapi.AuthInfo{Token: tok.Status.Token})
	_, _, err = runCLI(t, "assess", "--kubeconfig", kc)
	if err == nil || !strings.Contains(err.Error(), "manifests/assess") {
		t.Errorf("assess without permissions: err = %v, want a refusal naming manifests/assess", err)
	}
}

// lineDiff shows the first differing lines of two texts.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}

// runFleetScenario plays the scenario assess wrote, compressed as the end-to-end scenarios are
// (pkg/sim/testdata/monday-reclaim-compressed.yaml: a 45 s notice, a 40 s Karpenter boot),
// with Karpenter alone and with Lifeboat installed through the chart, and checks that both
// modes complete and report every workload of the fleet, and that Lifeboat kills no more Pods
// at the reclaim than Karpenter alone — of each workload the market hit no harder with Lifeboat
// (pods_noticed; the modes pair their victims, but placement differs between them); a workload
// hit harder with Lifeboat is logged. The other figures are logged (report.Worse): one run of
// a fleet this small moves them by seconds either way.
func runFleetScenario(t *testing.T, s *scenario.Scenario) {
	compress(s)
	if errs := s.Validate(); len(errs) > 0 {
		t.Fatalf("the compressed scenario does not validate: %v", errs)
	}
	binDir := localcluster.DefaultBinDir()
	installer, err := sim.NewLifeboatInstaller(binDir)
	if err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out := t.TempDir()
	rep, _, err := sim.Run(ctx, s, sim.Options{BinDir: binDir, OutDir: out, Lifeboat: installer, Parallel: true, Progress: logWriter{t}})
	if err != nil {
		t.Fatalf("sim run of the fleet's scenario: %v (component logs under %s)", err, out)
	}
	t.Logf("\n%s", rep.String())
	base, lb := rep.Modes[string(scenario.ModeBaseline)], rep.Modes[string(scenario.ModeLifeboat)]
	if base == nil || lb == nil {
		t.Fatalf("modes reported: %v, want baseline and lifeboat", rep.ModeNames())
	}
	for _, w := range s.Workloads {
		key := w.Namespace + "/" + w.Name
		b, l := base.Workloads[key], lb.Workloads[key]
		if b == nil || l == nil {
			t.Errorf("workload %s missing from the report (baseline %v, lifeboat %v)", key, b != nil, l != nil)
			continue
		}
		// The markets pair their victims (pkg/sim/pair.go), but placement may not allow the same
		// interruption: a workload the market hit harder with Lifeboat is not compared.
		if l.PodsNoticed > b.PodsNoticed {
			t.Logf("%s: exposure differs, not compared: %d Pods noticed with Lifeboat, %d with Karpenter alone (killed at reclaim %d vs %d)",
				key, l.PodsNoticed, b.PodsNoticed, l.PodsKilledAtReclaim, b.PodsKilledAtReclaim)
			continue
		}
		if l.PodsKilledAtReclaim > b.PodsKilledAtReclaim {
			t.Errorf("%s: %d Pods killed at the reclaim with Lifeboat, %d with Karpenter alone (Pods noticed %d vs %d)",
				key, l.PodsKilledAtReclaim, b.PodsKilledAtReclaim, l.PodsNoticed, b.PodsNoticed)
		}
	}
	for _, r := range rep.Worse() {
		t.Logf("regression check: %s %s %.1f with Lifeboat, %.1f with Karpenter alone (exposure differs: %v)", r.Workload, r.Metric, r.Lifeboat, r.Baseline, r.ExposureDiffers)
	}
}

// compress shortens a scenario's clock as monday-reclaim-compressed does.
func compress(s *scenario.Scenario) {
	d := func(v time.Duration) scenario.Duration { return scenario.Duration{Duration: v} }
	s.Duration = d(4 * time.Minute)
	s.Modes = []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat}
	s.Timing = scenario.Timing{
		Notice:          d(45 * time.Second),
		KarpenterBoot:   scenario.Dist{Mean: d(40 * time.Second), Jitter: d(4 * time.Second)},
		LifeboatResume:  scenario.Dist{Mean: d(8 * time.Second), Jitter: d(time.Second)},
		ImagePullCold:   scenario.Dist{Mean: d(8 * time.Second), Jitter: d(2 * time.Second)},
		ImagePullCached: scenario.Dist{Mean: d(time.Second)},
		AppStart:        scenario.Dist{Mean: d(2 * time.Second)},
	}
	s.WarmPool.ActiveDuration = d(60 * time.Second)
	for i := range s.Events {
		s.Events[i].At, s.Events[i].Spread = d(20*time.Second), d(20*time.Second)
	}
	s.Shortened = append(s.Shortened, "compressed for make test: notice 45s (AWS: 120s), karpenterBoot 40s, activeDuration 60s")
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

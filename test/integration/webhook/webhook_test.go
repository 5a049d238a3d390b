package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/webhooks/audit"
)

var (
	protectedNS = map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected}
	warnNS      = map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected, v1alpha1.LabelPDBMode: v1alpha1.PDBModeWarn}
)

func deployment(ns, name string, replicas int32, labels map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// suspendedJob is a Job that creates no Pods: tests create its Pods themselves.
func suspendedJob(t testing.TB, ns, name string) *batchv1.Job {
	t.Helper()
	j, err := shared.Client().BatchV1().Jobs(ns).Create(context.Background(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(true),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// jobPod is a Pod as the Job controller would create it.
func jobPod(j *batchv1.Job, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: j.Namespace, Labels: map[string]string{"job": j.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// waitForWebhooks waits until the apiserver calls both registered webhooks (its configuration
// informer is asynchronous), probing in ns with dry-run requests.
func waitForWebhooks(t testing.TB, ns string) {
	t.Helper()
	j, err := shared.Client().BatchV1().Jobs(ns).Get(context.Background(), "webhook-probe", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		j = suspendedJob(t, ns, "webhook-probe")
	} else if err != nil {
		t.Fatal(err)
	}
	cs, warnings := clientWithWarnings(t)
	ctx := context.Background()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		// A protected Deployment without PDB: denied (enforce) or warned about (warn).
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "probe", 1, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		validated := err != nil && strings.Contains(err.Error(), "Lifeboat")
		for _, w := range warnings.take() {
			validated = validated || strings.Contains(w, "Lifeboat")
		}
		if !validated {
			return false, nil
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, jobPod(j, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Labels[v1alpha1.LabelProtected] == "true", nil
	})
	if err != nil {
		t.Fatalf("the apiserver does not call the webhooks: %v", err)
	}
}

// setup starts the webhook with a test CA and registers the shipped configurations for it.
func setup(t *testing.T, extra ...string) (*webhookProcess, *testCA) {
	t.Helper()
	applyPriorityClasses(t)
	ca := newTestCA(t)
	w := startWebhook(t, ca, 0, extra...)
	registerWebhooks(t, "-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), "127.0.0.1", w.port, ca.caPEM)
	return w, ca
}

func TestEnforceDeniesWithoutPDBAndProtectsWithIt(t *testing.T) {
	w, _ := setup(t)
	ctx := context.Background()
	ns := newNamespace(t, "enforce", protectedNS)
	waitForWebhooks(t, ns)
	cs := shared.Client()

	// 1. Denied, with a ready-to-apply PDB in the message.
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", 3, nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && err == nil {
		t.Fatalf("Deployment without PDB admitted")
	}
	if err == nil || !strings.Contains(err.Error(), "PodDisruptionBudget") {
		t.Fatalf("want a denial naming the PodDisruptionBudget, got %v", err)
	}
	_, doc, ok := strings.Cut(err.Error(), "---\n")
	if !ok {
		t.Fatalf("denial carries no YAML: %v", err)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict([]byte(doc), &pdb); err != nil {
		t.Fatalf("the PDB in the denial does not parse: %v\n%s", err, doc)
	}
	if pdb.Name != "web-lifeboat" || pdb.Namespace != ns || pdb.Spec.MaxUnavailable.String() != "20%" {
		t.Errorf("suggested PDB %s/%s maxUnavailable %v", pdb.Namespace, pdb.Name, pdb.Spec.MaxUnavailable)
	}

	// 2. Apply exactly that YAML; the retry is admitted and its Pods are protected.
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply the suggested PDB: %v", err)
	}
	// The webhook's PDB informer sees the new PDB within milliseconds; retry until it has.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", 3, nil), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("retry after applying the PDB not admitted: %v", err)
	}
	for _, p := range waitForPods(t, ns, "app=web", 3) {
		checkProtected(t, &p, v1alpha1.TierStateless, v1alpha1.PriorityClassStateless)
		checkAllowlisted(t, &p)
		if len(p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("Pod %s: preferred terms %v", p.Name, p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		}
	}

	// 3. Critical tier with the user's own node affinity: merged, not clobbered.
	crit := deployment(ns, "pay", 2, map[string]string{v1alpha1.LabelTier: string(v1alpha1.TierCritical)})
	crit.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}}},
	}}}
	mustCreatePDB(t, ns, "pay")
	createEventually(t, func() error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, crit, metav1.CreateOptions{})
		return err
	})
	for _, p := range waitForPods(t, ns, "app=pay", 2) {
		checkProtected(t, &p, v1alpha1.TierCritical, v1alpha1.PriorityClassCritical)
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[0].Key != "kubernetes.io/arch" ||
			terms[0].MatchExpressions[1].Values[0] != "on-demand" {
			t.Errorf("Pod %s: required terms %+v, want the user's arch AND on-demand", p.Name, terms)
		}
	}

	// 4. Opt-out: admitted without a PDB, Pods untouched.
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "batchy", 2, map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotOff}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("opted-out Deployment denied: %v", err)
	}
	for _, p := range waitForPods(t, ns, "app=batchy", 2) {
		checkUntouched(t, &p)
	}

	// 5. kube-system is never touched, whatever its labels say.
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "kube-system", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"lifeboat.dev/spot":"protected"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cs.CoreV1().Namespaces().Patch(context.Background(), "kube-system", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"lifeboat.dev/spot":null}}}`), metav1.PatchOptions{})
	})
	sys := deployment("kube-system", "lifeboat-test-sys", 1, map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected})
	if _, err := cs.AppsV1().Deployments("kube-system").Create(ctx, sys, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kube-system Deployment denied: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments("kube-system").Delete(context.Background(), sys.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	for _, p := range waitForPods(t, "kube-system", "app=lifeboat-test-sys", 1) {
		checkUntouched(t, &p)
	}

	// 6. The webhook counted what it did.
	m := w.Metrics()
	for _, want := range []string{
		`lifeboat_webhook_requests_total{decision="mutated",webhook="pods"}`,
		`lifeboat_webhook_requests_total{decision="denied",webhook="workloads"}`,
		`lifeboat_webhook_request_duration_seconds_bucket{webhook="pods",le="0.0005"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func mustCreatePDB(t testing.TB, ns, app string) {
	t.Helper()
	_, err := shared.Client().PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromString("20%")),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createEventually retries a create that depends on the webhook's informers having seen an
// object created just before (a PDB).
func createEventually(t testing.TB, create func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = create()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("create not admitted: %v", last)
	}
}

func TestWarnModeAndGitOpsOrdering(t *testing.T) {
	setup(t)
	ctx := context.Background()
	ns := newNamespace(t, "warn", warnNS)
	waitForWebhooks(t, ns)
	cs, warnings := clientWithWarnings(t)

	// GitOps applies the Deployment before its PDB: admitted, with the PDB in a warning.
	warnings.take()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("warn mode denied: %v", err)
	}
	var suggested string
	for _, w := range warnings.take() {
		if _, doc, ok := strings.Cut(w, "roll the workload out: "); ok {
			suggested = doc
		}
	}
	if suggested == "" {
		t.Fatal("no warning with a PodDisruptionBudget")
	}
	// ...and left unprotected until a PDB exists.
	for _, p := range waitForPods(t, ns, "app=web", 2) {
		checkUntouched(t, &p)
	}

	// The PDB from the warning (one-line JSON, valid YAML) arrives next.
	var pdb policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict([]byte(suggested), &pdb); err != nil {
		t.Fatalf("the PDB in the warning does not parse: %v\n%s", err, suggested)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// New Pods are protected: a rollout (what docs/POLICY.md tells users to run) replaces the old.
	// Wait until the webhook's PDB informer has the PDB: a dry-run twin of the Deployment stops
	// drawing the missing-PDB warning.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		twin := deployment(ns, "web-twin", 1, nil)
		twin.Spec.Selector.MatchLabels = map[string]string{"app": "web"}
		twin.Spec.Template.Labels = map[string]string{"app": "web"}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, twin, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, err
		}
		for _, w := range warnings.take() {
			if strings.Contains(w, "no PodDisruptionBudget selects") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the webhook never saw the PDB: %v", err)
	}
	restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	protectedSel := "app=web," + v1alpha1.LabelProtected + "=true"
	for _, p := range waitForPods(t, ns, protectedSel, 1) {
		checkProtected(t, &p, v1alpha1.TierStateless, v1alpha1.PriorityClassStateless)
	}
	// With the PDB present the update produced no missing-PDB warning.
	for _, w := range warnings.take() {
		if strings.Contains(w, "no PodDisruptionBudget selects") {
			t.Errorf("warning after the PDB exists: %s", w)
		}
	}
}

func TestPriorityClasses(t *testing.T) {
	setup(t)
	ctx := context.Background()
	cs := shared.Client()
	ns := newNamespace(t, "prio", protectedNS)
	waitForWebhooks(t, ns)
	j := suspendedJob(t, ns, "nightly")

	// The user's own class is kept, with the priority the Priority plugin resolved.
	own, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "team-high-" + ns}, Value: 500}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.SchedulingV1().PriorityClasses().Delete(context.Background(), own.Name, metav1.DeleteOptions{})
	})
	p := jobPod(j, "own-class")
	p.Spec.PriorityClassName = own.Name
	// The apiserver's Priority admission plugin reads classes from its own informer: a class
	// created a moment ago can be missing there (seen 2026-12-02: "no PriorityClass with name …
	// was found"). Retry that refusal only, for a few seconds.
	var got *corev1.Pod
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err = cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "no PriorityClass with name") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.PriorityClassName != own.Name || *got.Spec.Priority != 500 {
		t.Errorf("user's class not kept: %s/%v", got.Spec.PriorityClassName, got.Spec.Priority)
	}
	if got.Labels[v1alpha1.LabelProtected] != "true" {
		t.Errorf("Pod with its own class not protected: %v", got.Labels)
	}
	checkPriorityConsistent(t, got)

	// Without a class: the tier's (a Job is best-effort), priority and preemptionPolicy to match.
	got, err = cs.CoreV1().Pods(ns).Create(ctx, jobPod(j, "no-class"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkProtected(t, got, v1alpha1.TierBestEffort, v1alpha1.PriorityClassBestEffort)
	if *got.Spec.Priority != v1alpha1.PriorityBestEffort || *got.Spec.PreemptionPolicy != corev1.PreemptNever {
		t.Errorf("priority %d / %s, want %d / Never", *got.Spec.Priority, *got.Spec.PreemptionPolicy, v1alpha1.PriorityBestEffort)
	}

	// A cluster-wide default class (set by the Priority plugin, not the user) gives way to the
	// tier's when the tier's is not lower (checkpointed, 1000 > 7); a best-effort Pod (0 < 7)
	// keeps it, as lowering it would let ordinary Pods preempt it.
	def, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-default-" + ns}, Value: 7, GlobalDefault: true}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.SchedulingV1().PriorityClasses().Delete(context.Background(), def.Name, metav1.DeleteOptions{})
	})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_ = cs.CoreV1().Pods(ns).Delete(ctx, "default-class", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		dp := jobPod(j, "default-class")
		dp.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCheckpointed)
		got, err = cs.CoreV1().Pods(ns).Create(ctx, dp, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return err == nil && got.Spec.PriorityClassName == v1alpha1.PriorityClassCheckpointed, err
	})
	if err != nil {
		t.Fatalf("global default class not replaced by the tier's: %v (class %q)", err, got.Spec.PriorityClassName)
	}
	checkPriorityConsistent(t, got)
	got, err = cs.CoreV1().Pods(ns).Create(ctx, jobPod(j, "default-class-best-effort"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.PriorityClassName != def.Name || got.Labels[v1alpha1.LabelProtected] != "true" {
		t.Errorf("best-effort Pod under a global default of 7: class %q, labels %v; want %s kept and the Pod protected", got.Spec.PriorityClassName, got.Labels, def.Name)
	}
	checkPriorityConsistent(t, got)

	// The lifeboat-critical tier label on the Pod template: allowlisted class, consistent priority.
	cp := jobPod(j, "critical")
	cp.Labels[v1alpha1.LabelTier] = string(v1alpha1.TierCritical)
	got, err = cs.CoreV1().Pods(ns).Create(ctx, cp, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkProtected(t, got, v1alpha1.TierCritical, v1alpha1.PriorityClassCritical)

	// No path yields a class outside the allowlist.
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		// The global default class is the Priority plugin's, kept where the tier's is lower.
		checkAllowlisted(t, &list.Items[i], own.Name, def.Name)
	}
}

// TestIdempotentReinvocation registers the Pod webhook twice, so the apiserver hands the second
// call the Pod the first call mutated: the result must be a single application.
func TestIdempotentReinvocation(t *testing.T) {
	w, ca := setup(t)
	// A second copy of the configurations pointing at the same process.
	registerWebhooks(t, "-again", "127.0.0.1", w.port, ca.caPEM)
	ctx := context.Background()
	ns := newNamespace(t, "twice", protectedNS)
	waitForWebhooks(t, ns)
	j := suspendedJob(t, ns, "job")
	got, err := shared.Client().CoreV1().Pods(ns).Create(ctx, jobPod(j, "p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkProtected(t, got, v1alpha1.TierBestEffort, v1alpha1.PriorityClassBestEffort)
	terms := got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 || len(terms[0].MatchExpressions) != 1 || len(terms[1].MatchExpressions) != 1 {
		t.Errorf("affinity applied more than once: %+v", terms)
	}
	if n := strings.Count(w.Metrics(), `lifeboat_webhook_requests_total{decision="mutated",webhook="pods"}`); n != 1 {
		t.Errorf("metric line count %d", n)
	}
}

// TestSchedulerRoutingFollowsLifeboats: a protected Pod goes to the lifeboat scheduler only when
// it is created while a warm pool's Node is active, and with --scheduler-routing=Always always.
func TestSchedulerRoutingFollowsLifeboats(t *testing.T) {
	setup(t)
	ctx := context.Background()
	ns := newNamespace(t, "routing", protectedNS)
	waitForWebhooks(t, ns)
	j := suspendedJob(t, ns, "job")
	create := func(name string) *corev1.Pod {
		t.Helper()
		got, err := shared.Client().CoreV1().Pods(ns).Create(ctx, jobPod(j, name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels[v1alpha1.LabelProtected] != "true" {
			t.Fatalf("Pod %s not protected: %v", name, got.Labels)
		}
		return got
	}
	if p := create("before"); p.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("no lifeboat active: schedulerName %q, want %s", p.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}

	// A pool Node turns active (the interruption controller's claim): new Pods go to the
	// lifeboat scheduler as soon as the webhook's cache has seen it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "routing-lifeboat", Labels: map[string]string{
		v1alpha1.LabelPool: "default", v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}}}
	if _, err := shared.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.Client().CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	if p := create("standby"); p.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("a standby pool Node: schedulerName %q, want %s", p.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}
	setState := func(st v1alpha1.NodeState) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelState, st)
		if _, err := shared.Client().CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	routedTo := func(want string) {
		t.Helper()
		var last string
		for i := 0; i < 50; i++ {
			p := create(fmt.Sprintf("p%d-%d", len(want), i))
			if last = p.Spec.SchedulerName; last == want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("schedulerName %q after 5s, want %s", last, want)
	}
	setState(v1alpha1.NodeStateActive)
	routedTo(v1alpha1.SchedulerName)
	// Handoff: the lifeboat drains; Pods created now must not be seated on it.
	setState(v1alpha1.NodeStateDraining)
	routedTo(corev1.DefaultSchedulerName)

}

// TestSchedulerRoutingAlways: with --scheduler-routing=Always every protected Pod goes to the
// lifeboat scheduler, with no lifeboat active.
func TestSchedulerRoutingAlways(t *testing.T) {
	setup(t, "--scheduler-routing=Always")
	ctx := context.Background()
	ns := newNamespace(t, "routing-always", protectedNS)
	waitForWebhooks(t, ns)
	j := suspendedJob(t, ns, "job")
	got, err := shared.Client().CoreV1().Pods(ns).Create(ctx, jobPod(j, "always"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[v1alpha1.LabelProtected] != "true" || got.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("--scheduler-routing=Always: labels %v, schedulerName %q, want protected with %s", got.Labels, got.Spec.SchedulerName, v1alpha1.SchedulerName)
	}
}

func TestWebhookDownFailsOpenAndAuditReports(t *testing.T) {
	w, _ := setup(t, "--audit-interval=1s")
	ctx := context.Background()
	cs := shared.Client()
	ns := newNamespace(t, "down", protectedNS)
	waitForWebhooks(t, ns)

	mustCreatePDB(t, ns, "web")
	createEventually(t, func() error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", 2, nil), metav1.CreateOptions{})
		return err
	})
	for _, p := range waitForPods(t, ns, "app=web", 2) {
		checkProtected(t, &p, v1alpha1.TierStateless, v1alpha1.PriorityClassStateless)
	}

	// The webhook goes down (SIGTERM: it must also shut down cleanly).
	w.Stop()

	// Pods keep being admitted: scaling up creates unmutated Pods in the protected namespace...
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale with the webhook down: %v", err)
	}
	pods := waitForPods(t, ns, "app=web", 4)
	unmutated := 0
	for _, p := range pods {
		if p.Labels[v1alpha1.LabelProtected] != "true" {
			unmutated++
		}
	}
	if unmutated != 2 {
		t.Errorf("%d unmutated Pods, want the 2 created while the webhook was down", unmutated)
	}
	// ...and directly, in a protected namespace and in kube-system.
	for _, nsName := range []string{ns, "kube-system"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "down-", Namespace: nsName},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		created, err := cs.CoreV1().Pods(nsName).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("Pod in %s denied with the webhook down: %v", nsName, err)
		}
		_ = cs.CoreV1().Pods(nsName).Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	// Workloads too: the validating webhook also fails open.
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "late", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Deployment denied with the webhook down: %v", err)
	}

	// After restart the audit reports both: the unmutated Pods and the workload without a PDB.
	w.Start()
	events := waitForEvents(t, ns, map[string]string{
		audit.EventReasonPrefix + audit.FindingPodsUnprotected: "web",
		audit.EventReasonPrefix + audit.FindingNoPDB:           "late",
	})
	for _, e := range events {
		if e.Reason == audit.EventReasonPrefix+audit.FindingPodsUnprotected && !containsAll(e.Note, "2 Pods", "rollout restart deployment/web") {
			t.Errorf("event note %q", e.Note)
		}
	}
	m := w.Metrics()
	if !strings.Contains(m, `lifeboat_webhook_audit_findings{finding="PodsUnprotected"}`) {
		t.Errorf("/metrics lacks the audit gauge")
	}
}

type auditEvent struct{ Reason, Name, Note string }

// waitForEvents waits for an Event with each reason about the named workload.
func waitForEvents(t testing.TB, ns string, want map[string]string) []auditEvent {
	t.Helper()
	var found []auditEvent
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := shared.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		found = nil
		seen := map[string]bool{}
		for _, e := range list.Items {
			found = append(found, auditEvent{Reason: e.Reason, Name: e.Regarding.Name, Note: e.Note})
			if want[e.Reason] == e.Regarding.Name {
				seen[e.Reason] = true
			}
		}
		return len(seen) == len(want), nil
	})
	if err != nil {
		t.Fatalf("audit events %v not found; have %+v", want, found)
	}
	return found
}

func TestSelfManagedTLS(t *testing.T) {
	applyPriorityClasses(t)
	ctx := context.Background()
	cs := shared.Client()
	ownNS := "lifeboat-selftls"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ownNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ownNS, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().Secrets(ownNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// No caBundle: the webhook must generate its CA and inject it.
	reg := registerWebhooks(t, "-selftls", "localhost", port, nil)
	startWebhook(t, nil, port,
		"--self-managed-tls", "--tls-secret="+ownNS+"/tls", "--tls-dns-names=localhost",
		"--mutating-webhook-configuration="+reg.mutating, "--validating-webhook-configuration="+reg.validating,
		"--namespace="+ownNS)
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, reg.mutating, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatal("ready, but no CA bundle injected")
	}
	ns := newNamespace(t, "selftls", protectedNS)
	waitForWebhooks(t, ns)
}

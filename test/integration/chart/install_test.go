package chart

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/release"
)

// TestInstallUpgradeUninstall installs the chart into the real local control plane with helm,
// then proves the installed objects work by running Lifeboat's binaries as the chart
// configured them (pkg/localcluster/release, the same path `lifeboat sim` takes): the
// container args of the installed Deployments, the scheduler's ConfigMap, the controller's
// settings ConfigMap, each component authenticated with a token of its chart ServiceAccount,
// so it has exactly the chart's RBAC. The apiserver reaches the webhook through the chart's
// Service and webhook configurations unchanged (EndpointSlice → the local process), with the
// certificate the webhook generates for lifeboat-webhook.<namespace>.svc in the chart's Secret,
// its CA injected into the chart's webhook configurations. What this does not cover is the
// images themselves (Dockerfile).
func TestInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local control plane")
	}
	helm := tool(t, "helm")
	c := localclustertest.StartT(t, localcluster.Options{
		ControllerManager:   true,
		ExtraAPIServerFlags: []string{"--enable-aggregator-routing=true"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := c.Client()
	emu, err := awsemu.Start(awsemu.New(awsemu.Options{}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	queueURL := emu.CreateQueue(emu.URL, "lifeboat-chart-test")
	creds, err := emu.ClientOptions().Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	// As docs/INSTALL.md says: the namespace first, with Pod Security restricted enforced
	// (release.Install creates it so), then helm install.
	rel, err := release.Install(ctx, c, release.Options{
		Helm: helm, Chart: chartDir(t), BinDir: filepath.Dir(helm), Name: releaseName, Namespace: namespace,
		Values: []string{filepath.Join("testdata", "install-values.yaml")},
		Set: []string{"aws.ec2Endpoint=" + emu.URL, "aws.sqsEndpoint=" + emu.URL,
			"aws.interruptionQueueURL=" + queueURL},
		WorkDir:        t.TempDir(),
		ControllerEnv:  []string{"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey},
		ControllerArgs: []string{"--sqs-wait-time=1s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install in %s", time.Since(began).Round(time.Millisecond))
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace %s without Pod Security restricted: %v %v", namespace, ns.Labels, err)
	}
	// Healthy, leases held (the chart's RBAC), webhooks called through the Service.
	if err := rel.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel.Stop)
	waitCABundle(ctx, t, cs)
	// The ReplicaSet controller created every replica: Pod Security restricted and the
	// PriorityClass admitted the chart's Pod templates.
	waitPods(ctx, t, cs, namespace, "app.kubernetes.io/name=lifeboat-webhook", 2)
	waitPods(ctx, t, cs, namespace, "app.kubernetes.io/name=lifeboat-scheduler", 2)
	shop := protectedNamespace(ctx, t, cs, "shop")
	waitWebhooksCalled(ctx, t, cs, shop)
	t.Logf("installed and Ready (components healthy, leases held, webhooks called through the Service) in %s", time.Since(began).Round(time.Millisecond))

	t.Run("a protected Deployment is admitted and mutated", func(t *testing.T) {
		createProtected(ctx, t, cs, shop, "web", 2)
		for _, p := range waitPods(ctx, t, cs, shop, "app=web", 2) {
			checkMutated(t, &p)
		}
	})

	t.Run("the WarmPool from the values is created and reconciled", func(t *testing.T) {
		gvr := schema.GroupVersionResource{Group: v1alpha1.Group, Version: "v1alpha1", Resource: "warmpools"}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			wp, err := c.Dynamic().Resource(gvr).Get(ctx, "chart-test", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			g, _, _ := unstructured.NestedInt64(wp.Object, "status", "observedGeneration")
			return g >= 1, nil
		})
		if err != nil {
			t.Fatalf("WarmPool chart-test not reconciled by the controller: %v", err)
		}
	})

	secretBefore, err := cs.CoreV1().Secrets(namespace).Get(ctx, "lifeboat-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("helm upgrade with changed values", func(t *testing.T) {
		if err := rel.Upgrade(ctx, "webhook.replicas=3", "policy.excludedNamespaces={kube-system,kube-public,kube-node-lease,legacy}"); err != nil {
			t.Fatal(err)
		}
		dep, err := cs.AppsV1().Deployments(namespace).Get(ctx, "lifeboat-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != 3 {
			t.Errorf("webhook replicas %d after upgrade, want 3", *dep.Spec.Replicas)
		}
		secret, err := cs.CoreV1().Secrets(namespace).Get(ctx, "lifeboat-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(secret.Data["ca.crt"]) != string(secretBefore.Data["ca.crt"]) || len(secret.Data["ca.crt"]) == 0 {
			t.Errorf("the upgrade replaced or emptied the self-managed CA in the Secret")
		}
		// The injected CA bundle survived the upgrade: the webhooks are still called.
		waitWebhooksCalled(ctx, t, cs, shop)
		createProtected(ctx, t, cs, shop, "web2", 1)
		for _, p := range waitPods(ctx, t, cs, shop, "app=web2", 1) {
			checkMutated(t, &p)
		}
		// The newly excluded namespace is no longer seen by the webhooks: a protected
		// Deployment without a PDB is admitted and its Pods are left alone.
		legacy := protectedNamespace(ctx, t, cs, "legacy")
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.AppsV1().Deployments(legacy).Create(ctx, deployment(legacy, "old", 1), metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("protected Deployment without PDB in the excluded namespace not admitted: %v", err)
		}
		for _, p := range waitPods(ctx, t, cs, legacy, "app=old", 1) {
			if p.Labels[v1alpha1.LabelProtected] != "" {
				t.Errorf("Pod %s in the excluded namespace was mutated", p.Name)
			}
		}
	})

	t.Run("helm uninstall leaves only the CRD", func(t *testing.T) {
		// docs/INSTALL.md: delete the WarmPools first, while the controller runs, so that it
		// releases their instances and finalizers.
		gvr := schema.GroupVersionResource{Group: v1alpha1.Group, Version: "v1alpha1", Resource: "warmpools"}
		if err := c.Dynamic().Resource(gvr).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
		if err != nil {
			t.Fatalf("WarmPools not deleted: %v", err)
		}
		rel.Stop() // the Pods go away with the Deployments
		if err := rel.Uninstall(ctx); err != nil {
			t.Fatal(err)
		}
		if left := chartObjects(ctx, t, c); len(left) > 0 {
			t.Errorf("left after helm uninstall: %s", strings.Join(left, ", "))
		}
		crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		if _, err := c.Dynamic().Resource(crd).Get(ctx, "warmpools.lifeboat.dev", metav1.GetOptions{}); err != nil {
			t.Errorf("the WarmPool CRD is gone after helm uninstall (crds/ must be kept): %v", err)
		}
	})
}

// waitCABundle: the webhook, as its ServiceAccount, injected its CA into the chart's
// configurations.
func waitCABundle(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "lifeboat-pods", metav1.GetOptions{})
		if err != nil || len(m.Webhooks) == 0 || len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false, nil
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "lifeboat-workloads", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range v.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("no CA bundle injected into lifeboat-pods / lifeboat-workloads: %v", err)
	}
}

func protectedNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected},
	}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// waitWebhooksCalled waits until the apiserver calls the validating webhook through the
// Service (its configuration informer is asynchronous): a protected Deployment without a PDB
// is denied, by a dry run.
func waitWebhooksCalled(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "probe", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "PodDisruptionBudget"), nil
	})
	if err != nil {
		t.Fatalf("the apiserver does not call the webhook through the chart's Service: %v (last answer: %v)", err, last)
	}
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10",
				}}},
			},
		},
	}
}

// createProtected creates a PDB and then the Deployment it covers (enforce mode denies a
// protected Deployment without one).
func createProtected(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	maxUnavailable := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &maxUnavailable,
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook's PDB informer sees the new PDB within moments; retry until it has.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, name, replicas), metav1.CreateOptions{})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("protected Deployment %s/%s with a PDB not admitted: %v", ns, name, last)
	}
}

func waitPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		return len(pods) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d Pods %s in %s, want %d: %v", len(pods), selector, ns, n, err)
	}
	return pods
}

// checkMutated: the webhook protected the Pod with the chart's policy values (tier
// stateless by default, the tier's PriorityClass, the Spot toleration).
func checkMutated(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if p.Labels[v1alpha1.LabelProtected] != "true" || p.Labels[v1alpha1.LabelTier] != string(v1alpha1.TierStateless) {
		t.Errorf("Pod %s not protected: labels %v", p.Name, p.Labels)
	}
	// policy.schedulerRouting WhileLifeboatActive and no lifeboat active: the default scheduler.
	if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("Pod %s: schedulerName %q, want %s while no lifeboat is active", p.Name, p.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}
	if p.Spec.PriorityClassName != v1alpha1.PriorityClassStateless {
		t.Errorf("Pod %s: priorityClassName %q", p.Name, p.Spec.PriorityClassName)
	}
	tolerates := false
	for _, tol := range p.Spec.Tolerations {
		tolerates = tolerates || tol.Key == v1alpha1.TaintSpot
	}
	if !tolerates {
		t.Errorf("Pod %s does not tolerate %s: %v", p.Name, v1alpha1.TaintSpot, p.Spec.Tolerations)
	}
}

// chartObjects lists every object that carries the release's instance label, of every kind the
// chart creates.
func chartObjects(ctx context.Context, t *testing.T, c *localcluster.Cluster) []string {
	t.Helper()
	kinds := []schema.GroupVersionResource{
		{Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "services"},
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
		{Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses"},
		{Group: v1alpha1.Group, Version: "v1alpha1", Resource: "warmpools"},
	}
	var left []string
	for _, gvr := range kinds {
		l, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName})
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, o := range l.Items {
			left = append(left, gvr.Resource+"/"+o.GetName())
		}
	}
	// Helm's own record of the release.
	if l, err := c.Client().CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + releaseName}); err == nil {
		for _, s := range l.Items {
			left = append(left, "secrets/"+s.Name)
		}
	}
	return left
}

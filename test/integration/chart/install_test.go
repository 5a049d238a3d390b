package chart

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// TestInstallUpgradeUninstall installs the chart into the real local control plane with helm,
// then proves the installed objects work by running Lifeboat's binaries against them.
//
// The local control plane has no kubelet that could run the chart's images, so the components
// run as local processes, each configured from what the chart installed — the container
// args of the installed Deployments, the scheduler's ConfigMap, the controller's settings
// ConfigMap — and each authenticated as the chart's ServiceAccount (impersonation), so it has
// exactly the chart's RBAC. The apiserver reaches the webhook through the chart's Service and
// webhook configurations unchanged: with --enable-aggregator-routing it resolves the Service
// to its EndpointSlice, which the test points at the local webhook process (there are no Pod
// IPs to point at). The certificate is the one the webhook generates for
// lifeboat-webhook.<namespace>.svc in the chart's Secret, its CA injected into the chart's
// webhook configurations. What this does not cover is the images themselves (Dockerfile).
func TestInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local control plane")
	}
	helm := tool(t, "helm")
	bins := lifeboatBinaries(t)
	hostIP := nonLoopbackIPv4(t)
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

	// As docs/INSTALL.md says: the namespace first, with Pod Security restricted enforced.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webhookPort := freePorts(t, 1)[0]
	pointServiceAt(ctx, t, cs, hostIP, webhookPort)

	helmArgs := []string{"--kubeconfig", c.KubeconfigPath(), "--namespace", namespace}
	values := []string{
		"-f", filepath.Join("testdata", "install-values.yaml"),
		"--set", "aws.ec2Endpoint=" + emu.URL, "--set", "aws.sqsEndpoint=" + emu.URL,
		"--set", "aws.interruptionQueueURL=" + queueURL,
	}
	began := time.Now()
	run(t, helm, append(append([]string{"install", release, chartDir(t)}, helmArgs...), values...)...)
	t.Logf("helm install in %s", time.Since(began).Round(time.Millisecond))

	comps := startComponents(ctx, t, c, bins, hostIP, webhookPort, emu)
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
		run(t, helm, append(append([]string{"upgrade", release, chartDir(t)}, helmArgs...), append(values,
			"--set", "webhook.replicas=3",
			"--set", "policy.excludedNamespaces={kube-system,kube-public,kube-node-lease,legacy}")...)...)
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
		comps.stop(t) // the Pods go away with the Deployments
		run(t, helm, append([]string{"uninstall", release, "--wait", "--timeout", "60s"}, helmArgs...)...)
		if left := chartObjects(ctx, t, c); len(left) > 0 {
			t.Errorf("left after helm uninstall: %s", strings.Join(left, ", "))
		}
		crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		if _, err := c.Dynamic().Resource(crd).Get(ctx, "warmpools.lifeboat.dev", metav1.GetOptions{}); err != nil {
			t.Errorf("the WarmPool CRD is gone after helm uninstall (crds/ must be kept): %v", err)
		}
	})
}

// lifeboatBinaries returns the paths of the binaries make build writes.
func lifeboatBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Dir(tool(t, "helm"))
	out := map[string]string{}
	for _, b := range []string{"lifeboat-webhook", "lifeboat-scheduler", "lifeboat-controller"} {
		p := filepath.Join(dir, b)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s not found in %s: build it with `make build`", b, dir)
		}
		out[b] = p
	}
	return out
}

// nonLoopbackIPv4: EndpointSlices refuse loopback addresses, so the webhook listens on one of
// the machine's own addresses.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address: the apiserver cannot route the webhook Service to a local process")
	return ""
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	p, err := localcluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pointServiceAt gives the chart's webhook Service an endpoint: the local webhook process.
// The EndpointSlice controller leaves slices it does not manage alone.
func pointServiceAt(ctx context.Context, t *testing.T, cs kubernetes.Interface, ip string, port int) {
	t.Helper()
	_, err := cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "lifeboat-webhook-local", Labels: map[string]string{
			discoveryv1.LabelServiceName: "lifeboat-webhook",
			discoveryv1.LabelManagedBy:   "lifeboat-chart-test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

type components struct{ pids []int }

// stop sends SIGTERM to the component processes this test started.
func (c *components) stop(t *testing.T) {
	for _, pid := range c.pids {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
			t.Logf("stop %d: %v", pid, err)
		}
	}
	for _, pid := range c.pids {
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return !localcluster.ProcessAlive(pid), nil
		})
	}
}

// startComponents runs the three binaries as the chart configured them, each as its chart
// ServiceAccount, and waits until each is healthy and holds its lease.
func startComponents(ctx context.Context, t *testing.T, c *localcluster.Cluster, bins map[string]string, hostIP string, webhookPort int, emu *awsemu.Server) *components {
	t.Helper()
	cs := c.Client()
	comps := &components{}
	start := func(name string, args, env []string) {
		pid, err := c.StartProcess(name, bins[name], args, env)
		if err != nil {
			t.Fatal(err)
		}
		comps.pids = append(comps.pids, pid)
	}

	webhook := container(ctx, t, cs, "lifeboat-webhook", "webhook")
	whPorts := freePorts(t, 2)
	start("lifeboat-webhook", append(append([]string{}, webhook.Args...),
		"--kubeconfig="+serviceAccountKubeconfig(t, c, "lifeboat-webhook"),
		"--bind-address="+hostIP, fmt.Sprintf("--port=%d", webhookPort),
		"--tls-cert-dir="+t.TempDir(),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", whPorts[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", whPorts[1]),
	), nil)

	schedKubeconfig := serviceAccountKubeconfig(t, c, "lifeboat-scheduler")
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, "lifeboat-scheduler-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	conn["kubeconfig"] = schedKubeconfig
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	scheduler := container(ctx, t, cs, "lifeboat-scheduler", "scheduler")
	schedPort := freePorts(t, 1)[0]
	start("lifeboat-scheduler", append(replaceFlag(scheduler.Args, "--config", cfgPath),
		"--authentication-kubeconfig="+schedKubeconfig, "--authorization-kubeconfig="+schedKubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedPort),
	), nil)

	controller := container(ctx, t, cs, "lifeboat-scheduler", "controller")
	ctrlPorts := freePorts(t, 2)
	creds, err := emu.ClientOptions().Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := append(resolveEnv(ctx, t, cs, controller.Env),
		"KUBECONFIG="+schedKubeconfig, // the sidecar shares the scheduler Pod's ServiceAccount
		"AWS_ACCESS_KEY_ID="+creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+creds.SecretAccessKey)
	start("lifeboat-controller", append(append([]string{}, controller.Args...),
		"--sqs-wait-time=1s",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ctrlPorts[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ctrlPorts[1]),
	), env)

	for name, url := range map[string]string{
		"lifeboat-webhook":    fmt.Sprintf("http://127.0.0.1:%d/readyz", whPorts[1]),
		"lifeboat-scheduler":  fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort),
		"lifeboat-controller": fmt.Sprintf("http://127.0.0.1:%d/readyz", ctrlPorts[1]),
	} {
		if err := c.WaitHealthy(ctx, name, url); err != nil {
			t.Fatal(err)
		}
	}
	for _, lease := range []string{"lifeboat-scheduler", "lifeboat-controller", "lifeboat-webhook-audit"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
		})
		if err != nil {
			t.Fatalf("lease %s/%s not acquired (RBAC of the chart?): %v", namespace, lease, err)
		}
	}
	return comps
}

// container returns a container of an installed Deployment.
func container(ctx context.Context, t *testing.T, cs kubernetes.Interface, deployment, name string) corev1.Container {
	t.Helper()
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", deployment, name)
	return corev1.Container{}
}

// resolveEnv turns a container's env (values and ConfigMap references) into KEY=value pairs,
// as the kubelet would.
func resolveEnv(ctx context.Context, t *testing.T, cs kubernetes.Interface, env []corev1.EnvVar) []string {
	t.Helper()
	var out []string
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			if v, ok := cm.Data[ref.Key]; ok && v != "" {
				out = append(out, e.Name+"="+v)
			}
		default:
			t.Fatalf("env %s: unsupported source", e.Name)
		}
	}
	return out
}

func replaceFlag(args []string, flag, value string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if strings.HasPrefix(a, flag+"=") {
			a = flag + "=" + value
		}
		out = append(out, a)
	}
	return out
}

// serviceAccountKubeconfig writes a kubeconfig whose requests reach the apiserver as the
// chart's ServiceAccount: an impersonating proxy on loopback, authenticated as the admin.
func serviceAccountKubeconfig(t *testing.T, c *localcluster.Cluster, sa string) string {
	t.Helper()
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // stream watches
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: "http://" + ln.Addr().String()}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{}
	kc.Contexts[sa] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa}
	kc.CurrentContext = sa
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
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
// stateless by default, the scheduler name, the tier's PriorityClass, the Spot toleration).
func checkMutated(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if p.Labels[v1alpha1.LabelProtected] != "true" || p.Labels[v1alpha1.LabelTier] != string(v1alpha1.TierStateless) {
		t.Errorf("Pod %s not protected: labels %v", p.Name, p.Labels)
	}
	if p.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("Pod %s: schedulerName %q", p.Name, p.Spec.SchedulerName)
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
		l, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, o := range l.Items {
			left = append(left, gvr.Resource+"/"+o.GetName())
		}
	}
	// Helm's own record of the release.
	if l, err := c.Client().CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + release}); err == nil {
		for _, s := range l.Items {
			left = append(left, "secrets/"+s.Name)
		}
	}
	return left
}

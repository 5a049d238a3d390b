package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// Start runs the webhook, the scheduler and its controller sidecar as the chart configured
// them, each as its chart ServiceAccount, and waits until each is healthy, holds its lease,
// and the apiserver calls the webhooks through the chart's Service.
func (r *Release) Start(ctx context.Context) error {
	for _, start := range []func(context.Context) error{r.startWebhook, r.startScheduler, r.startController} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	for _, name := range []string{Webhook, Scheduler, Controller} {
		if err := r.c.WaitHealthy(ctx, name, r.HealthURL[name]); err != nil {
			return err
		}
	}
	if err := r.WaitLeases(ctx); err != nil {
		return err
	}
	return r.waitAdmission(ctx)
}

func (r *Release) start(name string, args, env []string) error {
	pid, err := r.c.StartProcess(name, filepath.Join(r.o.BinDir, name), args, env)
	if err != nil {
		return err
	}
	r.pids = append(r.pids, pid)
	return nil
}

// startWebhook: the chart's args, then this machine's address and ports (later flags win).
func (r *Release) startWebhook(ctx context.Context) error {
	c, err := r.container(ctx, Webhook, "webhook")
	if err != nil {
		return err
	}
	kubeconfig, err := r.serviceAccountKubeconfig(ctx, Webhook)
	if err != nil {
		return err
	}
	endpoints, err := r.endpointFlags(Webhook)
	if err != nil {
		return err
	}
	args := append(append([]string{}, c.Args...),
		"--kubeconfig="+kubeconfig,
		"--bind-address="+r.hostIP, fmt.Sprintf("--port=%d", r.webhookPort),
		"--tls-cert-dir="+filepath.Join(r.o.WorkDir, "webhook-certs"))
	return r.start(Webhook, append(args, endpoints...), nil)
}

// startScheduler: the chart's KubeSchedulerConfiguration with its kubeconfig filled in (with
// --config, kube-scheduler ignores --kubeconfig).
func (r *Release) startScheduler(ctx context.Context) error {
	kubeconfig, err := r.serviceAccountKubeconfig(ctx, Scheduler)
	if err != nil {
		return err
	}
	cfgPath, err := r.schedulerConfig(ctx, kubeconfig)
	if err != nil {
		return err
	}
	c, err := r.container(ctx, Scheduler, "scheduler")
	if err != nil {
		return err
	}
	port, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	r.HealthURL[Scheduler] = fmt.Sprintf("https://127.0.0.1:%d/healthz", port[0])
	r.MetricsURL[Scheduler] = fmt.Sprintf("https://127.0.0.1:%d/metrics", port[0])
	return r.start(Scheduler, append(replaceFlag(c.Args, "--config", cfgPath),
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port[0]),
	), nil)
}

func (r *Release) schedulerConfig(ctx context.Context, kubeconfig string) (string, error) {
	cm, err := r.c.Client().CoreV1().ConfigMaps(r.o.Namespace).Get(ctx, Scheduler+"-config", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the chart's scheduler configuration: %w", err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		return "", fmt.Errorf("ConfigMap %s-config: %w", Scheduler, err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = kubeconfig
	cfg["clientConnection"] = conn
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(r.o.WorkDir, "lifeboat-scheduler.yaml")
	return path, os.WriteFile(path, b, 0o600)
}

// startController: the sidecar of the scheduler's Deployment, with the scheduler Pod's
// ServiceAccount and the env the kubelet would resolve from the chart's ConfigMap.
func (r *Release) startController(ctx context.Context) error {
	c, err := r.container(ctx, Scheduler, "controller")
	if err != nil {
		return err
	}
	kubeconfig, err := r.serviceAccountKubeconfig(ctx, Scheduler)
	if err != nil {
		return err
	}
	env, err := r.resolveEnv(ctx, c.Env)
	if err != nil {
		return err
	}
	endpoints, err := r.endpointFlags(Controller)
	if err != nil {
		return err
	}
	args := append(append(append([]string{}, c.Args...), r.o.ControllerArgs...), endpoints...)
	return r.start(Controller, args, append(append(env, "KUBECONFIG="+kubeconfig), r.o.ControllerEnv...))
}

// endpointFlags picks free ports for the metrics and health endpoints of a controller-runtime
// binary (the webhook, the controller), records their URLs and returns the flags that bind them.
func (r *Release) endpointFlags(name string) ([]string, error) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	r.MetricsURL[name] = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])
	r.HealthURL[name] = fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])
	return []string{
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
	}, nil
}

// container returns a container of an installed Deployment.
func (r *Release) container(ctx context.Context, deployment, name string) (corev1.Container, error) {
	d, err := r.c.Client().AppsV1().Deployments(r.o.Namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return corev1.Container{}, fmt.Errorf("the chart's Deployment %s: %w", deployment, err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c, nil
		}
	}
	return corev1.Container{}, fmt.Errorf("the chart's Deployment %s has no container %s", deployment, name)
}

// resolveEnv turns a container's env (values and ConfigMap references) into KEY=value pairs,
// as the kubelet would.
func (r *Release) resolveEnv(ctx context.Context, env []corev1.EnvVar) ([]string, error) {
	var out []string
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := r.c.Client().CoreV1().ConfigMaps(r.o.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			if v, ok := cm.Data[ref.Key]; ok && v != "" {
				out = append(out, e.Name+"="+v)
			}
		default:
			return nil, fmt.Errorf("env %s: only values and ConfigMap references are resolved here", e.Name)
		}
	}
	return out, nil
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

// serviceAccountKubeconfig writes a kubeconfig with a token of the chart's ServiceAccount
// (TokenRequest, valid for a day), as the kubelet mounts one into a Pod.
func (r *Release) serviceAccountKubeconfig(ctx context.Context, sa string) (string, error) {
	tr, err := r.c.Client().CoreV1().ServiceAccounts(r.o.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of the chart's ServiceAccount %s: %w", sa, err)
	}
	cfg := r.c.RESTConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: r.c.CACertFile()}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[sa] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa}
	kc.CurrentContext = sa
	path := filepath.Join(r.o.WorkDir, sa+".kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// waitAdmission waits until the apiserver calls the webhooks through the chart's Service
// (its webhook-configuration informer is asynchronous, and the webhook injects its CA first):
// a dry run of a protected Deployment without a PodDisruptionBudget is denied.
func (r *Release) waitAdmission(ctx context.Context) error {
	labels := map[string]string{"app": "lifeboat-admission-probe"}
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "lifeboat-admission-probe", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{v1alpha1.LabelSpot: v1alpha1.SpotProtected}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = r.c.Client().AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "PodDisruptionBudget"), nil
	})
	if err != nil {
		return fmt.Errorf("the apiserver does not call the webhook through the chart's Service (see %s.log in %s): %w (last answer: %v)", Webhook, r.c.RunDir(), err, last)
	}
	return nil
}

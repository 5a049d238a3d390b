// Package controller holds the integration tests of lifeboat-controller: the real local
// control plane (etcd, kube-apiserver, kube-controller-manager, KWOK) and the AWS emulator with
// its KWOK binding, the controllers in-process through the production wiring
// (controllers.Register) and the production AWS clients pointed at the emulator.
package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/warmpool"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// fastDelays keep the emulated EC2 state machine quick; the order of events is what matters.
func fastDelays() awsemu.Delays {
	return awsemu.Delays{Launch: 300 * time.Millisecond, NodeBoot: 500 * time.Millisecond, Stop: 500 * time.Millisecond,
		Start: 300 * time.Millisecond, NodeResume: 500 * time.Millisecond, Terminate: 300 * time.Millisecond}
}

type env struct {
	t testing.TB
	// wrap, if set, wraps the manager's API transport (benchmarks count requests).
	wrap func(http.RoundTripper) http.RoundTripper
	// impersonate, if set, runs the manager as that ServiceAccount user (its RBAC only).
	impersonate string
	cluster     *localcluster.Cluster
	client      client.Client
	emu         *awsemu.Server
	queue       string
	inst        cloud.Instances
	opts        awsclient.Options
}

func crdDir(t testing.TB) string {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "manifests", "crds")
}

// newEnv starts the control plane, applies the WarmPool CRD and the namespace, starts the AWS
// emulator bound to the cluster, and a stand-in for the kubelet's image reporting.
func newEnv(t *testing.T) *env {
	return newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true})
}

func newEnvWith(t *testing.T, copts localcluster.Options) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the local control plane (make tools)")
	}
	return newBenchEnv(t, copts)
}

func newBenchEnv(t testing.TB, copts localcluster.Options) *env {
	t.Helper()
	c := localclustertest.StartT(t, copts)
	ctx := context.Background()
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{crdDir(t)}); err != nil {
		t.Fatalf("apply CRD: %v", err)
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	emu := awsemutest.StartT(t, awsemu.Options{Delays: fastDelays(), Binder: &awsemu.KubeNodeBinder{Client: c.Client()}, Seed: 7})
	queue := emu.CreateQueue(emu.URL, "lifeboat-interruptions")
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	opts := emu.ClientOptions()
	opts.BaseDelay, opts.ThrottleBaseDelay, opts.MaxBackoff = 5*time.Millisecond, 10*time.Millisecond, 200*time.Millisecond
	clients, err := awsclient.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cluster: c, client: cl, emu: emu, queue: queue, opts: opts,
		inst: cloud.NewInstances(clients.EC2, cloud.InstancesOptions{NotFoundInitialBackoff: 20 * time.Millisecond})}
	e.startImageReporter()
	return e
}

// startImageReporter plays the kubelet's part the harness lacks: when a pre-pull Pod is bound
// to a Node, the Node reports the Pod's images in node.status.images (a real kubelet pulls
// them before starting the containers and reports them in its status). Stopped at test end.
func (e *env) startImageReporter() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := e.cluster.Client().CoreV1().Pods(v1alpha1.DefaultNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPrePull + "=true"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				e.reportImagesOf(ctx, ev.Object.(*corev1.Pod))
			}
		}
	}()
}

func (e *env) reportImagesOf(ctx context.Context, p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	var imgs []corev1.ContainerImage
	for _, c := range p.Spec.Containers {
		imgs = append(imgs, corev1.ContainerImage{Names: []string{c.Image}, SizeBytes: 1 << 20})
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"images": imgs}})
	_, _ = e.cluster.Client().CoreV1().Nodes().Patch(ctx, p.Spec.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

// manager runs the controllers until stop is called (a crash, for crash-safety tests).
type manager struct {
	cancel context.CancelFunc
	done   chan struct{}
	reg    *controllers.Registered
}

func (e *env) startManager() *manager {
	e.t.Helper()
	cfg := e.cluster.RESTConfig()
	if e.wrap != nil {
		cfg.Wrap(e.wrap)
	}
	if e.impersonate != "" {
		ns := strings.Split(e.impersonate, ":")
		cfg.Impersonate = rest.ImpersonationConfig{UserName: e.impersonate, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns[2], "system:authenticated"}}
	}
	cfg.QPS, cfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: controllers.Scheme(), Cache: controllers.CacheOptions(""),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Logger: klog.Background(),
		// Tests restart the manager in-process (crash-safety); controller names repeat.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clients, err := awsclient.New(ctx, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	reg, err := controllers.Register(ctx, mgr, controllers.Deps{
		Instances:          e.inst,
		Queue:              &interruptionqueue.Consumer{SQS: clients.SQS, QueueURL: e.queue, WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, ErrorBackoff: 20 * time.Millisecond},
		WarmPool:           warmpool.Options{Busy: 300 * time.Millisecond, Resync: 2 * time.Second, HibernateRetry: 5 * time.Second},
		ActiveRestartAfter: 2 * time.Second, HandoffPoll: 200 * time.Millisecond,
		GCPeriod: 2 * time.Second, GCGrace: 5 * time.Second,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	m := &manager{cancel: cancel, done: make(chan struct{}), reg: reg}
	go func() {
		defer close(m.done)
		if err := mgr.Start(ctx); err != nil {
			e.t.Errorf("manager: %v", err)
		}
	}()
	e.t.Cleanup(m.stop)
	return m
}

func (m *manager) stop() {
	m.cancel()
	<-m.done
}

// poolNodes lists the pool's Nodes by state.
func (e *env) poolNodes(ctx context.Context, pool string) map[v1alpha1.NodeState][]corev1.Node {
	list := &corev1.NodeList{}
	if err := e.client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelPool: pool}); err != nil {
		return nil // the poll's context ended; waitFor reports it
	}
	out := map[v1alpha1.NodeState][]corev1.Node{}
	for _, n := range list.Items {
		out[v1alpha1.NodeState(n.Labels[v1alpha1.LabelState])] = append(out[v1alpha1.NodeState(n.Labels[v1alpha1.LabelState])], n)
	}
	return out
}

// liveInstances are the pool's instances that are not terminated or shutting down.
func (e *env) liveInstances(pool string) []awsemu.InstanceView {
	var out []awsemu.InstanceView
	for _, in := range e.emu.Instances() {
		if in.Tags[cloud.TagPool] == pool && in.State != cloud.StateTerminated && in.State != cloud.StateShuttingDown {
			out = append(out, in)
		}
	}
	return out
}

// podsRunning: the named Pods are Running.
func (e *env) podsRunning(namespace string, names ...string) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		running := 0
		for _, name := range names {
			p := &corev1.Pod{}
			if e.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, p) == nil && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(names), fmt.Sprintf("%d/%d Running", running, len(names))
	}
}

// waitFor polls cond until it holds; on timeout it fails with the last description.
func (e *env) waitFor(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		// Each look gets its own few seconds, so that the last one before the deadline still
		// reads the state (the failure message shows it) instead of failing on the deadline.
		look, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer done()
		ok, desc := cond(look)
		last = desc
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

func TestMain(m *testing.M) {
	klog.SetOutput(os.Stderr)
	ctrl.SetLogger(klog.Background())
	os.Exit(m.Run())
}

var (
	metav1CreateOptions = metav1.CreateOptions{}
	metav1GetOptions    = metav1.GetOptions{}
)

func awsemuNoFaults() awsemu.Faults { return awsemu.Faults{} }

// Package scheduler holds the lifeboat-scheduler's integration tests: an in-process scheduler
// built from manifests/scheduler/config.yaml with the out-of-tree plugins, and the real
// cmd/lifeboat-scheduler binary, both against the local control plane of pkg/localcluster.
package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	_ "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	"github.com/lifeboat-k8s/lifeboat/plugins/capacitypoolspread"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboatplacement"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboattaints"
)

// outOfTreeRegistry is what cmd/lifeboat-scheduler registers with app.WithPlugin.
var outOfTreeRegistry = frameworkruntime.Registry{
	lifeboattaints.Name:     lifeboattaints.New,
	lifeboatplacement.Name:  lifeboatplacement.New,
	capacitypoolspread.Name: capacitypoolspread.New,
}

func repoPath(t testing.TB, elem ...string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// manifestConfig is the configuration the Deployment mounts.
func manifestConfig(t testing.TB) string { return repoPath(t, "manifests", "scheduler", "config.yaml") }

// startScheduler runs an in-process scheduler with the profiles of the manifest configuration
// and Lifeboat's plugins (WithFrameworkOutOfTreeRegistry), as scheduler-plugins' integration
// tests do. It stops, with everything it started, when the test ends.
func startScheduler(t *testing.T, cfg *rest.Config) {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)

	schedCfg, err := options.LoadConfigFromFile(logger, manifestConfig(t))
	if err != nil {
		t.Fatalf("load %s: %v", manifestConfig(t), err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = schedCfg.ClientConnection.QPS, int(schedCfg.ClientConnection.Burst)
	client := kubernetes.NewForConfigOrDie(cfg)

	informerFactory := scheduler.NewInformerFactory(client, 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, informerFactory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(schedCfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(schedCfg.PercentageOfNodesToScore),
		scheduler.WithPodInitialBackoffSeconds(schedCfg.PodInitialBackoffSeconds),
		scheduler.WithPodMaxBackoffSeconds(schedCfg.PodMaxBackoffSeconds),
		scheduler.WithParallelism(schedCfg.Parallelism),
		scheduler.WithFrameworkOutOfTreeRegistry(outOfTreeRegistry),
	)
	if err != nil {
		cancel()
		t.Fatalf("create scheduler: %v", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		cancel()
		t.Fatalf("scheduler handlers: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { sched.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		informerFactory.Shutdown()
		broadcaster.Shutdown()
	})
}

// nodeSpec describes a fake Node: plain Node objects with a Ready condition and allocatable
// are all the scheduler needs.
type nodeSpec struct {
	name   string
	labels map[string]string
	taints []v1.Taint
	cpu    string // allocatable CPU, default 4
	pods   string // allocatable pods, default 110
}

func (s nodeSpec) node() *v1.Node {
	cpu, pods := s.cpu, s.pods
	if cpu == "" {
		cpu = "4"
	}
	if pods == "" {
		pods = "110"
	}
	alloc := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse("16Gi"),
		v1.ResourcePods:   resource.MustParse(pods),
	}
	labels := map[string]string{v1.LabelHostname: s.name, v1.LabelOSStable: "linux"}
	for k, v := range s.labels {
		labels[k] = v
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: labels},
		Spec:       v1.NodeSpec{Taints: s.taints},
		Status: v1.NodeStatus{
			Capacity: alloc, Allocatable: alloc,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
		},
	}
}

// poolLabels are the labels of a warm-pool node in a state; pool nodes carry no karpenter.sh labels.
func poolLabels(state v1alpha1.NodeState, instanceType, zone string) map[string]string {
	return map[string]string{
		v1alpha1.LabelPool: "default", v1alpha1.LabelState: string(state),
		v1alpha1.LabelInstanceType: instanceType, v1alpha1.LabelZone: zone,
	}
}

func spotLabels(instanceType, zone string) map[string]string {
	return map[string]string{v1alpha1.LabelInstanceType: instanceType, v1alpha1.LabelZone: zone, v1alpha1.LabelCapacityType: "spot"}
}

var (
	lifeboatTaint = v1.Taint{Key: v1alpha1.TaintLifeboat, Value: "default", Effect: v1.TaintEffectNoSchedule}
	standbyTaint  = v1.Taint{Key: v1alpha1.TaintStandby, Effect: v1.TaintEffectNoSchedule}
)

// createNodes creates the nodes and deletes them when the test ends.
func createNodes(t *testing.T, client kubernetes.Interface, specs ...nodeSpec) {
	t.Helper()
	ctx := context.Background()
	for _, s := range specs {
		created, err := client.CoreV1().Nodes().Create(ctx, s.node(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node %s: %v", s.name, err)
		}
		// The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready on
		// create; without kube-controller-manager nobody lifts it. Set the intended taints.
		// (With kube-controller-manager running, its node controllers may write first.)
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			created.Spec.Taints = s.taints
			_, err := client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if latest, gerr := client.CoreV1().Nodes().Get(ctx, s.name, metav1.GetOptions{}); gerr == nil {
					created = latest
				}
			}
			return err
		})
		if err != nil {
			t.Fatalf("set taints of node %s: %v", s.name, err)
		}
		name := s.name
		t.Cleanup(func() {
			if err := client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete node %s: %v", name, err)
			}
		})
	}
}

// createNamespace creates a namespace for one test and deletes it (with its Pods) at the end.
func createNamespace(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		// No kubelets: remove Pods at once so that nodes of later tests start empty.
		_ = client.CoreV1().Pods(name).DeleteCollection(context.Background(), *metav1.NewDeleteOptions(0), metav1.ListOptions{})
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

type podOpt func(*v1.Pod)

func protected(p *v1.Pod) { p.Labels[v1alpha1.LabelProtected] = "true" }

func tolerations(ts ...v1.Toleration) podOpt {
	return func(p *v1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, ts...) }
}

func ownedBy(kind, name string, uid string) podOpt {
	return func(p *v1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
}

func hostPort(port int32) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: v1.ProtocolTCP})
	}
}

// app sets the Pod's app label.
func app(name string) podOpt {
	return func(p *v1.Pod) { p.Labels["app"] = name }
}

// spreadByHost spreads the Pods of the Pod's app over nodes as the scheduler's default
// constraints do (ScheduleAnyway: a score, not a filter).
func spreadByHost(p *v1.Pod) {
	p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, v1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Labels["app"]}},
	})
}

// boundTo binds the Pod to node at creation (no scheduler): it only takes room there.
func boundTo(node string) podOpt {
	return func(p *v1.Pod) { p.Spec.NodeName = node }
}

// requests sets the Pod's CPU request.
func requests(cpu string) podOpt {
	return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu) }
}

// seatHost is what the webhook writes on a Pod re-created where a seat kept room for it: the
// seat's host label and the preference for that host (policy.SeatPreferenceWeight).
func seatHost(host string) podOpt {
	return func(p *v1.Pod) {
		p.Labels[v1alpha1.LabelSeatHost] = host
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &v1.Affinity{}
		}
		if p.Spec.Affinity.NodeAffinity == nil {
			p.Spec.Affinity.NodeAffinity = &v1.NodeAffinity{}
		}
		na := p.Spec.Affinity.NodeAffinity
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, v1.PreferredSchedulingTerm{
			Weight: policy.SeatPreferenceWeight, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{host}}}}})
	}
}

// preferSpot is the stateless tier's preferred Spot affinity the webhook writes.
func preferSpot(p *v1.Pod) {
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{Weight: 100, Preference: v1.NodeSelectorTerm{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1alpha1.LabelCapacityType, Operator: v1.NodeSelectorOpIn, Values: []string{"spot"}}},
		}}},
	}}
}

func makePod(namespace, name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "demo"}},
		Spec: v1.PodSpec{
			SchedulerName: v1alpha1.SchedulerName,
			Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			}}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func createPods(t *testing.T, client kubernetes.Interface, pods ...*v1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
}

// waitBound waits until every Pod of the namespace is bound and returns node name by Pod name.
func waitBound(t *testing.T, client kubernetes.Interface, namespace string, want int) map[string]string {
	t.Helper()
	var placement map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		placement = map[string]string{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				placement[p.Name] = p.Spec.NodeName
			}
		}
		return len(placement) == want, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods bound in %s: %v (placement %v)", len(placement), want, namespace, err, placement)
	}
	return placement
}

// waitUnschedulable waits until the scheduler reported the Pod Unschedulable.
func waitUnschedulable(t *testing.T, client kubernetes.Interface, namespace, name string) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never reported Unschedulable: %v (status %+v)", namespace, name, err, pod.Status)
	}
	return pod
}

func countBy[K comparable](placement map[string]string, key func(node string) K) map[K]int {
	out := map[K]int{}
	for _, n := range placement {
		out[key(n)]++
	}
	return out
}

func nodeNames(specs []nodeSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.name)
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

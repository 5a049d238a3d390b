package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

const poolName = "pool"

func spotNotice(instanceID string, n int) string {
	return fmt.Sprintf(`{"version":"0","id":"evt-%d","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"%s","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/%s"],"detail":{"instance-id":"%s","instance-action":"terminate"}}`,
		n, time.Now().UTC().Format(time.RFC3339), instanceID, instanceID)
}

// kwokNode is a node KWOK runs, with the labels, cpu, 16 Gi and 110 pods.
func kwokNode(name string, labels map[string]string, cpu string, providerID string) *corev1.Node {
	return buildtest.Node(name, buildtest.Labels(labels), buildtest.ProviderID(providerID), buildtest.Capacity(cpu, "16Gi", "110"))
}

func (e *env) warmPool(size int, activeDuration string) *v1alpha1.WarmPool {
	d, _ := time.ParseDuration(activeDuration)
	return &v1alpha1.WarmPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: v1alpha1.WarmPoolSpec{
			Size: intstr.FromInt32(int32(size)), InstanceTypes: []string{"m5.xlarge"}, SubnetIDs: []string{"subnet-a"},
			ImageID: "ami-0lifeboat", RootVolumeGiB: 40,
			PrePull:        v1alpha1.PrePull{Policy: v1alpha1.PrePullList, Images: []string{"nginx:1.27", "redis:7"}},
			ActiveDuration: &metav1.Duration{Duration: d},
		},
	}
}

// standbyConverged: exactly size live instances, all hibernated, each with a standby Node
// showing the pre-pulled images; the WarmPool reports it.
func (e *env) standbyConverged(size int) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		var hibernated, live int
		for _, in := range e.liveInstances(poolName) {
			if in.State == cloud.StateStopped && in.StateReason == cloud.ReasonUserInitiatedHibernate {
				hibernated++
			}
			live++
		}
		nodes := e.poolNodes(ctx, poolName)
		standby := nodes[v1alpha1.NodeStateStandby]
		withImages := 0
		for i := range standby {
			if len(missing(&standby[i], "docker.io/library/nginx:1.27", "docker.io/library/redis:7")) == 0 {
				withImages++
			}
		}
		wp := &v1alpha1.WarmPool{}
		_ = e.client.Get(ctx, types.NamespacedName{Name: poolName}, wp)
		active := len(nodes[v1alpha1.NodeStateActive]) + len(nodes[v1alpha1.NodeStateDraining])
		desc := fmt.Sprintf("live %d (hibernated %d, serving %d), standby nodes %d (with images %d), status standby %d", live, hibernated, active, len(standby), withImages, wp.Status.Standby)
		return live-active == size && hibernated == size && len(standby) == size && withImages == size && wp.Status.Standby == int32(size), desc
	}
}

func missing(n *corev1.Node, want ...string) []string {
	have := map[string]bool{}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			have[name] = true
			have["docker.io/library/"+name] = true
		}
	}
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}

// TestWarmPoolLifecycle walks the whole lifecycle on one cluster: a pool of 3 converges to
// hibernated standby with images present, through 50% EC2 throttling and a hibernation that
// degrades to a stop; a crash right after RunInstances does not double an instance; an
// interruption notice delivered 5 times (plus SQS duplicates, reordered) resumes exactly the
// nodes its protected Pods need; the pool refills; at activeDuration the lifeboat nodes are
// handed off without the Deployment's ready count ever dropping, emptied and terminated.
func TestWarmPoolLifecycle(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	kube := e.cluster.Client()

	// Regular capacity: one On-Demand node (Karpenter's replacement, in effect) and one Spot node
	// that will be interrupted.
	od := kwokNode("od-1", map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelInstanceType: "m5.2xlarge", v1alpha1.LabelZone: "us-east-1b"}, "8", "aws:///us-east-1b/i-00000000000000b01")
	od.Spec.Unschedulable = true // opened for the handoff phase
	spot := kwokNode("spot-1", map[string]string{v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelInstanceType: "m5.xlarge", v1alpha1.LabelZone: "us-east-1a"}, "4", "aws:///us-east-1a/i-00000000000000a01")
	for _, n := range []*corev1.Node{od, spot} {
		if _, err := e.cluster.CreateKWOKNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	// --- Warm: faults on (50% throttling, hibernation degrades to a stop).
	e.emu.SetFaults(awsemu.Faults{EC2Throttle: 0.5, HibernationDegrades: true})
	wp := e.warmPool(3, "30s")
	wp.Spec.Pricing = &v1alpha1.Pricing{OnDemandHourly: "0.192"} // m5.xlarge; Spot and EBS prices: the defaults
	if err := e.client.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	m := e.startManager()
	e.waitFor("a degraded hibernation to be replaced", 60*time.Second, func(ctx context.Context) (bool, string) {
		n := e.emu.Calls("TerminateInstances", "")
		return n >= 1, fmt.Sprintf("terminations %d, stops %d", n, e.emu.Calls("StopInstances", ""))
	})
	e.emu.UpdateFaults(func(f *awsemu.Faults) { f.HibernationDegrades = false })
	e.waitFor("3 hibernated standby nodes with images", 90*time.Second, e.standbyConverged(3))
	if th := e.emu.Calls("DescribeInstances", "RequestLimitExceeded") + e.emu.Calls("RunInstances", "RequestLimitExceeded"); th == 0 {
		t.Errorf("throttling fault never fired")
	}

	// --- Crash right after RunInstances of a replacement: no doubled instance.
	victim := e.liveInstances(poolName)[0].ID
	runsBefore := e.emu.Calls("RunInstances", "")
	if err := e.inst.Terminate(ctx, victim); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the replacement's RunInstances", 30*time.Second, func(context.Context) (bool, string) {
		return e.emu.Calls("RunInstances", "") > runsBefore, "no launch yet"
	})
	m.stop()
	m = e.startManager()
	e.waitFor("3 standby again after the crash", 90*time.Second, e.standbyConverged(3))
	if n := len(e.liveInstances(poolName)); n != 3 {
		t.Fatalf("%d live instances after crash and restart, want 3", n)
	}
	// Cost of the hibernated cover: 3 × 40 GiB × $0.08 = $9.60 a month; as overprovisioning,
	// 3 × ($0.192 × 0.35 × 730 h + $3.20) = $156.77; now, three volumes: $9.60 / 730 h.
	e.waitFor("the pool's cost in its status", 30*time.Second, func(ctx context.Context) (bool, string) {
		got := &v1alpha1.WarmPool{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: poolName}, got); err != nil {
			return false, err.Error()
		}
		want := v1alpha1.CostStatus{Monthly: "9.60", OverprovisioningMonthly: "156.77", Hourly: "0.013"}
		return got.Status.Cost != nil && *got.Status.Cost == want, fmt.Sprintf("status.cost %+v, want %+v", got.Status.Cost, want)
	})

	// --- Interruption: two protected Pods of 3 CPU on the Spot node need two 4-CPU lifeboats.
	e.emu.SetFaults(awsemu.Faults{EC2Throttle: 0.5, SQSDuplicates: 1, SQSReorder: true})
	for i := 0; i < 2; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("protected-%d", i), Labels: map[string]string{v1alpha1.LabelProtected: "true"}},
			Spec: corev1.PodSpec{NodeName: "spot-1", Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
		}
		if _, err := kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The notice comes for Pods that run (a notice right after the bind is a unit test's case:
	// TestCacheMissesFreshPods).
	e.waitFor("the protected Pods Running", 30*time.Second, e.podsRunning("default", "protected-0", "protected-1"))
	startsBefore := e.emu.Calls("StartInstances", "")
	for i := 0; i < 5; i++ {
		if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000a01", i)); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("two lifeboat nodes active and Ready, standby taint off", 60*time.Second, func(ctx context.Context) (bool, string) {
		active := e.poolNodes(ctx, poolName)[v1alpha1.NodeStateActive]
		ready := 0
		for i := range active {
			if nodeutil.Ready(&active[i]) && !nodeutil.HasTaint(&active[i], v1alpha1.TaintStandby) && active[i].Labels[v1alpha1.LabelResumedFor] == "spot-1" {
				ready++
			}
		}
		spot := &corev1.Node{}
		_ = e.client.Get(ctx, types.NamespacedName{Name: "spot-1"}, spot)
		return ready == 2, fmt.Sprintf("active %d, ready %d; spot-1 decision %q", len(active), ready, spot.Annotations[v1alpha1.AnnotationResumeDecision])
	})
	e.waitFor("the queue to drain", 30*time.Second, func(context.Context) (bool, string) {
		d := e.emu.QueueDepth("lifeboat-interruptions")
		return d == 0, fmt.Sprintf("depth %d", d)
	})
	// One decision for the 10 deliveries: its two lifeboats are started by one StartInstances
	// call (two if that call fails for good under the throttling and each instance is started
	// on its own), and no third node is claimed.
	if starts := e.emu.Calls("StartInstances", "") - startsBefore; starts < 1 || starts > 2 {
		t.Fatalf("StartInstances succeeded %d times for 10 deliveries of one notice, want 1 (both needed nodes at once)", starts)
	}
	if boats := e.lifeboatsFor(ctx, "spot-1"); len(boats) != 2 {
		t.Fatalf("%d pool nodes claimed for spot-1, want 2", len(boats))
	}
	spotNode := &corev1.Node{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-1"}, spotNode); err != nil {
		t.Fatal(err)
	}
	if !nodeutil.HasTaint(spotNode, v1alpha1.TaintInterrupted) || strings.Count(spotNode.Annotations[v1alpha1.AnnotationResumeDecision], ",") != 1 {
		t.Fatalf("spot-1 taints %v decision %q", spotNode.Spec.Taints, spotNode.Annotations[v1alpha1.AnnotationResumeDecision])
	}
	e.waitFor("the pool to refill to 3 standby", 90*time.Second, e.standbyConverged(3))

	// --- Handoff: a protected Deployment runs on the lifeboat nodes (the toleration stands in
	// for the lifeboat scheduler, which this test does not run).
	dep := lifeboatDeployment("web", 2)
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	readyWeb := func(ctx context.Context) (ready int, onPool int) {
		pods := &corev1.PodList{}
		if err := e.client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "web"}); err != nil {
			return -1, -1
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp.IsZero() && nodeutil.PodReady(p) {
				ready++
				if strings.HasPrefix(p.Spec.NodeName, "ip-") {
					onPool++
				}
			}
		}
		return ready, onPool
	}
	e.waitFor("web Ready on the lifeboat nodes", 30*time.Second, func(ctx context.Context) (bool, string) {
		r, p := readyWeb(ctx)
		return r == 2 && p == 2, fmt.Sprintf("ready %d on pool %d", r, p)
	})
	// Karpenter's replacement capacity is there now.
	if _, err := kube.CoreV1().Nodes().Patch(ctx, "od-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Sample the ready count continuously through the handoff.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		minReady = 1 << 30
		samples  int
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			r, _ := readyWeb(sampleCtx)
			if r >= 0 && sampleCtx.Err() == nil {
				mu.Lock()
				minReady, samples = min(minReady, r), samples+1
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	e.waitFor("both lifeboat nodes handed off, emptied and terminated", 120*time.Second, func(ctx context.Context) (bool, string) {
		nodes := e.poolNodes(ctx, poolName)
		r, p := readyWeb(ctx)
		serving := len(nodes[v1alpha1.NodeStateActive]) + len(nodes[v1alpha1.NodeStateDraining])
		return serving == 0 && r == 2 && p == 0, fmt.Sprintf("active %d draining %d, web ready %d (on pool %d)", len(nodes[v1alpha1.NodeStateActive]), len(nodes[v1alpha1.NodeStateDraining]), r, p)
	})
	stopSampling()
	<-sampled
	if minReady < 2 {
		t.Fatalf("ready replicas dropped to %d during the handoff (pre-handoff 2, %d samples)", minReady, samples)
	}
	t.Logf("ready count during handoff never below %d over %d samples", minReady, samples)
	got := &appsv1.Deployment{}
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(dep), got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 2 || got.Annotations[v1alpha1.AnnotationHandoffSurge] != "" {
		t.Fatalf("deployment replicas %d annotations %v: surge not undone", *got.Spec.Replicas, got.Annotations)
	}
	e.waitFor("pool still 3 standby, nothing orphaned", 60*time.Second, func(ctx context.Context) (bool, string) {
		ok, desc := e.standbyConverged(3)(ctx)
		return ok && len(e.liveInstances(poolName)) == 3, desc
	})
}

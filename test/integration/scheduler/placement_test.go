package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboatplacement"
)

// TestPlacement runs the in-process lifeboat scheduler (manifest profile, out-of-tree
// plugins) against a real kube-apiserver with fake Nodes. Subtests run in sequence; each
// creates and removes its own nodes.
func TestPlacement(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	c := localclustertest.StartT(t, localcluster.Options{})
	client := c.Client()

	// Telemetry the controller would maintain: pool c5.xlarge/us-east-1c/spot was reclaimed
	// three times just now. Created before the scheduler so its first decisions see it.
	createTelemetry(t, client, map[string]telemetry.PoolStats{
		telemetry.PoolKey("c5.xlarge", "us-east-1c", "spot"): {Interruptions: 3, LastInterruption: time.Now()},
	})
	startScheduler(t, c.RESTConfig())

	t.Run("protected pods go to active lifeboat nodes first", func(t *testing.T) {
		ns := createNamespace(t, client, "first")
		createNodes(t, client,
			nodeSpec{name: "spot-1", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "spot-2", labels: spotLabels("m5.large", "us-east-1b")},
			nodeSpec{name: "lb-1", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}, pods: "3"},
			nodeSpec{name: "lb-2", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1b"), taints: []v1.Taint{lifeboatTaint}, pods: "3"},
		)
		// Eight evicted replicas, with the stateless tier's preferred Spot affinity: six fit
		// on the lifeboat nodes, the rest spill over onto ordinary capacity.
		for i := range 8 {
			createPods(t, client, makePod(ns, fmt.Sprintf("p%d", i), protected, preferSpot, ownedBy("ReplicaSet", "web", "uid-web")))
		}
		placement := waitBound(t, client, ns, 8)
		got := countBy(placement, func(n string) bool { return strings.HasPrefix(n, "lb-") })
		if got[true] != 6 || got[false] != 2 {
			t.Errorf("on lifeboat nodes: %d, elsewhere: %d; want 6 and 2 (placement %v)", got[true], got[false], placement)
		}
	})

	t.Run("unprotected pods never go to pool nodes, nobody to standby nodes", func(t *testing.T) {
		ns := createNamespace(t, client, "reserved")
		createNodes(t, client,
			nodeSpec{name: "ordinary", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "lb-active", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}},
			nodeSpec{name: "lb-standby", labels: poolLabels(v1alpha1.NodeStateStandby, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint, standbyTaint}},
		)
		tolerateAll := v1.Toleration{Operator: v1.TolerationOpExists}
		for i := range 6 {
			createPods(t, client, makePod(ns, fmt.Sprintf("plain%d", i)))
			createPods(t, client, makePod(ns, fmt.Sprintf("wildcard%d", i), tolerations(tolerateAll)))
		}
		for i := range 6 {
			createPods(t, client, makePod(ns, fmt.Sprintf("protected%d", i), protected, tolerations(tolerateAll)))
		}
		placement := waitBound(t, client, ns, 18)
		for pod, node := range placement {
			switch {
			case node == "lb-standby":
				t.Errorf("pod %s on the standby node", pod)
			case node == "lb-active" && !strings.HasPrefix(pod, "protected"):
				t.Errorf("unprotected pod %s on a pool node", pod)
			case strings.HasPrefix(pod, "protected") && node != "lb-active":
				t.Errorf("protected pod %s on %s, want lb-active", pod, node)
			}
		}
	})

	t.Run("nodes under interruption are never chosen", func(t *testing.T) {
		ns := createNamespace(t, client, "interrupted")
		createNodes(t, client,
			nodeSpec{name: "clean", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "disrupted", labels: spotLabels("m5.large", "us-east-1b"),
				taints: []v1.Taint{{Key: v1alpha1.TaintKarpenterDisrupted, Effect: v1.TaintEffectNoSchedule}}},
			nodeSpec{name: "interrupted", labels: spotLabels("m5.large", "us-east-1c"),
				taints: []v1.Taint{{Key: v1alpha1.TaintInterrupted, Effect: v1.TaintEffectNoSchedule}}},
			nodeSpec{name: "lb-interrupted", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1a"),
				taints: []v1.Taint{lifeboatTaint, {Key: v1alpha1.TaintKarpenterDisrupted, Effect: v1.TaintEffectNoSchedule}}},
			nodeSpec{name: "lb-draining", labels: poolLabels(v1alpha1.NodeStateDraining, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}},
		)
		// Even Pods that tolerate every taint stay off nodes under interruption.
		tolerateAll := v1.Toleration{Operator: v1.TolerationOpExists}
		for i := range 5 {
			createPods(t, client, makePod(ns, fmt.Sprintf("p%d", i), protected, tolerations(tolerateAll)))
			createPods(t, client, makePod(ns, fmt.Sprintf("u%d", i), tolerations(tolerateAll)))
		}
		for pod, node := range waitBound(t, client, ns, 10) {
			if node != "clean" {
				t.Errorf("pod %s on %s, want clean", pod, node)
			}
		}
	})

	t.Run("a pod with a seat goes to its seat's node, never to a lifeboat", func(t *testing.T) {
		ns := createNamespace(t, client, "seat")
		// The seat's node is nearly full (the room a seat kept is all that is left) and runs
		// three replicas of the StatefulSet; an empty Spot node Karpenter just launched and an
		// active lifeboat with room are the alternatives. The default scores (the replicas'
		// topology spread — the scheduler's default constraints give every StatefulSet one —,
		// least allocated) prefer the empty node over the preferred affinity the webhook writes:
		// without the narrowing to the seat's node the Pod lands there.
		createNodes(t, client,
			nodeSpec{name: "seat-node", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "fresh-node", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "lb-room", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}},
		)
		for i := range 3 {
			createPods(t, client, makePod(ns, fmt.Sprintf("resident%d", i), app("stream"), boundTo("seat-node"), requests("1200m")))
		}
		waitBound(t, client, ns, 3)
		createPods(t, client, makePod(ns, "stream-0", app("stream"), spreadByHost, protected, preferSpot, seatHost("seat-node"), ownedBy("StatefulSet", "stream", "uid-stream")))
		if node := waitBound(t, client, ns, 4)["stream-0"]; node != "seat-node" {
			t.Errorf("pod with a seat on seat-node bound to %s, want seat-node", node)
		}

		// The seat's node has no room left: the Pod goes to ordinary capacity, not to the
		// lifeboat (it would have to be handed off again).
		createPods(t, client, makePod(ns, "stream-1", app("stream"), spreadByHost, protected, preferSpot, seatHost("seat-node"), requests("1"), ownedBy("StatefulSet", "stream", "uid-stream")))
		if node := waitBound(t, client, ns, 5)["stream-1"]; node != "fresh-node" {
			t.Errorf("pod whose seat's node is full bound to %s, want fresh-node", node)
		}

		// For contrast: a protected Pod without a seat still rides the lifeboat.
		createPods(t, client, makePod(ns, "web-0", protected, preferSpot, ownedBy("ReplicaSet", "web", "uid-web")))
		if node := waitBound(t, client, ns, 6)["web-0"]; node != "lb-room" {
			t.Errorf("protected pod without a seat bound to %s, want lb-room", node)
		}
	})

	t.Run("a pod with a seat waits for its seat's release, then takes the seat's room", func(t *testing.T) {
		ns := createNamespace(t, client, "release")
		// The seat still holds the room on held-node when its Pod is re-created (the controller
		// deletes it a moment later): held-node looks full, spare-node is empty. Without the
		// wait the Pod binds to spare-node at once — and there pulls its images again, down.
		createNodes(t, client,
			nodeSpec{name: "held-node", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "spare-node", labels: spotLabels("m5.large", "us-east-1a")},
		)
		seat := makePod(ns, "lifeboat-seat-db-0", boundTo("held-node"), requests("900m"))
		seat.Labels[v1alpha1.LabelSeat] = "true"
		seat.Annotations = map[string]string{v1alpha1.AnnotationSeatFor: ns + "/db-0"}
		createPods(t, client, makePod(ns, "resident", boundTo("held-node"), requests("3")), seat)
		waitBound(t, client, ns, 2)
		createPods(t, client, makePod(ns, "db-0", protected, seatHost("held-node"), requests("900m"), ownedBy("StatefulSet", "db", "uid-db")))
		time.Sleep(2 * time.Second) // well inside the wait (5 s from the Pod's creation)
		if p := must(client.CoreV1().Pods(ns).Get(context.Background(), "db-0", metav1.GetOptions{})); p.Spec.NodeName != "" {
			t.Fatalf("pod bound to %s while its seat still held its room on held-node", p.Spec.NodeName)
		}
		if err := client.CoreV1().Pods(ns).Delete(context.Background(), seat.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if node := waitBound(t, client, ns, 2)["db-0"]; node != "held-node" {
			t.Errorf("pod bound to %s after its seat's release, want held-node", node)
		}
	})

	t.Run("replicas spread across capacity pools", func(t *testing.T) {
		ns := createNamespace(t, client, "spread")
		// Uneven pools: spreading over nodes alone (least allocated) would give 8/2/2.
		var specs []nodeSpec
		for _, p := range []struct {
			typ, zone string
			nodes     int
		}{{"m5.large", "us-east-1a", 4}, {"m5.large", "us-east-1b", 1}, {"c5.large", "us-east-1a", 1}} {
			for i := range p.nodes {
				specs = append(specs, nodeSpec{name: fmt.Sprintf("%s-%s-%d", p.typ, p.zone, i), labels: spotLabels(p.typ, p.zone)})
			}
		}
		createNodes(t, client, specs...)
		pools := poolOf(t, client, nodeNames(specs))
		for i := range 12 {
			createPods(t, client, makePod(ns, fmt.Sprintf("r%d", i), ownedBy("ReplicaSet", "spread", "uid-spread")))
		}
		got := countBy(waitBound(t, client, ns, 12), func(n string) string { return pools[n] })
		for pool, n := range got {
			if n != 4 {
				t.Errorf("pool %s holds %d replicas, want 4 (all: %v)", pool, n, got)
			}
		}
		if len(got) != 3 {
			t.Errorf("replicas in %d pools, want 3: %v", len(got), got)
		}
	})

	t.Run("a hot pool gets fewer replicas", func(t *testing.T) {
		ns := createNamespace(t, client, "hot")
		// The hot pool has the most nodes: without telemetry it would get its 4.
		var specs []nodeSpec
		for _, p := range []struct {
			typ, zone string
			nodes     int
		}{{"m5.xlarge", "us-east-1a", 1}, {"m5.xlarge", "us-east-1b", 1}, {"c5.xlarge", "us-east-1c", 4}} {
			for i := range p.nodes {
				specs = append(specs, nodeSpec{name: fmt.Sprintf("%s-%s-%d", p.typ, p.zone, i), labels: spotLabels(p.typ, p.zone)})
			}
		}
		createNodes(t, client, specs...)
		pools := poolOf(t, client, nodeNames(specs))
		for i := range 12 {
			createPods(t, client, makePod(ns, fmt.Sprintf("r%d", i), ownedBy("ReplicaSet", "hot", "uid-hot")))
		}
		got := countBy(waitBound(t, client, ns, 12), func(n string) string { return pools[n] })
		hot := telemetry.PoolKey("c5.xlarge", "us-east-1c", "spot")
		// Three fresh interruptions weigh ~3 replicas: 5/5/2.
		if got[hot] != 2 {
			t.Errorf("hot pool holds %d replicas, want 2 (all: %v)", got[hot], got)
		}
	})

	t.Run("a protected pod the lifeboat nodes cannot take after all goes elsewhere, without preemption", func(t *testing.T) {
		ns := createNamespace(t, client, "fallback")
		createNodes(t, client,
			nodeSpec{name: "fallback-ordinary", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "lb-ports", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint}},
		)
		createPods(t, client, makePod(ns, "holder", protected, hostPort(8080)))
		if node := waitBound(t, client, ns, 1)["holder"]; node != "lb-ports" {
			t.Fatalf("holder bound to %s, want lb-ports", node)
		}
		// The lifeboat node has room, so PreFilter narrows to it; NodePorts (which PreFilter
		// does not mirror) rejects it. The pod has a higher priority than the holder: had
		// DefaultPreemption run on that narrowed cycle it would evict the holder.
		createPriorityClass(t, client, "fallback-high", 10000)
		evicted := makePod(ns, "evicted", protected, hostPort(8080))
		evicted.Spec.PriorityClassName = "fallback-high"
		createPods(t, client, evicted)
		placement := waitBound(t, client, ns, 2)
		if placement["evicted"] != "fallback-ordinary" {
			t.Errorf("evicted pod bound to %s, want fallback-ordinary", placement["evicted"])
		}
		holder, err := client.CoreV1().Pods(ns).Get(context.Background(), "holder", metav1.GetOptions{})
		if err != nil || holder.DeletionTimestamp != nil || holder.Spec.NodeName != "lb-ports" {
			t.Errorf("holder preempted or moved: %v %+v", err, holder)
		}
		waitEvent(t, client, ns, "evicted", lifeboatplacement.ErrReasonRetryAllNodes)
	})

	// What the controller does once the instance resumed: state active, standby taint off —
	// in one patch, or in two (then the Pod is first rejected by LifeboatPlacement, and its
	// queueing hint must requeue it on the label change).
	activeLabel := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelState, v1alpha1.NodeStateActive)
	onlyLifeboatTaint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"default","effect":"NoSchedule"}]}}`, v1alpha1.TaintLifeboat)
	both := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}},"spec":{"taints":[{"key":%q,"value":"default","effect":"NoSchedule"}]}}`,
		v1alpha1.LabelState, v1alpha1.NodeStateActive, v1alpha1.TaintLifeboat)
	for i, activation := range []struct {
		name    string
		patches []string
	}{
		{name: "one patch", patches: []string{both}},
		{name: "standby taint off, then state active", patches: []string{onlyLifeboatTaint, activeLabel}},
	} {
		t.Run("a pending pod binds promptly when a lifeboat node turns active: "+activation.name, func(t *testing.T) {
			ns := createNamespace(t, client, fmt.Sprintf("resume-%d", i))
			lbNode := fmt.Sprintf("lb-resuming-%d", i)
			createNodes(t, client,
				nodeSpec{name: fmt.Sprintf("full-%d", i), labels: spotLabels("m5.large", "us-east-1a"), pods: "0"},
				nodeSpec{name: lbNode, labels: poolLabels(v1alpha1.NodeStateStandby, "m5.large", "us-east-1a"), taints: []v1.Taint{lifeboatTaint, standbyTaint}},
			)
			createPods(t, client, makePod(ns, "evicted", protected))
			waitUnschedulable(t, client, ns, "evicted")
			// Let the pod settle in the unschedulable queue past its back-off, as a Pod
			// waiting for resumed capacity would.
			time.Sleep(2 * time.Second)

			var activated time.Time
			for j, patch := range activation.patches {
				if j == len(activation.patches)-1 {
					activated = time.Now()
				}
				if _, err := client.CoreV1().Nodes().Patch(context.Background(), lbNode, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
				if j < len(activation.patches)-1 {
					// The intermediate state must not be enough: the node is not active yet.
					waitUnschedulableAgain(t, client, ns, "evicted")
				}
			}
			var node string
			// Generous bound: far below the 5-minute flush of unschedulable Pods, so only the
			// plugins' queueing hints can make it; docs/benchmarks/scheduler.md has the figure.
			err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				p, err := client.CoreV1().Pods(ns).Get(ctx, "evicted", metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				node = p.Spec.NodeName
				return node != "", nil
			})
			if err != nil {
				t.Fatalf("pod not bound after the node turned active: %v", err)
			}
			t.Logf("bound to %s %s after the node turned active", node, time.Since(activated).Round(time.Millisecond))
			if node != lbNode {
				t.Errorf("bound to %s, want %s", node, lbNode)
			}
		})
	}
}

// waitUnschedulableAgain waits until the scheduler retried the Pod and reported it
// Unschedulable by LifeboatPlacement (the node is not active yet), or gives up after a second:
// the retry may also still be queued, which the final bind check covers.
func waitUnschedulableAgain(t *testing.T, client kubernetes.Interface, namespace, name string) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod bound to %s before the node was active", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && strings.Contains(c.Message, lifeboatplacement.ErrReasonPoolNodeNotActive) {
				return true, nil
			}
		}
		return false, nil
	})
}

// poolOf maps node names to capacity pool keys, read back from the API.
func poolOf(t *testing.T, client kubernetes.Interface, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		node, err := client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[n] = telemetry.PoolKeyFromLabels(node.Labels)
	}
	return out
}

// createTelemetry writes the pool telemetry ConfigMap in Lifeboat's namespace.
func createTelemetry(t *testing.T, client kubernetes.Interface, pools map[string]telemetry.PoolStats) {
	t.Helper()
	ctx := context.Background()
	_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: telemetry.Namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	doc := &telemetry.Telemetry{WindowSeconds: 3600, Updated: time.Now(), Pools: pools}
	data, err := doc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: telemetry.Namespace, Name: telemetry.Name}, Data: data}
	if _, err := client.CoreV1().ConfigMaps(telemetry.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPriorityClass creates a PriorityClass for one test and deletes it at the end.
func createPriorityClass(t *testing.T, client kubernetes.Interface, name string, value int32) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The Priority admission plugin resolves classes from its informer: wait until it knows the
	// new one (a dry-run Pod naming it is admitted), or the next Pod create is refused.
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "priority-probe", Namespace: metav1.NamespaceDefault},
		Spec:       v1.PodSpec{PriorityClassName: name, Containers: []v1.Container{{Name: "c", Image: "registry.example/probe:1"}}},
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("PriorityClass %s never became visible to admission: %v", name, err)
	}
}

// waitEvent waits for an event about the Pod whose note contains text.
func waitEvent(t *testing.T, client kubernetes.Interface, namespace, pod, text string) {
	t.Helper()
	var notes []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := client.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		notes = nil
		for _, e := range events.Items {
			if e.Regarding.Name != pod {
				continue
			}
			notes = append(notes, e.Note)
			if strings.Contains(e.Note, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no event about %s/%s containing %q; events: %q", namespace, pod, text, notes)
	}
}

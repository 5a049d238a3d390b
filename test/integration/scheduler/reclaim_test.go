package scheduler

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboatplacement"
)

var interruptedTaint = v1.Taint{Key: v1alpha1.TaintInterrupted, Effect: v1.TaintEffectNoSchedule}

// TestWaitsForResumingLifeboat: a Spot pool is being reclaimed (one node has its notice) and a
// lifeboat is resuming. A protected Pod is kept off the pool's other node — it would be evicted
// again within the burst — until the lifeboat is Ready, then lands on the lifeboat. When the
// lifeboat's resume is older than reclaimedPoolWait (60 s in manifests/scheduler/config.yaml)
// by the time the wait ends, the Pod is retried and takes the pool's node after all.
func TestWaitsForResumingLifeboat(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	c := localclustertest.StartT(t, localcluster.Options{})
	client := c.Client()
	ctx := context.Background()
	startScheduler(t, c.RESTConfig())

	createNodes(t, client,
		nodeSpec{name: "spot-a1", labels: spotLabels("m5.large", "us-east-1a"), taints: []v1.Taint{interruptedTaint}},
		nodeSpec{name: "spot-a2", labels: spotLabels("m5.large", "us-east-1a")},
		nodeSpec{name: "lb-1", labels: poolLabels(v1alpha1.NodeStateActive, "m5.xlarge", "us-east-1a"), taints: []v1.Taint{lifeboatTaint, standbyTaint}},
	)
	setStartRequested(t, client, "lb-1", time.Now())

	ns := createNamespace(t, client, "reclaim-wait")
	createPods(t, client, makePod(ns, "batch-1", protected))
	pod := waitUnschedulable(t, client, ns, "batch-1")
	if msg := scheduledCondition(pod).Message; !strings.Contains(msg, lifeboatplacement.ErrReasonPoolBeingReclaimed) {
		t.Errorf("Unschedulable message %q does not say the pod waits for a lifeboat", msg)
	}

	// The activation controller sees lb-1 Ready: the standby taint goes, resumed-ready-at is set.
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationResumedReadyAt: time.Now().UTC().Format(time.RFC3339Nano)}},
		"spec":     map[string]any{"taints": []v1.Taint{lifeboatTaint}},
	}
	raw, _ := json.Marshal(patch)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-1", types.StrategicMergePatchType, raw, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := waitBound(t, client, ns, 1)["batch-1"]; got != "lb-1" {
		t.Errorf("batch-1 bound to %s, want the lifeboat lb-1", got)
	}

	// A second lifeboat, asked to start 55 s ago: the Pod waits the 5 s left, then takes spot-a2.
	createNodes(t, client, nodeSpec{name: "lb-2", labels: poolLabels(v1alpha1.NodeStateActive, "m5.xlarge", "us-east-1a"), taints: []v1.Taint{lifeboatTaint, standbyTaint}})
	setStartRequested(t, client, "lb-2", time.Now().Add(-55*time.Second))
	// lb-1 is full for the next Pod.
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ns2 := createNamespace(t, client, "reclaim-wait-ends")
	created := time.Now()
	createPods(t, client, makePod(ns2, "batch-2", protected))
	waitUnschedulable(t, client, ns2, "batch-2")
	if got := waitBound(t, client, ns2, 1)["batch-2"]; got != "spot-a2" {
		t.Errorf("batch-2 bound to %s after the wait, want spot-a2", got)
	}
	if waited := time.Since(created); waited < 3*time.Second {
		t.Errorf("batch-2 bound %s after its creation, before the lifeboat's wait ended", waited)
	}
}

func setStartRequested(t *testing.T, client kubernetes.Interface, node string, at time.Time) {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationStartRequestedAt: at.UTC().Format(time.RFC3339Nano)}}})
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, raw, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scheduledCondition(p *v1.Pod) v1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return c
		}
	}
	return v1.PodCondition{}
}

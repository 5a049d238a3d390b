package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func statusDyn(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{warmPoolGVR: "WarmPoolList", nodePoolGVR: "NodePoolList", reclaimBackPolicyGVR: "ReclaimBackPolicyList"}, objs...)
}

func TestStatusEmptyCluster(t *testing.T) {
	var out bytes.Buffer
	if err := printStatus(context.Background(), &out, fake.NewClientset(), statusDyn(), time.Hour); err != nil {
		t.Fatal(err)
	}
	golden(t, "status-empty.golden", out.String())
}

func TestStatus(t *testing.T) {
	now := time.Now()
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "lifeboat.dev/v1alpha1", "kind": "WarmPool", "metadata": map[string]any{"name": "default"},
		"status": map[string]any{"desired": int64(4), "standby": int64(3), "warming": int64(1),
			"cost":       map[string]any{"monthly": "12.80", "overprovisioningMonthly": "209.02", "hourly": "0.018"},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Converged", "message": "", "lastTransitionTime": now.UTC().Format(time.RFC3339)}}},
	}}
	nodePool := func(name string, capacityTypes ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"nodeClassRef": map[string]any{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
				"requirements": []any{map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacityTypes}}}}},
		}}
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}
	max20 := intstr.FromString("20%")
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1", Labels: map[string]string{"lifeboat.dev/pool": "default", "lifeboat.dev/state": "standby",
			"node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "us-east-1a"}}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "od-fallback", Labels: map[string]string{"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "od-pinned", Labels: map[string]string{"karpenter.sh/nodepool": "on-demand", "karpenter.sh/capacity-type": "on-demand"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{"lifeboat.dev/tier": "stateless"}}, Spec: corev1.PodSpec{NodeName: "od-fallback"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-2"}, Spec: corev1.PodSpec{NodeName: "od-fallback"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-1"}, Spec: corev1.PodSpec{NodeName: "od-pinned"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"lifeboat.dev/spot": "protected"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "opted-out", Labels: map[string]string{"lifeboat.dev/spot": "off"}}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ledger"}, Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ledger"}}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "api", Labels: map[string]string{"lifeboat.dev/spot": "protected", "lifeboat.dev/tier": "critical"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "unprotected"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-lifeboat"}, Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &max20, Selector: sel}},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e1"}, Reason: "SpotInterrupted", Message: "Spot interruption warning",
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "spot-1"}, LastTimestamp: metav1.NewTime(now.Add(-10 * time.Minute))},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2"}, Reason: "Resumed", Message: "resumed i-0123 for spot-1",
			Source: corev1.EventSource{Component: "lifeboat-controller"}, InvolvedObject: corev1.ObjectReference{Kind: "WarmPool", Name: "default"}, LastTimestamp: metav1.NewTime(now.Add(-9 * time.Minute))},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"}, Reason: "SpotInterrupted", Message: "too old",
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "spot-0"}, LastTimestamp: metav1.NewTime(now.Add(-3 * time.Hour))},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chatter"}, Reason: "Scheduled", Message: "scheduling chatter",
			Source: corev1.EventSource{Component: "lifeboat-scheduler"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "spot-1"}, LastTimestamp: metav1.NewTime(now)},
	)
	var out bytes.Buffer
	if err := printStatus(context.Background(), &out, client, statusDyn(pool, nodePool("default", "spot", "on-demand"), nodePool("on-demand", "on-demand")), time.Hour); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(strings.ReplaceAll(out.String(), "\n", " ¶ ")), " ") // columns aligned by tabwriter: compare words
	for _, want := range []string{
		"default 4 3 1 0 0 True never $12.80 $209.02 (pool is 0.06×)",
		"lb-1 default standby m5.xlarge us-east-1a True ¶",
		"shop/deployment/web stateless web-lifeboat",
		"shop/statefulset/ledger checkpointed MISSING — lifeboat pdb statefulset/ledger -n shop",
		"other/deployment/api critical MISSING",
		"SpotInterrupted Node/spot-1 Spot interruption warning",
		"Resumed WarmPool/default resumed i-0123 for spot-1",
		"od-fallback default 2 yes ¶",
		"od-pinned on-demand - no: NodePool on-demand does not allow Spot ¶",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"opted-out", "unprotected", "too old", "scheduling chatter", "¶ spot-1 "} {
		if strings.Contains(got, not) {
			t.Errorf("status shows %q:\n%s", not, got)
		}
	}
}

func TestCostColumns(t *testing.T) {
	tests := []struct {
		name           string
		cost           *v1alpha1.CostStatus
		monthly, other string
	}{
		{name: "not estimated yet", monthly: "-", other: "-"},
		{name: "both", cost: &v1alpha1.CostStatus{Monthly: "12.80", OverprovisioningMonthly: "209.02"}, monthly: "$12.80", other: "$209.02 (pool is 0.06×)"},
		{name: "no On-Demand price", cost: &v1alpha1.CostStatus{Monthly: "12.80"}, monthly: "$12.80", other: "- (set --on-demand-hourly-price or spec.pricing)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, o := costColumns(tt.cost)
			if m != tt.monthly || o != tt.other {
				t.Errorf("costColumns = %q, %q; want %q, %q", m, o, tt.monthly, tt.other)
			}
		})
	}
}

package pod

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/internal/fixture"
	"github.com/lifeboat-k8s/lifeboat/webhooks/webhookmetrics"
)

// apply applies a response's patch to the request's object, as the apiserver does.
func apply(t *testing.T, req admission.Request, resp admission.Response) *corev1.Pod {
	t.Helper()
	raw := req.Object.Raw
	if len(resp.Patches) > 0 {
		ops, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatalf("decode patch: %v", err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("apply patch %s: %v", ops, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

func TestMutatorProtectsAndIsIdempotent(t *testing.T) {
	// A lifeboat is active: the Pod also goes to the lifeboat scheduler (TestMutatorSchedulerRouting).
	m := &Mutator{Config: policy.DefaultConfig(), Cluster: fixture.Cluster(fixture.PoolNode("lifeboat-1", v1alpha1.NodeStateActive))}
	req := fixture.PodRequest(fixture.WebPod())
	resp := m.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("want a patch, got %+v", resp)
	}
	if d := webhookmetrics.Decision(resp); d != webhookmetrics.DecisionMutated {
		t.Errorf("decision %s, want mutated", d)
	}
	got := apply(t, req, resp)

	want := fixture.WebPod()
	want.Labels[v1alpha1.LabelProtected] = "true"
	want.Labels[v1alpha1.LabelTier] = "stateless"
	want.Spec.SchedulerName = v1alpha1.SchedulerName
	want.Spec.PriorityClassName = v1alpha1.PriorityClassStateless
	want.Spec.Priority = ptr.To(v1alpha1.PriorityStateless)
	want.Spec.Tolerations = append(want.Spec.Tolerations, corev1.Toleration{Key: v1alpha1.TaintSpot, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	want.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight:     policy.SpotPreferenceWeight,
		Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}},
	}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mutated Pod (-want +got):\n%s", diff)
	}

	// Reinvocation: the mutated Pod comes back; nothing more to change.
	again := m.Handle(context.Background(), fixture.PodRequest(got))
	if !again.Allowed || len(again.Patches) != 0 {
		t.Errorf("second pass patched again: %+v", again.Patches)
	}
}

// The lifeboat scheduler gets a protected Pod only while a lifeboat node is active, unless the
// routing is Always.
func TestMutatorSchedulerRouting(t *testing.T) {
	always := policy.DefaultConfig()
	always.SchedulerRouting = policy.RouteAlways
	tests := []struct {
		name   string
		config policy.Config
		nodes  []client.Object
		want   string
	}{
		{"no pool node", policy.DefaultConfig(), nil, corev1.DefaultSchedulerName},
		{"pool nodes in standby and warming", policy.DefaultConfig(), []client.Object{fixture.PoolNode("a", v1alpha1.NodeStateStandby), fixture.PoolNode("b", v1alpha1.NodeStateWarming)}, corev1.DefaultSchedulerName},
		{"a draining lifeboat only", policy.DefaultConfig(), []client.Object{fixture.PoolNode("a", v1alpha1.NodeStateDraining)}, corev1.DefaultSchedulerName},
		{"an active lifeboat", policy.DefaultConfig(), []client.Object{fixture.PoolNode("a", v1alpha1.NodeStateStandby), fixture.PoolNode("b", v1alpha1.NodeStateActive)}, v1alpha1.SchedulerName},
		{"active label on a Node of no pool", policy.DefaultConfig(), []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{v1alpha1.LabelState: "active"}}}}, corev1.DefaultSchedulerName},
		{"always", always, nil, v1alpha1.SchedulerName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Mutator{Config: tt.config, Cluster: fixture.Cluster(tt.nodes...)}
			req := fixture.PodRequest(fixture.WebPod())
			resp := m.Handle(context.Background(), req)
			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("want a patch, got %+v", resp)
			}
			got := apply(t, req, resp)
			if got.Spec.SchedulerName != tt.want {
				t.Errorf("schedulerName %q, want %q", got.Spec.SchedulerName, tt.want)
			}
			if got.Labels[v1alpha1.LabelProtected] != "true" {
				t.Errorf("not protected: %v", got.Labels)
			}
		})
	}
}

func TestMutatorPrefersSeatNode(t *testing.T) {
	now := time.Now()
	rec := func(entries map[string]policy.SeatEntry) string { return policy.SeatRecord(entries).String() }
	withSeats := func(name string, st v1alpha1.NodeState, record string) *corev1.Node {
		n := fixture.PoolNode(name, st)
		n.Annotations = map[string]string{v1alpha1.AnnotationSeats: record}
		return n
	}
	bridgeSeats := func(name string, st v1alpha1.NodeState, record string) *corev1.Node {
		n := fixture.PoolNode(name, st)
		n.Annotations = map[string]string{v1alpha1.AnnotationBridgeSeats: record}
		return n
	}
	key := fixture.Namespace + "/web-0"
	fresh := func(host string) policy.SeatEntry {
		return policy.SeatEntry{Host: host, At: now.Add(-30 * time.Second)}
	}
	tests := []struct {
		name  string
		nodes []client.Object
		want  string // the preferred hostname, "" for none
	}{
		{"no lifeboat", nil, ""},
		{"a draining lifeboat kept its seat on host-1", []client.Object{withSeats("lb-1", v1alpha1.NodeStateDraining, rec(map[string]policy.SeatEntry{key: fresh("host-1")}))}, "host-1"},
		{"another Pod's seat", []client.Object{withSeats("lb-1", v1alpha1.NodeStateDraining, rec(map[string]policy.SeatEntry{fixture.Namespace + "/web-1": fresh("host-1")}))}, ""},
		{"the lifeboat was emptied and recycled before the replacement came", []client.Object{withSeats("lb-1", v1alpha1.NodeStateWarming, rec(map[string]policy.SeatEntry{key: fresh("host-1")}))}, "host-1"},
		{"a past handoff's entry", []client.Object{withSeats("lb-1", v1alpha1.NodeStateStandby, rec(map[string]policy.SeatEntry{key: {Host: "host-1", At: now.Add(-policy.SeatRecordTTL - time.Minute)}}))}, ""},
		{"a malformed record is skipped", []client.Object{withSeats("lb-1", v1alpha1.NodeStateDraining, `{oops`), withSeats("lb-2", v1alpha1.NodeStateDraining, rec(map[string]policy.SeatEntry{key: fresh("host-2")}))}, "host-2"},
		{"the bridge moved it straight to its seat on host-3", []client.Object{bridgeSeats("lb-1", v1alpha1.NodeStateActive, rec(map[string]policy.SeatEntry{key: fresh("host-3")}))}, "host-3"},
		// A Pod moved straight to its seat whose replacement still landed on a lifeboat later
		// gets a seat from the lifeboat's handoff: the newer record counts, wherever it is.
		{"the newest record wins", []client.Object{
			withSeats("lb-2", v1alpha1.NodeStateDraining, rec(map[string]policy.SeatEntry{key: {Host: "host-4", At: now.Add(-5 * time.Second)}})),
			bridgeSeats("lb-1", v1alpha1.NodeStateActive, rec(map[string]policy.SeatEntry{key: fresh("host-3")}))}, "host-4"},
		{"the newest record wins, the other way round", []client.Object{
			withSeats("lb-2", v1alpha1.NodeStateDraining, rec(map[string]policy.SeatEntry{key: fresh("host-4")})),
			bridgeSeats("lb-1", v1alpha1.NodeStateActive, rec(map[string]policy.SeatEntry{key: {Host: "host-3", At: now.Add(-5 * time.Second)}}))}, "host-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := fixture.Cluster(tt.nodes...)
			cluster.Now = func() time.Time { return now }
			m := &Mutator{Config: policy.DefaultConfig(), Cluster: cluster}
			pod := fixture.WebPod()
			pod.Name, pod.GenerateName = "web-0", ""
			req := fixture.PodRequest(pod)
			resp := m.Handle(context.Background(), req)
			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("want a patch, got %+v", resp)
			}
			got := apply(t, req, resp)
			var hosts []string
			for _, term := range got.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				for _, e := range term.Preference.MatchExpressions {
					if e.Key == corev1.LabelHostname {
						hosts = append(hosts, e.Values...)
					}
				}
			}
			switch {
			case tt.want == "" && len(hosts) != 0:
				t.Errorf("preferred hosts %v, want none", hosts)
			case tt.want != "" && (len(hosts) != 1 || hosts[0] != tt.want):
				t.Errorf("preferred hosts %v, want [%s]", hosts, tt.want)
			}
			if host := got.Labels[v1alpha1.LabelSeatHost]; host != tt.want {
				t.Errorf("label %s = %q, want %q", v1alpha1.LabelSeatHost, host, tt.want)
			}
			if tt.want != "" && got.Spec.SchedulerName != v1alpha1.SchedulerName {
				t.Errorf("schedulerName %q, want %q: the lifeboat scheduler binds a Pod to its seat's node", got.Spec.SchedulerName, v1alpha1.SchedulerName)
			}
			if got.Labels[v1alpha1.LabelProtected] != "true" {
				t.Errorf("not protected: %v", got.Labels)
			}
		})
	}
}

func TestMutatorLeavesAlone(t *testing.T) {
	m := &Mutator{Config: policy.DefaultConfig(), Cluster: fixture.Cluster()}
	optOut := fixture.Cluster(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	tests := []struct {
		name   string
		m      *Mutator
		req    func() admission.Request
		reason string
	}{
		{name: "kube-system", m: m, req: func() admission.Request {
			p := fixture.WebPod()
			p.Namespace = "kube-system"
			return fixture.PodRequest(p)
		}, reason: "never touched"},
		{name: "bare pod", m: m, req: func() admission.Request {
			p := fixture.WebPod()
			p.OwnerReferences = nil
			return fixture.PodRequest(p)
		}, reason: "no Deployment"},
		{name: "namespace without label", m: &Mutator{Config: policy.DefaultConfig(), Cluster: optOut}, req: func() admission.Request {
			p := fixture.WebPod()
			p.Namespace = "plain"
			p.OwnerReferences = nil
			return fixture.PodRequest(p)
		}, reason: "no Deployment"},
		{name: "update", m: m, req: func() admission.Request {
			r := fixture.PodRequest(fixture.WebPod())
			r.Operation = admissionv1.Update
			return r
		}, reason: "not a Pod creation"},
		{name: "subresource", m: m, req: func() admission.Request {
			r := fixture.PodRequest(fixture.WebPod())
			r.SubResource = "ephemeralcontainers"
			return r
		}, reason: "not a Pod creation"},
		{name: "pod without PDB", m: m, req: func() admission.Request {
			p := fixture.WebPod()
			p.Labels = map[string]string{"app": "other"}
			return fixture.PodRequest(p)
		}, reason: "no PodDisruptionBudget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.m.Handle(context.Background(), tt.req())
			if !resp.Allowed || len(resp.Patches) != 0 {
				t.Fatalf("want admitted unchanged, got %+v", resp)
			}
			if resp.Result == nil || !strings.Contains(resp.Result.Message, tt.reason) {
				t.Errorf("reason %v, want %q", resp.Result, tt.reason)
			}
		})
	}
}

func TestMutatorFailsOpen(t *testing.T) {
	m := &Mutator{Config: policy.DefaultConfig(), Cluster: fixture.Cluster()}
	p := fixture.WebPod()
	p.OwnerReferences[0].Name = "web-not-in-cache"
	resp := m.Handle(context.Background(), fixture.PodRequest(p))
	if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != 1 {
		t.Fatalf("want admitted unchanged with a warning, got %+v", resp)
	}
	if d := webhookmetrics.Decision(resp); d != webhookmetrics.DecisionError {
		t.Errorf("decision %s, want error", d)
	}

	bad := fixture.PodRequest(fixture.WebPod())
	bad.Object.Raw = []byte(`{"spec": 7}`)
	if resp := m.Handle(context.Background(), bad); resp.Allowed || resp.Result.Code != http.StatusBadRequest {
		t.Errorf("malformed Pod: want 400, got %+v", resp)
	}
}

func TestPatchEscapesLabelKeys(t *testing.T) {
	before := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}
	after := before.DeepCopy()
	after.Labels["lifeboat.dev/tier"] = "critical"
	after.Labels["x~y"] = "z"
	ops := Patch(before, after)
	if len(ops) != 2 || ops[0].Path != "/metadata/labels/lifeboat.dev~1tier" || ops[1].Path != "/metadata/labels/x~0y" {
		t.Errorf("ops = %+v", ops)
	}
}

// decodePod reads only the fields the decision and the patch use; a Pod decoded in full and one
// decoded by decodePod must mutate to the same patch.
func TestDecodePodKeepsAdmittedFields(t *testing.T) {
	full := fixture.WebPod()
	full.GenerateName = "web-"
	full.Spec.SchedulerName = "default-scheduler"
	full.Spec.PriorityClassName = "user-class"
	full.Spec.Priority = ptr.To[int32](7)
	full.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	full.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}}
	full.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePod(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != full.Name || got.GenerateName != full.GenerateName || got.Namespace != full.Namespace {
		t.Errorf("metadata: got %s/%s (%s), want %s/%s (%s)", got.Namespace, got.Name, got.GenerateName, full.Namespace, full.Name, full.GenerateName)
	}
	if d := cmp.Diff(full.Labels, got.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if d := cmp.Diff(full.OwnerReferences, got.OwnerReferences); d != "" {
		t.Errorf("owner references (-want +got):\n%s", d)
	}
	cfg := policy.DefaultConfig()
	placement := policy.Placement{Tier: v1alpha1.TierStateless, TierClass: &policy.PriorityClass{Name: v1alpha1.PriorityClassStateless, Value: v1alpha1.PriorityStateless}}
	patchOf := func(p *corev1.Pod) []byte {
		after := p.DeepCopy()
		cfg.ApplyPlacement(after, placement)
		b, err := json.Marshal(Patch(p, after))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if want, got := patchOf(full), patchOf(got); string(want) != string(got) {
		t.Errorf("patch from the partial decode differs:\nwant %s\ngot  %s", want, got)
	}
	if _, err := decodePod([]byte(`{"metadata":{"labels":[]}}`)); err == nil {
		t.Error("want an error for labels that are not a map")
	}
}

// realisticPod is a Pod as a Deployment of a typical service creates it (three containers with
// environment, probes, resources and mounts), encoded as the apiserver sends it.
func realisticPod(b *testing.B) []byte {
	b.Helper()
	p := fixture.WebPod()
	p.APIVersion, p.Kind = "v1", "Pod"
	p.Annotations = map[string]string{"prometheus.io/scrape": "true", "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
	p.Spec.Containers = nil
	for i := range 3 {
		c := corev1.Container{
			Name: fmt.Sprintf("c%d", i), Image: "registry.example.com/team/app:v1.2.3", Args: []string{"--port=8080", "--log-level=info"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			ReadinessProbe:         &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 5},
			VolumeMounts:           []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
		}
		for j := range 8 {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("ENV_%d", j), Value: "some-value-of-moderate-length"})
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	raw, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkDecodePod compares decoding the whole Pod with decoding the fields the mutation uses.
func BenchmarkDecodePod(b *testing.B) {
	raw := realisticPod(b)
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p corev1.Pod
			if err := json.Unmarshal(raw, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("admitted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePod(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

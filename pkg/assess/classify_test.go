package assess

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

// spec is a healthy 3-replica Deployment: ready, unless a case changes it.
func spec(mut ...func(*Spec)) Spec {
	s := Spec{Kind: "Deployment", Namespace: "shop", Name: "web", Replicas: ptr(int32(3)),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/web:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}},
		PDBs: []*policyv1.PodDisruptionBudget{pdb("web", intstr.FromString("20%"))}}
	for _, m := range mut {
		m(&s)
	}
	return s
}

func pdb(name string, maxUnavailable intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
}

func job(deadline time.Duration, mut ...func(*Spec)) Spec {
	s := spec(func(s *Spec) {
		s.Kind, s.Name, s.Replicas, s.PDBs, s.ActiveDeadline = "Job", "train", nil, nil, deadline
		s.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	})
	for _, m := range mut {
		m(&s)
	}
	return s
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      Spec
		class     Class
		reasons   string // codes, comma-separated, in report order
		fixHas    string // a piece of the first reason's fix
		tier      string
		protected bool
	}{
		{name: "healthy Deployment", spec: spec(), class: ClassReady, tier: "stateless"},
		{name: "protected by namespace", spec: spec(func(s *Spec) { s.NamespaceLabels = map[string]string{"lifeboat.dev/spot": "protected"} }),
			class: ClassReady, tier: "stateless", protected: true},
		{name: "tier label wins", spec: spec(func(s *Spec) { s.Template.Labels["lifeboat.dev/tier"] = "critical" }), class: ClassReady, tier: "critical"},
		{name: "no PDB: the fix is the PDB lifeboat pdb prints", spec: spec(func(s *Spec) { s.PDBs = nil }),
			class: ClassReadyWithChanges, reasons: "missing-pdb", fixHas: "maxUnavailable: 20%\n", tier: "stateless"},
		{name: "PDB that allows no disruption", spec: spec(func(s *Spec) { s.PDBs = []*policyv1.PodDisruptionBudget{pdb("web", intstr.FromInt32(0))} }),
			class: ClassReadyWithChanges, reasons: "pdb-allows-no-disruption", fixHas: "maxUnavailable: 20%", tier: "stateless"},
		{name: "minAvailable 100%", spec: spec(func(s *Spec) {
			p := pdb("web", intstr.FromInt32(1))
			p.Spec.MaxUnavailable, p.Spec.MinAvailable = nil, ptr(intstr.FromString("100%"))
			s.PDBs = []*policyv1.PodDisruptionBudget{p}
		}), class: ClassReadyWithChanges, reasons: "pdb-allows-no-disruption", tier: "stateless"},
		{name: "two PDBs", spec: spec(func(s *Spec) { s.PDBs = append(s.PDBs, pdb("web-2", intstr.FromInt32(1))) }),
			class: ClassReadyWithChanges, reasons: "multiple-pdbs", tier: "stateless"},
		{name: "one replica", spec: spec(func(s *Spec) { s.Replicas = ptr(int32(1)) }), class: ClassReadyWithChanges, reasons: "single-replica", fixHas: "at least 2", tier: "stateless"},
		{name: "nil replicas is one", spec: spec(func(s *Spec) { s.Replicas = nil }), class: ClassReadyWithChanges, reasons: "single-replica", tier: "stateless"},
		{name: "grace period 200 s", spec: spec(func(s *Spec) { s.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(200)) }),
			class: ClassReadyWithChanges, reasons: "shutdown-over-notice", fixHas: "at most 120", tier: "stateless"},
		{name: "grace 120 s is within the notice", spec: spec(func(s *Spec) { s.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(120)) }), class: ClassReady, tier: "stateless"},
		{name: "preStop sleep 150", spec: spec(func(s *Spec) {
			s.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 150"}}}}
		}), class: ClassReadyWithChanges, reasons: "shutdown-over-notice", tier: "stateless"},
		{name: "no requests", spec: spec(func(s *Spec) { s.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{} }),
			class: ClassReadyWithChanges, reasons: "missing-requests", tier: "stateless"},
		{name: "emptyDir", spec: spec(func(s *Spec) {
			s.Template.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}), class: ClassReadyWithChanges, reasons: "emptydir", fixHas: `safe-to-evict-local-volumes: "cache"`, tier: "stateless"},
		{name: "emptyDir declared scratch", spec: spec(func(s *Spec) {
			s.Template.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			s.Template.Annotations = map[string]string{AnnotationSafeToEvictLocalVolumes: "tmp"}
		}), class: ClassReady, tier: "stateless"},
		{name: "hostPath", spec: spec(func(s *Spec) {
			s.Template.Spec.Volumes = []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}}}
		}), class: ClassReadyWithChanges, reasons: "hostpath", tier: "stateless"},
		{name: "local PersistentVolume", spec: spec(func(s *Spec) { s.LocalVolumes = []string{"data"} }), class: ClassPoorFit, reasons: "local-volume", tier: "stateless"},
		{name: "do-not-disrupt", spec: spec(func(s *Spec) { s.Template.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"} }),
			class: ClassReadyWithChanges, reasons: "do-not-disrupt", tier: "stateless"},
		{name: "nodeSelector on-demand", spec: spec(func(s *Spec) {
			s.Template.Spec.NodeSelector = map[string]string{"karpenter.sh/capacity-type": "on-demand"}
		}),
			class: ClassReadyWithChanges, reasons: "pinned-on-demand", tier: "stateless"},
		{name: "EKS managed node group ON_DEMAND", spec: spec(func(s *Spec) { s.Template.Spec.NodeSelector = map[string]string{LabelEKSCapacityType: "ON_DEMAND"} }),
			class: ClassReadyWithChanges, reasons: "pinned-on-demand", tier: "stateless"},
		{name: "required affinity NotIn spot", spec: spec(func(s *Spec) { s.Template.Spec.Affinity = capacityAffinity(corev1.NodeSelectorOpNotIn, "spot") }),
			class: ClassReadyWithChanges, reasons: "pinned-on-demand", tier: "stateless"},
		{name: "required affinity that allows spot is not pinned", spec: spec(func(s *Spec) {
			s.Template.Spec.Affinity = capacityAffinity(corev1.NodeSelectorOpIn, "spot", "on-demand")
		}),
			class: ClassReady, tier: "stateless"},
		{name: "quorum StatefulSet", spec: spec(func(s *Spec) { s.Kind, s.VolumeClaimTemplates = "StatefulSet", 1 }),
			class: ClassPoorFit, reasons: "quorum-like", fixHas: "tier=critical", tier: "checkpointed"},
		{name: "quorum StatefulSet of postgres names its image", spec: spec(func(s *Spec) {
			s.Kind, s.VolumeClaimTemplates = "StatefulSet", 1
			s.Template.Spec.Containers[0].Image = "postgres:16"
		}), class: ClassPoorFit, reasons: "quorum-like", tier: "checkpointed"},
		{name: "even StatefulSet with volumes", spec: spec(func(s *Spec) { s.Kind, s.VolumeClaimTemplates, s.Replicas = "StatefulSet", 1, ptr(int32(4)) }),
			class: ClassCheckpointNeeded, reasons: "stateful-volumes", tier: "checkpointed"},
		{name: "StatefulSet without volumes", spec: spec(func(s *Spec) { s.Kind = "StatefulSet" }), class: ClassReady, tier: "checkpointed"},
		{name: "database image in a Deployment", spec: spec(func(s *Spec) { s.Template.Spec.Containers[0].Image = "docker.io/bitnami/mongodb:7@sha256:abc" }),
			class: ClassPoorFit, reasons: "database", tier: "stateless"},
		{name: "a database's exporter is not a database", spec: spec(func(s *Spec) {
			s.Template.Spec.Containers[0].Image = "quay.io/prometheuscommunity/postgres-exporter:v0.15"
		}),
			class: ClassReady, tier: "stateless"},
		{name: "an operator is not a database", spec: spec(func(s *Spec) { s.Template.Spec.Containers[0].Image = "ghcr.io/cloudnative-pg/postgres-operator:1.24" }),
			class: ClassReady, tier: "stateless"},
		{name: "a Job with a database image is a client", spec: job(0, func(s *Spec) { s.Template.Spec.Containers[0].Image = "postgres:16" }), class: ClassReady, tier: "best-effort"},
		{name: "redis in a Deployment is a cache", spec: spec(func(s *Spec) { s.Template.Spec.Containers[0].Image = "redis:7" }), class: ClassReady, tier: "stateless"},
		{name: "redis in a StatefulSet is a database", spec: spec(func(s *Spec) { s.Kind = "StatefulSet"; s.Template.Spec.Containers[0].Image = "redis:7" }),
			class: ClassPoorFit, reasons: "database", tier: "checkpointed"},
		{name: "database label", spec: spec(func(s *Spec) { s.Labels = map[string]string{"app.kubernetes.io/component": "database"} }),
			class: ClassPoorFit, reasons: "database", tier: "stateless"},
		{name: "short Job", spec: job(5 * time.Minute), class: ClassReady, tier: "best-effort"},
		{name: "long Job without checkpoint", spec: job(2 * time.Hour), class: ClassCheckpointNeeded, reasons: "long-running-job", tier: "best-effort"},
		{name: "long-running observed", spec: job(0, func(s *Spec) { s.LongestRun = 45 * time.Minute }), class: ClassCheckpointNeeded, reasons: "long-running-job", tier: "best-effort"},
		{name: "long Job with a checkpoint env", spec: job(2*time.Hour, func(s *Spec) {
			s.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CHECKPOINT_DIR", Value: "/ckpt"}}
		}), class: ClassReady, tier: "best-effort"},
		{name: "long Job labelled checkpointed", spec: job(2*time.Hour, func(s *Spec) { s.Labels = map[string]string{"lifeboat.dev/tier": "checkpointed"} }),
			class: ClassReady, tier: "checkpointed"},
		{name: "Jobs need no PDB nor replicas", spec: job(0, func(s *Spec) { s.Replicas = ptr(int32(1)) }), class: ClassReady, tier: "best-effort"},
		{name: "CronJob long", spec: job(time.Hour, func(s *Spec) { s.Kind = "CronJob" }), class: ClassCheckpointNeeded, reasons: "long-running-job", tier: "best-effort"},
		{name: "bare Pod", spec: spec(func(s *Spec) { s.Kind, s.PDBs = KindPod, nil }), class: ClassReadyWithChanges, reasons: "no-controller"},
		{name: "orphan ReplicaSet", spec: spec(func(s *Spec) { s.Kind = KindReplicaSet }), class: ClassReadyWithChanges, reasons: "orphan-replicaset"},
		{name: "Argo Rollout: fit, but not protected by Lifeboat", spec: spec(func(s *Spec) { s.Kind = KindRollout }), class: ClassReady, reasons: "lifeboat-unsupported-kind"},
		{name: "Rollout without PDB", spec: spec(func(s *Spec) { s.Kind, s.PDBs = KindRollout, nil }), class: ClassReadyWithChanges, reasons: "missing-pdb,lifeboat-unsupported-kind"},
		{name: "system namespace: exempt, never protected", spec: spec(func(s *Spec) {
			s.Namespace, s.NamespaceLabels = "kube-system", map[string]string{"lifeboat.dev/spot": "protected"}
		}), class: ClassReady, tier: "stateless"},
		{name: "several reasons: the hardest decides, listed first", spec: spec(func(s *Spec) {
			s.PDBs, s.Replicas, s.LocalVolumes = nil, ptr(int32(1)), []string{"data"}
		}), class: ClassPoorFit, reasons: "local-volume,missing-pdb,single-replica", tier: "stateless"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.spec, 120*time.Second)
			var codes []string
			for _, r := range v.Reasons {
				codes = append(codes, string(r.Code))
				if r.Message == "" || r.Fix == "" {
					t.Errorf("reason %s without message or fix: %+v", r.Code, r)
				}
			}
			if v.Class != tc.class || strings.Join(codes, ",") != tc.reasons {
				t.Errorf("got %s %v, want %s [%s]", v.Class, codes, tc.class, tc.reasons)
			}
			if tc.fixHas != "" && (len(v.Reasons) == 0 || !strings.Contains(v.Reasons[0].Fix, tc.fixHas)) {
				t.Errorf("fix %q lacks %q", v.Reasons[0].Fix, tc.fixHas)
			}
			if v.Tier != tc.tier || v.Protected != tc.protected {
				t.Errorf("tier %q protected %v, want %q %v", v.Tier, v.Protected, tc.tier, tc.protected)
			}
		})
	}
}

func capacityAffinity(op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "karpenter.sh/capacity-type", Operator: op, Values: values}}}}}}}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"postgres": "postgres", "postgres:16": "postgres", "docker.io/bitnami/postgresql:16.1": "postgresql",
		"registry:5000/team/app@sha256:abc": "app", "ghcr.io/org/redis-exporter:1": "redis-exporter",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}

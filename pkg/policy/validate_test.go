package policy

import (
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func pdb(name string, sel map[string]string, maxUnavailable, minAvailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}}
	if sel != nil {
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	p.Spec.MaxUnavailable = maxUnavailable
	p.Spec.MinAvailable = minAvailable
	return p
}

func ios(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
func ioi(i int) *intstr.IntOrString    { v := intstr.FromInt32(int32(i)); return &v }

func TestValidateWorkload(t *testing.T) {
	c := DefaultConfig()
	web := map[string]string{"app": "web"}
	protectedNS := map[string]string{v1alpha1.LabelSpot: "protected"}
	warnNS := map[string]string{v1alpha1.LabelSpot: "protected", v1alpha1.LabelPDBMode: "warn"}
	good := pdb("web", web, ios("20%"), nil)
	base := func(kind Kind, ns map[string]string, pdbs ...*policyv1.PodDisruptionBudget) WorkloadInput {
		return WorkloadInput{
			Kind: kind, Namespace: "app", Name: "web", NamespaceLabels: ns,
			Selector: &metav1.LabelSelector{MatchLabels: web}, Replicas: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: web}},
			PDBs:     pdbs,
		}
	}
	tests := []struct {
		name       string
		in         WorkloadInput
		allowed    bool
		missingPDB bool
		warnings   []string // substrings, one per expected warning
	}{
		{name: "unprotected", in: base(KindDeployment, nil), allowed: true},
		{name: "enforce, no PDB: denied", in: base(KindDeployment, protectedNS), allowed: false, missingPDB: true},
		{name: "enforce, statefulset, no PDB: denied", in: base(KindStatefulSet, protectedNS), allowed: false, missingPDB: true},
		{name: "enforce, PDB for other pods: denied", in: base(KindDeployment, protectedNS, pdb("db", map[string]string{"app": "db"}, ioi(1), nil)), allowed: false, missingPDB: true},
		{name: "enforce with PDB", in: base(KindDeployment, protectedNS, good), allowed: true},
		{name: "warn, no PDB: admitted with the PDB in a warning", in: base(KindDeployment, warnNS), allowed: true, missingPDB: true, warnings: []string{`"apiVersion":"policy/v1"`}},
		{name: "jobs are exempt from the PDB rule", in: base(KindJob, protectedNS), allowed: true},
		{name: "cronjobs are exempt from the PDB rule", in: base(KindCronJob, protectedNS), allowed: true},
		{name: "kube-system is never touched", in: func() WorkloadInput { w := base(KindDeployment, protectedNS); w.Namespace = "kube-system"; return w }(), allowed: true},
		{name: "zero-disruption PDB warns", in: base(KindDeployment, protectedNS, pdb("web", web, ioi(0), nil)), allowed: true, warnings: []string{"allows zero disruptions"}},
		{name: "minAvailable = replicas warns", in: base(KindStatefulSet, protectedNS, pdb("web", web, nil, ioi(3))), allowed: true, warnings: []string{"allows zero disruptions"}},
		{name: "two PDBs warn", in: base(KindDeployment, protectedNS, good, pdb("web2", web, ioi(1), nil)), allowed: true, warnings: []string{"2 PodDisruptionBudgets"}},
		{name: "long grace period warns", in: func() WorkloadInput {
			w := base(KindDeployment, protectedNS, good)
			w.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](300)
			return w
		}(), allowed: true, warnings: []string{"longer than the 2m0s Spot interruption notice"}},
		{name: "long preStop sleep on a job warns", in: func() WorkloadInput {
			w := base(KindJob, protectedNS)
			w.Template.Spec.Containers = []corev1.Container{{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 150}}}}}
			return w
		}(), allowed: true, warnings: []string{"may take 2m30s to stop"}},
		{name: "typo in spot label warns, namespace still protects", in: func() WorkloadInput {
			w := base(KindDeployment, protectedNS, good)
			w.Labels = map[string]string{v1alpha1.LabelSpot: "true"}
			return w
		}(), allowed: true, warnings: []string{"not understood"}},
		{name: "opt-out in protected namespace", in: func() WorkloadInput {
			w := base(KindDeployment, protectedNS)
			w.Labels = map[string]string{v1alpha1.LabelSpot: "off"}
			return w
		}(), allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := c.ValidateWorkload(tt.in)
			if v.Allowed != tt.allowed || v.MissingPDB != tt.missingPDB {
				t.Fatalf("Allowed=%v MissingPDB=%v, want %v %v; message %q", v.Allowed, v.MissingPDB, tt.allowed, tt.missingPDB, v.Message)
			}
			if len(v.Warnings) != len(tt.warnings) {
				t.Fatalf("warnings = %q, want %d", v.Warnings, len(tt.warnings))
			}
			for i, w := range tt.warnings {
				if !strings.Contains(v.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, v.Warnings[i], w)
				}
			}
			for _, w := range v.Warnings {
				// Warnings travel in HTTP headers: a control character makes the apiserver drop them.
				if strings.ContainsFunc(w, unicode.IsControl) {
					t.Errorf("warning contains a control character: %q", w)
				}
			}
			if !v.Allowed {
				_, doc, ok := strings.Cut(v.Message, "---\n")
				if !ok {
					t.Fatalf("message has no YAML document: %q", v.Message)
				}
				checkSuggestedPDB(t, doc, tt.in)
			}
			if v.Allowed && v.MissingPDB {
				_, doc, _ := strings.Cut(v.Warnings[0], "roll the workload out: ")
				checkSuggestedPDB(t, doc, tt.in)
			}
		})
	}
}

// checkSuggestedPDB parses a suggested PDB and checks it is exactly the PDB for the workload.
func checkSuggestedPDB(t *testing.T, doc string, in WorkloadInput) {
	t.Helper()
	var got policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict([]byte(doc), &got); err != nil {
		t.Fatalf("suggested PDB does not parse: %v\n%s", err, doc)
	}
	if got.APIVersion != "policy/v1" || got.Kind != "PodDisruptionBudget" || got.Name != in.Name+"-lifeboat" || got.Namespace != in.Namespace {
		t.Errorf("suggested PDB header wrong: %+v", got.TypeMeta)
	}
	if got.Spec.MaxUnavailable == nil || got.Spec.MaxUnavailable.String() != "20%" || got.Spec.MinAvailable != nil {
		t.Errorf("maxUnavailable = %v, want 20%%", got.Spec.MaxUnavailable)
	}
	if len(SelectingPDBs([]*policyv1.PodDisruptionBudget{&got}, in.Template.Labels)) != 1 {
		t.Errorf("suggested PDB does not select the workload's Pods: %v", got.Spec.Selector)
	}
}

func TestDecidePod(t *testing.T) {
	c := DefaultConfig()
	web := map[string]string{"app": "web"}
	prot := map[string]string{v1alpha1.LabelSpot: "protected"}
	dep := Workload{Kind: KindDeployment, Name: "web"}
	pdbs := []*policyv1.PodDisruptionBudget{pdb("web", web, ios("20%"), nil)}
	tests := []struct {
		name string
		in   PodInput
		want bool
		tier v1alpha1.Tier
	}{
		{name: "protected deployment with PDB", in: PodInput{Namespace: "app", NamespaceLabels: prot, Workload: dep, PodLabels: web, PDBs: pdbs}, want: true, tier: v1alpha1.TierStateless},
		{name: "without PDB stays unprotected", in: PodInput{Namespace: "app", NamespaceLabels: prot, Workload: dep, PodLabels: web}, want: false},
		{name: "job without PDB is protected", in: PodInput{Namespace: "app", NamespaceLabels: prot, Workload: Workload{Kind: KindJob, Name: "j"}, PodLabels: web}, want: true, tier: v1alpha1.TierBestEffort},
		{name: "bare pod never", in: PodInput{Namespace: "app", NamespaceLabels: prot, PodLabels: web, PDBs: pdbs}, want: false},
		{name: "kube-system never", in: PodInput{Namespace: "kube-system", NamespaceLabels: prot, Workload: dep, PodLabels: web, PDBs: pdbs}, want: false},
		{name: "opt-out", in: PodInput{Namespace: "app", NamespaceLabels: prot, Workload: Workload{Kind: KindDeployment, Name: "web", Labels: map[string]string{v1alpha1.LabelSpot: "off"}}, PodLabels: web, PDBs: pdbs}, want: false},
		{name: "tier from pod label", in: PodInput{Namespace: "app", NamespaceLabels: prot, Workload: dep, PodLabels: map[string]string{"app": "web", v1alpha1.LabelTier: "critical"}, PDBs: pdbs}, want: true, tier: v1alpha1.TierCritical},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.DecidePod(tt.in)
			if d.Protect != tt.want || d.Tier != tt.tier {
				t.Errorf("got protect=%v tier=%q (%s), want %v %q", d.Protect, d.Tier, d.Reason, tt.want, tt.tier)
			}
		})
	}
}

func TestAllowsNoDisruption(t *testing.T) {
	tests := []struct {
		name     string
		max, min *intstr.IntOrString
		replicas *int32
		want     bool
	}{
		{"maxUnavailable 0", ioi(0), nil, nil, true},
		{"maxUnavailable 0%", ios("0%"), nil, nil, true},
		{"maxUnavailable 20%", ios("20%"), nil, ptr.To[int32](1), false},
		{"maxUnavailable 1", ioi(1), nil, nil, false},
		{"minAvailable 100%", nil, ios("100%"), nil, true},
		{"minAvailable 90% of 3 rounds up to 3", nil, ios("90%"), ptr.To[int32](3), true},
		{"minAvailable 50% of 3", nil, ios("50%"), ptr.To[int32](3), false},
		{"minAvailable 3 of 3", nil, ioi(3), ptr.To[int32](3), true},
		{"minAvailable 2 of 3", nil, ioi(2), ptr.To[int32](3), false},
		{"minAvailable 2, replicas unknown", nil, ioi(2), nil, false},
		{"neither", nil, nil, ptr.To[int32](1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AllowsNoDisruption(pdb("p", nil, tt.max, tt.min), tt.replicas); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestShutdownDuration(t *testing.T) {
	exec := func(cmd ...string) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}}
	}
	tests := []struct {
		name  string
		spec  corev1.PodSpec
		want  time.Duration
		grace *int64
	}{
		{name: "default grace", want: 30 * time.Second},
		{name: "explicit grace", spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](90)}, want: 90 * time.Second},
		{name: "preStop within grace", spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60), Containers: []corev1.Container{{Lifecycle: exec("sleep", "20")}}}, want: 60 * time.Second},
		{name: "shell preStop longer than grace", spec: corev1.PodSpec{Containers: []corev1.Container{{Lifecycle: exec("/bin/sh", "-c", "echo bye; sleep 45 && kill 1")}}}, want: 45 * time.Second},
		{name: "native sleep action", spec: corev1.PodSpec{Containers: []corev1.Container{{}, {Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 200}}}}}}, want: 200 * time.Second},
		{name: "not a sleep", spec: corev1.PodSpec{Containers: []corev1.Container{{Lifecycle: exec("nosleep", "999")}}}, want: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShutdownDuration(tt.spec); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

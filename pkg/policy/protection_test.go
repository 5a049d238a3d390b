package policy

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestResolveProtection(t *testing.T) {
	c := DefaultConfig()
	prot := map[string]string{v1alpha1.LabelSpot: "protected"}
	off := map[string]string{v1alpha1.LabelSpot: "off"}
	tests := []struct {
		name      string
		namespace string
		ns, wl    map[string]string
		want      bool
		reason    string
		warnings  int
	}{
		{name: "nothing", namespace: "app", want: false, reason: "no lifeboat.dev/spot label"},
		{name: "namespace protects", namespace: "app", ns: prot, want: true, reason: "namespace label"},
		{name: "workload protects", namespace: "app", wl: prot, want: true, reason: "workload label"},
		{name: "workload opt-out wins over namespace", namespace: "app", ns: prot, wl: off, want: false, reason: "workload label lifeboat.dev/spot=off"},
		{name: "workload protects in an opted-out namespace", namespace: "app", ns: off, wl: prot, want: true, reason: "workload label"},
		{name: "namespace off", namespace: "app", ns: off, want: false, reason: "namespace label lifeboat.dev/spot=off"},
		{name: "typo is ignored with a warning", namespace: "app", ns: prot, wl: map[string]string{v1alpha1.LabelSpot: "true"}, want: true, warnings: 1},
		{name: "typo on namespace", namespace: "app", ns: map[string]string{v1alpha1.LabelSpot: "yes"}, want: false, warnings: 1},
		{name: "kube-system never", namespace: "kube-system", ns: prot, wl: prot, want: false, reason: "never touched"},
		{name: "kube-public never", namespace: "kube-public", ns: prot, want: false},
		{name: "kube-node-lease never", namespace: "kube-node-lease", wl: prot, want: false},
		{name: "own namespace never", namespace: v1alpha1.DefaultNamespace, wl: prot, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.ResolveProtection(tt.namespace, tt.ns, tt.wl)
			if got.Protected != tt.want {
				t.Errorf("Protected = %v, want %v (%s)", got.Protected, tt.want, got.Reason)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", got.Reason, tt.reason)
			}
			if len(got.Warnings) != tt.warnings {
				t.Errorf("Warnings = %q, want %d", got.Warnings, tt.warnings)
			}
		})
	}
}

func TestPDBMode(t *testing.T) {
	tests := []struct {
		labels  map[string]string
		want    string
		warning bool
	}{
		{nil, "enforce", false},
		{map[string]string{v1alpha1.LabelPDBMode: "enforce"}, "enforce", false},
		{map[string]string{v1alpha1.LabelPDBMode: "warn"}, "warn", false},
		{map[string]string{v1alpha1.LabelPDBMode: "Warn"}, "enforce", true},
	}
	for _, tt := range tests {
		got, w := PDBMode(tt.labels)
		if got != tt.want || (w != "") != tt.warning {
			t.Errorf("PDBMode(%v) = %q, %q; want %q, warning %v", tt.labels, got, w, tt.want, tt.warning)
		}
	}
}

func TestResolveTier(t *testing.T) {
	tier := func(v string) map[string]string { return map[string]string{v1alpha1.LabelTier: v} }
	tests := []struct {
		name     string
		kind     Kind
		wl, pod  map[string]string
		want     v1alpha1.Tier
		warnings int
	}{
		{name: "deployment default", kind: KindDeployment, want: v1alpha1.TierStateless},
		{name: "statefulset default", kind: KindStatefulSet, want: v1alpha1.TierCheckpointed},
		{name: "job default", kind: KindJob, want: v1alpha1.TierBestEffort},
		{name: "cronjob default", kind: KindCronJob, want: v1alpha1.TierBestEffort},
		{name: "workload label", kind: KindDeployment, wl: tier("critical"), want: v1alpha1.TierCritical},
		{name: "pod label wins", kind: KindDeployment, wl: tier("critical"), pod: tier("best-effort"), want: v1alpha1.TierBestEffort},
		{name: "bad pod label falls back to workload", kind: KindJob, wl: tier("checkpointed"), pod: tier("gold"), want: v1alpha1.TierCheckpointed, warnings: 1},
		{name: "bad labels fall back to kind", kind: KindStatefulSet, wl: tier("x"), pod: tier("y"), want: v1alpha1.TierCheckpointed, warnings: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, w := ResolveTier(tt.kind, tt.wl, tt.pod)
			if got != tt.want || len(w) != tt.warnings {
				t.Errorf("ResolveTier = %s, %q; want %s with %d warnings", got, w, tt.want, tt.warnings)
			}
		})
	}
}

type fakeLookup map[string]*metav1.ObjectMeta

func (f fakeLookup) Metadata(_ context.Context, kind Kind, ns, name string) (*metav1.ObjectMeta, error) {
	return f[string(kind)+"/"+ns+"/"+name], nil
}

func ctrl(apiVersion, kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true)}}
}

func TestResolveWorkload(t *testing.T) {
	wlLabels := map[string]string{v1alpha1.LabelSpot: "protected"}
	lookup := fakeLookup{
		"ReplicaSet/ns/web-abc":  {Name: "web-abc", OwnerReferences: ctrl("apps/v1", "Deployment", "web")},
		"Deployment/ns/web":      {Name: "web", Labels: wlLabels},
		"ReplicaSet/ns/bare":     {Name: "bare"},
		"StatefulSet/ns/db":      {Name: "db", Labels: wlLabels},
		"Job/ns/nightly-1":       {Name: "nightly-1", OwnerReferences: ctrl("batch/v1", "CronJob", "nightly")},
		"CronJob/ns/nightly":     {Name: "nightly", Labels: wlLabels},
		"Job/ns/once":            {Name: "once", Labels: wlLabels},
		"ReplicaSet/ns/orphaned": {Name: "orphaned", OwnerReferences: ctrl("apps/v1", "Deployment", "gone")},
	}
	tests := []struct {
		name    string
		owners  []metav1.OwnerReference
		want    Workload
		wantErr bool
	}{
		{name: "bare pod", want: Workload{}},
		{name: "deployment", owners: ctrl("apps/v1", "ReplicaSet", "web-abc"), want: Workload{Kind: KindDeployment, Name: "web", Labels: wlLabels}},
		{name: "replicaset without deployment", owners: ctrl("apps/v1", "ReplicaSet", "bare"), want: Workload{}},
		{name: "statefulset", owners: ctrl("apps/v1", "StatefulSet", "db"), want: Workload{Kind: KindStatefulSet, Name: "db", Labels: wlLabels}},
		{name: "cronjob", owners: ctrl("batch/v1", "Job", "nightly-1"), want: Workload{Kind: KindCronJob, Name: "nightly", Labels: wlLabels}},
		{name: "job", owners: ctrl("batch/v1", "Job", "once"), want: Workload{Kind: KindJob, Name: "once", Labels: wlLabels}},
		{name: "daemonset", owners: ctrl("apps/v1", "DaemonSet", "agent"), want: Workload{}},
		{name: "custom Job kind in another group", owners: ctrl("example.com/v1", "Job", "once"), want: Workload{}},
		{name: "non-controller owner ignored", owners: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"}}, want: Workload{}},
		{name: "missing replicaset", owners: ctrl("apps/v1", "ReplicaSet", "nope"), wantErr: true},
		{name: "missing deployment", owners: ctrl("apps/v1", "ReplicaSet", "orphaned"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveWorkload(context.Background(), lookup, "ns", tt.owners)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.Kind != tt.want.Kind || got.Name != tt.want.Name || len(got.Labels) != len(tt.want.Labels) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := DefaultConfig()
	bad.PriorityClasses = DefaultPriorityClasses()
	bad.PriorityClasses[v1alpha1.TierCritical] = "system-node-critical"
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "system-") {
		t.Fatalf("system class accepted: %v", err)
	}
	missing := DefaultConfig()
	missing.PriorityClasses = DefaultPriorityClasses()
	delete(missing.PriorityClasses, v1alpha1.TierBestEffort)
	if missing.Validate() == nil {
		t.Fatal("missing tier class accepted")
	}
}

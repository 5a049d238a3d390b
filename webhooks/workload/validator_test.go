package workload

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/internal/fixture"
	"github.com/lifeboat-k8s/lifeboat/webhooks/state"
)

var (
	deploymentGVK = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	jobGVK        = metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
)

func unprotectedDeployment(ns string) *appsv1.Deployment {
	d := fixture.WebDeployment()
	d.Name, d.Namespace = "api", ns
	d.Spec.Selector.MatchLabels = map[string]string{"app": "api"}
	d.Spec.Template.Labels = map[string]string{"app": "api"}
	return d
}

func TestValidator(t *testing.T) {
	v := &Validator{Config: policy.DefaultConfig(), Cluster: fixture.Cluster()}
	update := func(old, cur runtime.Object) admission.Request {
		r := fixture.Request(admissionv1.Update, cur, deploymentGVK, "deployments")
		o := fixture.Request(admissionv1.Update, old, deploymentGVK, "deployments")
		r.OldObject = o.Object
		return r
	}
	tests := []struct {
		name     string
		req      admission.Request
		allowed  bool
		code     int32
		contains string
		warnings int
	}{
		{name: "deployment with PDB", req: fixture.Request(admissionv1.Create, fixture.WebDeployment(), deploymentGVK, "deployments"), allowed: true},
		{name: "deployment without PDB, enforce", req: fixture.Request(admissionv1.Create, unprotectedDeployment(fixture.Namespace), deploymentGVK, "deployments"),
			allowed: false, code: http.StatusForbidden, contains: "name: api-lifeboat"},
		{name: "deployment without PDB, warn", req: fixture.Request(admissionv1.Create, unprotectedDeployment(fixture.WarnNamespace), deploymentGVK, "deployments"),
			allowed: true, warnings: 1},
		{name: "scale-only update of a deployment without PDB is not blocked", req: func() admission.Request {
			old := unprotectedDeployment(fixture.Namespace)
			cur := old.DeepCopy()
			cur.Spec.Replicas = ptr.To[int32](10)
			return update(old, cur)
		}(), allowed: true, warnings: 1},
		{name: "template update of a deployment without PDB is denied", req: func() admission.Request {
			old := unprotectedDeployment(fixture.Namespace)
			cur := old.DeepCopy()
			cur.Spec.Template.Spec.Containers[0].Image = "nginx:2"
			return update(old, cur)
		}(), allowed: false, code: http.StatusForbidden},
		{name: "deletion is never blocked", req: func() admission.Request {
			old := unprotectedDeployment(fixture.Namespace)
			cur := old.DeepCopy()
			cur.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			cur.Spec.Template.Spec.Containers[0].Image = "x"
			return update(old, cur)
		}(), allowed: true},
		{name: "job is exempt from the PDB rule, long grace warns", req: fixture.Request(admissionv1.Create, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: fixture.Namespace},
			Spec: batchv1.JobSpec{Template: func() (t batchv1.JobSpec) {
				t.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](600)
				return t
			}().Template},
		}, jobGVK, "jobs"), allowed: true, warnings: 1},
		{name: "kube-system", req: func() admission.Request {
			d := unprotectedDeployment("kube-system")
			return fixture.Request(admissionv1.Create, d, deploymentGVK, "deployments")
		}(), allowed: true},
		{name: "other kinds", req: fixture.Request(admissionv1.Create, fixture.WebDeployment(), metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, "daemonsets"), allowed: true},
		{name: "malformed", req: func() admission.Request {
			r := fixture.Request(admissionv1.Create, fixture.WebDeployment(), deploymentGVK, "deployments")
			r.Object.Raw = []byte(`{"spec":{"replicas":"three"}}`)
			return r
		}(), allowed: false, code: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := v.Handle(context.Background(), tt.req)
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v: %+v", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && resp.Result.Code != tt.code {
				t.Errorf("code = %d, want %d", resp.Result.Code, tt.code)
			}
			if tt.contains != "" && !strings.Contains(resp.Result.Message, tt.contains) {
				t.Errorf("message %q does not contain %q", resp.Result.Message, tt.contains)
			}
			if len(resp.Warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", resp.Warnings, tt.warnings)
			}
		})
	}
}

// TestValidatorLooksPastTheCacheBeforeDenying: a PDB applied together with its Deployment (one
// `kubectl apply -f`) may not be in the webhook's cache when the Deployment arrives; the
// validator reads the API server before denying, and still denies when there is no PDB there
// either.
func TestValidatorLooksPastTheCacheBeforeDenying(t *testing.T) {
	dep := unprotectedDeployment(fixture.Namespace)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: fixture.Namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: dep.Spec.Selector}}
	stale := fixture.Cluster()   // the cache: no PDB for api yet
	live := fixture.Cluster(pdb) // the API server: the PDB was just created
	for name, tc := range map[string]struct {
		cluster *state.Cluster
		allowed bool
	}{
		"PDB only in the API server":    {cluster: &state.Cluster{Cache: stale.Cache, Live: live.Live}, allowed: true},
		"PDB nowhere":                   {cluster: &state.Cluster{Cache: stale.Cache, Live: stale.Live}, allowed: false},
		"no live reader: cache decides": {cluster: &state.Cluster{Cache: stale.Cache}, allowed: false},
	} {
		t.Run(name, func(t *testing.T) {
			v := &Validator{Config: policy.DefaultConfig(), Cluster: tc.cluster}
			resp := v.Handle(context.Background(), fixture.Request(admissionv1.Create, dep, deploymentGVK, "deployments"))
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v: %+v", resp.Allowed, tc.allowed, resp.Result)
			}
		})
	}
}

// Package workload is the validating webhook on Deployments, StatefulSets, Jobs and CronJobs: it
// denies (enforce) or warns about (warn) a protected Deployment or StatefulSet that no
// PodDisruptionBudget covers, with the PDB to apply in the message, and warns about PDBs that
// allow no disruption and shutdowns longer than the Spot notice.
package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/state"
)

// Path is where the webhook is served.
const Path = "/validate-workloads"

// Validator is the workload validating webhook.
type Validator struct {
	Config  policy.Config
	Cluster *state.Cluster
}

var _ admission.Handler = &Validator{}

// Handle validates a workload create or update.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.SubResource != "" {
		return admission.Allowed("not a workload create or update")
	}
	in, meta, err := decode(req.Kind, req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if in == nil {
		return admission.Allowed(fmt.Sprintf("kind %s is not validated by Lifeboat", req.Kind))
	}
	if in.Namespace == "" {
		in.Namespace = req.Namespace
	}
	if in.Name == "" {
		in.Name = req.Name
	}
	logger := klog.FromContext(ctx).WithValues("workload", klog.KRef(in.Namespace, in.Name), "kind", in.Kind)
	if v.Config.Exempt(in.Namespace) {
		return admission.Allowed("namespace is never touched by Lifeboat")
	}
	if meta.GetDeletionTimestamp() != nil {
		// Finalizer removal during deletion must never be blocked.
		return admission.Allowed("being deleted")
	}

	if in.NamespaceLabels, err = v.Cluster.NamespaceLabels(ctx, in.Namespace); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("read namespace %s: %w; retry shortly", in.Namespace, err))
	}
	if in.PDBs, err = v.Cluster.PDBs(ctx, in.Namespace); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%w; retry shortly", err))
	}
	verdict := v.Config.ValidateWorkload(*in)
	if !verdict.Allowed {
		// Before denying, look past the cache: the PDB may have been created just before.
		pdbs, live, err := v.Cluster.LivePDBs(ctx, in.Namespace)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%w; retry shortly", err))
		}
		if live {
			in.PDBs = pdbs
			verdict = v.Config.ValidateWorkload(*in)
		}
	}

	if !verdict.Allowed && req.Operation == admissionv1.Update {
		old, _, err := decode(req.Kind, req.OldObject.Raw)
		if err == nil && old != nil && !relevantChange(old, in) {
			// The update does not touch what protection depends on (a scale, an annotation, a
			// finalizer): denying it would block unrelated operations, so warn instead.
			logger.V(2).Info("Admitting an update of a protected workload without a PodDisruptionBudget; nothing protection depends on changed")
			return admission.Allowed("").WithWarnings(append(verdict.Warnings, verdict.MissingPDBWarning)...)
		}
	}
	if !verdict.Allowed {
		logger.V(2).Info("Denying protected workload without a PodDisruptionBudget")
		return admission.Denied(verdict.Message).WithWarnings(verdict.Warnings...)
	}
	if len(verdict.Warnings) > 0 {
		logger.V(3).Info("Admitting workload with warnings", "warnings", len(verdict.Warnings))
	}
	return admission.Allowed("").WithWarnings(verdict.Warnings...)
}

// relevantChange reports whether an update changes anything protection depends on: Lifeboat's
// labels, the selector or the Pod template.
func relevantChange(old, cur *policy.WorkloadInput) bool {
	for _, k := range []string{v1alpha1.LabelSpot, v1alpha1.LabelTier} {
		if old.Labels[k] != cur.Labels[k] {
			return true
		}
	}
	return !reflect.DeepEqual(old.Selector, cur.Selector) || !reflect.DeepEqual(old.Template, cur.Template)
}

// decode turns the raw object into the policy's view of it; (nil, nil) for kinds not validated.
func decode(gvk metav1.GroupVersionKind, raw []byte) (*policy.WorkloadInput, metav1.Object, error) {
	if gvk.Version != "v1" {
		return nil, nil, nil
	}
	switch {
	case gvk.Group == "apps" && gvk.Kind == "Deployment":
		return decodeAs(raw, func(d *appsv1.Deployment) policy.WorkloadInput {
			return withReplicas(policy.DeploymentWorkload(d))
		})
	case gvk.Group == "apps" && gvk.Kind == "StatefulSet":
		return decodeAs(raw, func(s *appsv1.StatefulSet) policy.WorkloadInput {
			return withReplicas(policy.StatefulSetWorkload(s))
		})
	case gvk.Group == "batch" && gvk.Kind == "Job":
		return decodeAs(raw, policy.JobWorkload)
	case gvk.Group == "batch" && gvk.Kind == "CronJob":
		return decodeAs(raw, policy.CronJobWorkload)
	}
	return nil, nil, nil
}

// decodeAs unmarshals raw into a T and returns view of it, and its metadata.
func decodeAs[T any, P interface {
	*T
	metav1.Object
}](raw []byte, view func(P) policy.WorkloadInput) (*policy.WorkloadInput, metav1.Object, error) {
	obj := P(new(T))
	if err := unmarshal(raw, obj); err != nil {
		return nil, nil, err
	}
	in := view(obj)
	return &in, obj, nil
}

func unmarshal(raw []byte, into any) error {
	if len(raw) == 0 {
		return fmt.Errorf("the request has no object")
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("decode %T: %w", into, err)
	}
	return nil
}

// withReplicas applies the API default of replicas (1) that the object in an admission request
// already carries; nil only for malformed requests.
func withReplicas(in policy.WorkloadInput) policy.WorkloadInput {
	if in.Replicas == nil {
		one := int32(1)
		in.Replicas = &one
	}
	return in
}

// Package pod is the mutating webhook on Pod CREATE: it writes a protected Pod's tier placement
// (docs/ARCHITECTURE.md "Tiers") as a JSON patch. It fails open: when it cannot decide, the Pod
// is admitted unchanged with a warning, and the audit reports it.
package pod

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/state"
	"github.com/lifeboat-k8s/lifeboat/webhooks/webhookmetrics"
)

// Path is where the webhook is served.
const Path = "/mutate-pods"

// Mutator is the Pod mutating webhook.
type Mutator struct {
	Config  policy.Config
	Cluster *state.Cluster
}

var _ admission.Handler = &Mutator{}

// Handle admits every Pod; protected ones with a patch.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" ||
		req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		return admission.Allowed("not a Pod creation")
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the request has no object"))
	}
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode Pod: %w", err))
	}
	namespace := req.Namespace
	if namespace == "" {
		namespace = pod.Namespace
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(namespace, podName(pod, req)))
	ctx = klog.NewContext(ctx, logger)

	if m.Config.Exempt(namespace) {
		return admission.Allowed("namespace is never touched by Lifeboat")
	}
	resp, err := m.mutate(ctx, namespace, pod)
	if err != nil {
		// Fail open, like failurePolicy Ignore: an unprotected Pod is better than a blocked
		// cluster. The audit lists protected workloads whose Pods were admitted unmutated.
		logger.Error(err, "Admitting Pod unprotected")
		return failOpen(err)
	}
	return resp
}

func (m *Mutator) mutate(ctx context.Context, namespace string, pod *corev1.Pod) (admission.Response, error) {
	logger := klog.FromContext(ctx)
	nsLabels, err := m.Cluster.NamespaceLabels(ctx, namespace)
	if err != nil {
		return admission.Response{}, err
	}
	workload, err := policy.ResolveWorkload(ctx, m.Cluster, namespace, pod.OwnerReferences)
	if err != nil {
		return admission.Response{}, err
	}
	var pdbs []*policyv1.PodDisruptionBudget
	if workload.Supported() && policy.NeedsPDB(workload.Kind) {
		if pdbs, err = m.Cluster.PDBs(ctx, namespace); err != nil {
			return admission.Response{}, err
		}
	}
	d := m.Config.DecidePod(policy.PodInput{
		Namespace: namespace, NamespaceLabels: nsLabels, Workload: workload, PodLabels: pod.Labels, PDBs: pdbs,
	})
	if !d.Protect {
		logger.V(4).Info("Pod not protected", "workload", workload.String(), "reason", d.Reason)
		return admission.Allowed(d.Reason), nil
	}
	tierClass, err := m.Cluster.PriorityClass(ctx, m.Config.PriorityClasses[d.Tier])
	if err != nil {
		return admission.Response{}, err
	}
	podClass, err := m.Cluster.PriorityClass(ctx, pod.Spec.PriorityClassName)
	if err != nil {
		return admission.Response{}, err
	}
	placement := policy.Placement{Tier: d.Tier, TierClass: tierClass, PodClass: podClass}
	if m.Config.NeedsLifeboatState() {
		// Without the answer the Pod keeps the default scheduler: it still gets the rest of its
		// protection, and the default scheduler is what binds it outside an interruption anyway.
		if placement.LifeboatActive, err = m.Cluster.LifeboatActive(ctx); err != nil {
			logger.Error(err, "Leaving the Pod on the default scheduler")
		}
	}
	// A Pod re-created under the name of one a lifeboat's handoff evicted (a StatefulSet's)
	// prefers the node its seat held room on: that node pulled its images.
	if placement.SeatHost, err = m.Cluster.SeatHost(ctx, namespace, pod.Name); err != nil {
		logger.Error(err, "Placing the Pod without its seat's node")
	}
	mutated := pod.DeepCopy()
	notes := m.Config.ApplyPlacement(mutated, placement)
	patch := Patch(pod, mutated)
	logger.V(3).Info("Protecting Pod", "workload", workload.String(), "tier", d.Tier, "reason", d.Reason, "lifeboatActive", placement.LifeboatActive, "seatHost", placement.SeatHost, "operations", len(patch))
	warnings := append(d.Warnings, notes...)
	if len(patch) == 0 {
		return admission.Allowed("already protected").WithWarnings(warnings...), nil
	}
	return admission.Patched("", patch...).WithWarnings(warnings...), nil
}

// admittedPod holds the fields of a Pod that the decision reads and ApplyPlacement may change (the
// fields Patch compares). Decoding only these skips containers, volumes and status — most of a
// Pod's bytes and allocations — on every Pod creation in the cluster.
type admittedPod struct {
	Metadata struct {
		Name            string                  `json:"name,omitempty"`
		GenerateName    string                  `json:"generateName,omitempty"`
		Namespace       string                  `json:"namespace,omitempty"`
		Labels          map[string]string       `json:"labels,omitempty"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Affinity          *corev1.Affinity         `json:"affinity,omitempty"`
		Tolerations       []corev1.Toleration      `json:"tolerations,omitempty"`
		SchedulerName     string                   `json:"schedulerName,omitempty"`
		PriorityClassName string                   `json:"priorityClassName,omitempty"`
		Priority          *int32                   `json:"priority,omitempty"`
		PreemptionPolicy  *corev1.PreemptionPolicy `json:"preemptionPolicy,omitempty"`
	} `json:"spec"`
}

// decodePod decodes the admitted fields of a Pod. Fields it skips are not checked: the apiserver
// has already decoded and defaulted the object it sends.
func decodePod(raw []byte) (*corev1.Pod, error) {
	var in admittedPod
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	pod.Name, pod.GenerateName, pod.Namespace = in.Metadata.Name, in.Metadata.GenerateName, in.Metadata.Namespace
	pod.Labels, pod.OwnerReferences = in.Metadata.Labels, in.Metadata.OwnerReferences
	pod.Spec.Affinity, pod.Spec.Tolerations, pod.Spec.SchedulerName = in.Spec.Affinity, in.Spec.Tolerations, in.Spec.SchedulerName
	pod.Spec.PriorityClassName, pod.Spec.Priority, pod.Spec.PreemptionPolicy = in.Spec.PriorityClassName, in.Spec.Priority, in.Spec.PreemptionPolicy
	return pod, nil
}

// failOpen admits the request and says why it was not protected.
func failOpen(err error) admission.Response {
	resp := admission.Allowed("")
	resp.Result = &metav1.Status{Code: http.StatusOK, Reason: webhookmetrics.ReasonError, Message: err.Error()}
	return resp.WithWarnings("Lifeboat could not decide whether to protect this Pod, so it was admitted unprotected; the Lifeboat audit reports it. Cause: " + oneLine(err.Error()))
}

func podName(pod *corev1.Pod, req admission.Request) string {
	switch {
	case pod.Name != "":
		return pod.Name
	case req.Name != "":
		return req.Name
	case pod.GenerateName != "":
		return pod.GenerateName + "*"
	}
	return ""
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// Patch is the JSON patch from before to after, limited to the fields ApplyPlacement may change.
// Writing whole fields (rather than diffing serialized Pods) keeps fields this binary's API types
// do not know intact when the apiserver is newer, and costs microseconds.
func Patch(before, after *corev1.Pod) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	add := func(path string, v any) {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: v})
	}
	if !reflect.DeepEqual(before.Labels, after.Labels) {
		if before.Labels == nil {
			add("/metadata/labels", after.Labels)
		} else {
			for _, k := range slices.Sorted(maps.Keys(after.Labels)) {
				if old, ok := before.Labels[k]; !ok || old != after.Labels[k] {
					add("/metadata/labels/"+escape(k), after.Labels[k])
				}
			}
		}
	}
	b, a := &before.Spec, &after.Spec
	if !reflect.DeepEqual(b.Affinity, a.Affinity) {
		add("/spec/affinity", a.Affinity)
	}
	if !reflect.DeepEqual(b.Tolerations, a.Tolerations) {
		add("/spec/tolerations", a.Tolerations)
	}
	if b.SchedulerName != a.SchedulerName {
		add("/spec/schedulerName", a.SchedulerName)
	}
	if b.PriorityClassName != a.PriorityClassName {
		add("/spec/priorityClassName", a.PriorityClassName)
	}
	if !reflect.DeepEqual(b.Priority, a.Priority) && a.Priority != nil {
		add("/spec/priority", *a.Priority)
	}
	if !reflect.DeepEqual(b.PreemptionPolicy, a.PreemptionPolicy) && a.PreemptionPolicy != nil {
		add("/spec/preemptionPolicy", *a.PreemptionPolicy)
	}
	return ops
}

// escape encodes a JSON pointer segment (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

package policy

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind is a workload kind Lifeboat understands.
type Kind string

const (
	KindDeployment  Kind = "Deployment"
	KindStatefulSet Kind = "StatefulSet"
	KindJob         Kind = "Job"
	KindCronJob     Kind = "CronJob"
	// KindReplicaSet appears only as a link in the owner chain Pod → ReplicaSet → Deployment.
	KindReplicaSet Kind = "ReplicaSet"
)

// Workload is the top of a Pod's owner chain, as far as Lifeboat is concerned.
type Workload struct {
	// Kind is empty when the Pod has no supported controller (bare Pods, DaemonSets, ReplicaSets
	// without a Deployment, custom controllers): such Pods are never protected, because nothing
	// Lifeboat knows would recreate them after an interruption.
	Kind   Kind
	Name   string
	Labels map[string]string
}

// Supported reports whether the workload is of a kind Lifeboat protects.
func (w Workload) Supported() bool { return w.Kind != "" }

func (w Workload) String() string {
	if !w.Supported() {
		return "no supported controller"
	}
	return string(w.Kind) + "/" + w.Name
}

// MetadataLookup returns an object's metadata, or (nil, nil) when it does not exist. The webhook
// implements it with informer caches.
type MetadataLookup interface {
	Metadata(ctx context.Context, kind Kind, namespace, name string) (*metav1.ObjectMeta, error)
}

// ResolveWorkload follows a Pod's controller references: Pod → ReplicaSet → Deployment,
// Pod → Job → CronJob, Pod → StatefulSet. A link that cannot be found ends the chain at the
// last object found; a ReplicaSet without a Deployment is not a supported workload.
func ResolveWorkload(ctx context.Context, lookup MetadataLookup, namespace string, podOwners []metav1.OwnerReference) (Workload, error) {
	ref := controllerOf(podOwners)
	if ref == nil {
		return Workload{}, nil
	}
	switch kindOf(ref) {
	case KindStatefulSet:
		return resolveOne(ctx, lookup, KindStatefulSet, namespace, ref.Name)
	case KindReplicaSet:
		rs, err := lookupOwner(ctx, lookup, KindReplicaSet, namespace, ref.Name)
		if err != nil {
			return Workload{}, err
		}
		up := controllerOf(rs.OwnerReferences)
		if up == nil || kindOf(up) != KindDeployment {
			return Workload{}, nil
		}
		return resolveOne(ctx, lookup, KindDeployment, namespace, up.Name)
	case KindJob:
		job, err := lookupOwner(ctx, lookup, KindJob, namespace, ref.Name)
		if err != nil {
			return Workload{}, err
		}
		if up := controllerOf(job.OwnerReferences); up != nil && kindOf(up) == KindCronJob {
			return resolveOne(ctx, lookup, KindCronJob, namespace, up.Name)
		}
		return Workload{Kind: KindJob, Name: job.Name, Labels: job.Labels}, nil
	default:
		return Workload{}, nil
	}
}

func resolveOne(ctx context.Context, lookup MetadataLookup, kind Kind, namespace, name string) (Workload, error) {
	m, err := lookupOwner(ctx, lookup, kind, namespace, name)
	if err != nil {
		return Workload{}, err
	}
	return Workload{Kind: kind, Name: name, Labels: m.Labels}, nil
}

// lookupOwner returns the metadata of a link of the owner chain; one that does not exist is an
// error.
func lookupOwner(ctx context.Context, lookup MetadataLookup, kind Kind, namespace, name string) (*metav1.ObjectMeta, error) {
	m, err := lookup.Metadata(ctx, kind, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("look up %s %s/%s: %w", kind, namespace, name, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s %s/%s that owns the Pod was not found", kind, namespace, name)
	}
	return m, nil
}

func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// kindOf maps an owner reference to a Kind, checking the API group so that a custom resource
// that happens to be called "Job" is not mistaken for batch/v1 Job.
func kindOf(ref *metav1.OwnerReference) Kind {
	group, _, _ := strings.Cut(ref.APIVersion, "/")
	if !strings.Contains(ref.APIVersion, "/") {
		group = ""
	}
	switch {
	case group == "apps" && ref.Kind == "ReplicaSet":
		return KindReplicaSet
	case group == "apps" && ref.Kind == "Deployment":
		return KindDeployment
	case group == "apps" && ref.Kind == "StatefulSet":
		return KindStatefulSet
	case group == "batch" && ref.Kind == "Job":
		return KindJob
	case group == "batch" && ref.Kind == "CronJob":
		return KindCronJob
	}
	return ""
}

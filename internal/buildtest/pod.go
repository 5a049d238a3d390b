package buildtest

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// PodOption sets a part of a Pod: an Option, a PodFunc or one of the Pod options below.
type PodOption interface{ applyPod(*corev1.Pod) }

// PodFunc is a PodOption that edits the Pod as it likes.
type PodFunc func(*corev1.Pod)

func (f PodFunc) applyPod(p *corev1.Pod) { f(p) }

// Pod is the Pod ns/name with the options applied in order; without options it has nothing
// else (no containers, phase or conditions).
func Pod(ns, name string, opts ...PodOption) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, o := range opts {
		o.applyPod(p)
	}
	return p
}

// OnNode binds the Pod to the node.
func OnNode(node string) PodOption {
	return PodFunc(func(p *corev1.Pod) { p.Spec.NodeName = node })
}

// Requests sets the cpu and memory requests of the Pod's first container, adding a container
// "c" if it has none; a "" quantity is left as it was.
func Requests(cpu, mem string) PodOption {
	return PodFunc(func(p *corev1.Pod) {
		if len(p.Spec.Containers) == 0 {
			p.Spec.Containers = []corev1.Container{{Name: "c"}}
		}
		r := &p.Spec.Containers[0].Resources
		r.Requests = setQuantities(r.Requests, resourceMap(cpu, mem, ""))
	})
}

// OwnedBy makes the Pod controlled by the kind/name with uid (apps/v1 or batch/v1 by kind).
func OwnedBy(kind, name string, uid types.UID) PodOption {
	apiVersion := map[string]string{"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
		"Deployment": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1"}[kind]
	return PodFunc(func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
	})
}

// Protected labels the Pod protected, as the webhook does, and with the tier unless it is "".
func Protected(tier v1alpha1.Tier) PodOption {
	return PodFunc(func(p *corev1.Pod) {
		p.Labels = merge(p.Labels, map[string]string{v1alpha1.LabelProtected: "true"})
		if tier != "" {
			p.Labels[v1alpha1.LabelTier] = string(tier)
		}
	})
}

// Phase sets the Pod's phase.
func Phase(phase corev1.PodPhase) PodOption {
	return PodFunc(func(p *corev1.Pod) { p.Status.Phase = phase })
}

// Running sets the Pod's phase Running.
func Running() PodOption { return Phase(corev1.PodRunning) }

// StartTime sets the Pod's start time.
func StartTime(t time.Time) PodOption {
	return PodFunc(func(p *corev1.Pod) { p.Status.StartTime = &metav1.Time{Time: t} })
}

// Tolerations appends the tolerations to the Pod's.
func Tolerations(tolerations ...corev1.Toleration) PodOption {
	return PodFunc(func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, tolerations...) })
}

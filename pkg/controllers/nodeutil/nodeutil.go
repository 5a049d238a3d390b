// Package nodeutil holds small helpers about pool Nodes shared by the controllers.
package nodeutil

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// InstanceID returns the EC2 instance ID of a Node from its providerID (aws:///<zone>/<id>),
// or from the lifeboat.dev/instance-id annotation.
func InstanceID(n *corev1.Node) string {
	if id := n.Annotations[v1alpha1.AnnotationInstanceID]; id != "" {
		return id
	}
	p := n.Spec.ProviderID
	if !strings.HasPrefix(p, "aws://") {
		return ""
	}
	if i := strings.LastIndex(p, "/"); i >= 0 && strings.HasPrefix(p[i+1:], "i-") {
		return p[i+1:]
	}
	return ""
}

// State is the Node's pool state (empty for a Node outside any pool or not yet labelled).
func State(n *corev1.Node) v1alpha1.NodeState {
	if n == nil {
		return ""
	}
	return v1alpha1.NodeState(n.Labels[v1alpha1.LabelState])
}

// Pool is the WarmPool a Node belongs to, or "".
func Pool(n *corev1.Node) string { return n.Labels[v1alpha1.LabelPool] }

// Ready reports whether the Node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// HasTaint reports whether the Node has a taint with key.
func HasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// Time parses an RFC 3339 annotation; ok is false when absent or malformed.
func Time(obj map[string]string, key string) (time.Time, bool) {
	v, ok := obj[key]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// FormatTime is the annotation format of times.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// IsDaemonSetPod reports whether a Pod is owned by a DaemonSet (drains leave those).
func IsDaemonSetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// IsTerminal reports whether a Pod has finished.
func IsTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// PodReady reports whether the Pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsPrePullPod reports whether a Pod is one of Lifeboat's pre-pull Pods.
func IsPrePullPod(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelPrePull] != "" }

// PodRequests are the Pod's effective requests (containers, init containers, overhead), as the
// scheduler computes them.
func PodRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// EnsureMaps makes the object's labels and annotations writable (a decoded object may carry
// nil maps).
func EnsureMaps(n *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
}

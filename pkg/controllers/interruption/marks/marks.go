// Package marks is the interruption mark on a Node (taint lifeboat.dev/interrupted, the
// interrupted-at and interruption-source annotations): when a notice needs one (Needed), the
// write that records it (Writer), and the queue notices whose mark is still to be written —
// with the Node's resume decision, after StartInstances (Notices).
package marks

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Source values of AnnotationInterruptionSource besides "sqs/<kind>".
const (
	SourceKarpenterEvent = "karpenter-event"
	SourceRebalance      = "sqs/" + string(interruptionqueue.KindRebalanceRecommendation)
)

// AwaitsDecision reports whether the object (a Node) is marked interrupted and has no resume
// decision yet.
func AwaitsDecision(o client.Object) bool {
	a := o.GetAnnotations()
	return a[v1alpha1.AnnotationInterruptedAt] != "" && a[v1alpha1.AnnotationResumeDecision] == ""
}

// Needed reports whether a notice from source marks the Node: it carries no mark yet, or
// only the mark of a rebalance recommendation and source is a real interruption. The latter
// re-marks it once: the pre-resume served the recommendation (resumed from the PreResume pools
// alone, maybe handed off already), and the interruption needs its own plan over every pool.
// Once re-marked, the source is no longer the recommendation's, so the duplicates of the
// interruption find it marked.
func Needed(n *corev1.Node, source string) bool {
	if n.Annotations[v1alpha1.AnnotationInterruptedAt] == "" {
		return true
	}
	return n.Annotations[v1alpha1.AnnotationInterruptionSource] == SourceRebalance && source != SourceRebalance
}

// Same reports whether a and b carry the same interruption mark.
func Same(a, b *corev1.Node) bool {
	return a.Annotations[v1alpha1.AnnotationInterruptedAt] == b.Annotations[v1alpha1.AnnotationInterruptedAt] &&
		a.Annotations[v1alpha1.AnnotationInterruptionSource] == b.Annotations[v1alpha1.AnnotationInterruptionSource]
}

// Marked returns a copy of node carrying the mark of a notice from source received at: the
// mark's annotations and taint, and no decision (a re-mark is decided again).
func Marked(node *corev1.Node, source string, at time.Time) *corev1.Node {
	n := node.DeepCopy()
	apply(n, source, at)
	return n
}

func apply(n *corev1.Node, source string, at time.Time) {
	nodeutil.EnsureMaps(n)
	n.Annotations[v1alpha1.AnnotationInterruptedAt] = nodeutil.FormatTime(at)
	n.Annotations[v1alpha1.AnnotationInterruptionSource] = source
	delete(n.Annotations, v1alpha1.AnnotationResumeDecision)
	if !nodeutil.HasTaint(n, v1alpha1.TaintInterrupted) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintInterrupted, Effect: corev1.TaintEffectNoSchedule})
	}
}

// Package podrole says what the lifeboat scheduler's plugins make of a Pod, from the labels the
// webhook writes.
package podrole

import (
	v1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Protected: the webhook protected the Pod (label lifeboat.dev/protected=true).
func Protected(pod *v1.Pod) bool {
	return pod.Labels[v1alpha1.LabelProtected] == "true"
}

// SeatHost is the kubernetes.io/hostname of the node where a seat kept room for the protected
// Pod (label lifeboat.dev/seat-host), "" for none.
func SeatHost(pod *v1.Pod) string {
	if !Protected(pod) {
		return ""
	}
	return pod.Labels[v1alpha1.LabelSeatHost]
}

// RidesLifeboats: the Pod is protected and has no seat, so lifeboat nodes are its first
// targets. A Pod with a seat is moving off a lifeboat (or an interrupted node) to the room its
// seat kept on ordinary capacity; a lifeboat would only have to hand it off again.
func RidesLifeboats(pod *v1.Pod) bool {
	return Protected(pod) && SeatHost(pod) == ""
}

package handoff

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/scaling"
)

// SurgePhase is where a Deployment's handoff surge for one node stands.
type SurgePhase int

const (
	// SurgeWait: nothing to do for this node now — a bridge surge of an interrupted Spot node is
	// in progress (its replica count is not the Deployment's own; handoffDeadline bounds the
	// wait), or another node's handoff surge comes first.
	SurgeWait SurgePhase = iota
	// SurgeStart: no surge yet; start one (NewSurge).
	SurgeStart
	// SurgeRunning: this node's surge is on; wait for the replacements (SurgeDone), then end it.
	SurgeRunning
)

// SurgeOf reads the handoff surge of d for node from its lifeboat.dev/handoff-surge record.
func SurgeOf(d *appsv1.Deployment, node string) (SurgePhase, Surge, error) {
	raw := d.Annotations[v1alpha1.AnnotationHandoffSurge]
	if _, bridging := scaling.Surging(d); bridging && raw == "" {
		return SurgeWait, Surge{}, nil
	}
	if raw == "" {
		return SurgeStart, Surge{}, nil
	}
	var s Surge
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return SurgeWait, Surge{}, fmt.Errorf("deployment %s/%s: bad %s: %w", d.Namespace, d.Name, v1alpha1.AnnotationHandoffSurge, err)
	}
	if s.Node != node {
		return SurgeWait, s, nil
	}
	return SurgeRunning, s, nil
}

// NewSurge is the surge that moves pods Pods of d off node: replicas go up by pods, and the
// surge is done once as many Pods are Ready elsewhere as were Ready before — never more than
// the base count, which is all that can ever be Ready elsewhere with base+pods replicas and
// the surge on this node. readyNow is counted live: right after another node's handoff the
// status still counts that node's leaving Pods.
func NewSurge(d *appsv1.Deployment, node string, pods int, readyNow int32) Surge {
	base := ptr.Deref(d.Spec.Replicas, 1)
	return Surge{Node: node, Base: base, Surge: int32(pods), ReadyBefore: min(readyNow, base)}
}

// SurgeTarget is the Ready count elsewhere that ends the surge s.
func SurgeTarget(s Surge) int32 { return min(s.ReadyBefore, s.Base) }

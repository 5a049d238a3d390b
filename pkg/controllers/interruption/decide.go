// Package interruption turns interruption notices (Lifeboat's SQS queue and Karpenter's
// SpotInterrupted events) into at most one resume decision per interrupted Node: mark the Node
// interrupted, plan which standby nodes hold its protected Pods (first-fit decreasing), claim
// them in the API (the durable record) and StartInstances. A second reconciler finishes the
// activation of resumed nodes (standby taint off when Ready) and re-drives a resume a crash
// interrupted.
package interruption

import (
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
)

// Signal is what a notice means for the Node of the instance.
type Signal int

const (
	// Ignore: nothing to do.
	Ignore Signal = iota
	// Interrupt: the instance is going away; protect its Pods.
	Interrupt
	// Rebalance: a rebalance recommendation; acted on only by pools with PreResume.
	Rebalance
)

// Classify maps a parsed message to a Signal. Pool instances are never interrupted (their stop
// events are Lifeboat's own hibernations); the caller filters them by Node label.
func Classify(m interruption.Message) Signal {
	switch m.Kind {
	case interruption.KindSpotInterruption, interruption.KindScheduledChange:
		return Interrupt
	case interruption.KindStateChange:
		switch m.State {
		case "stopping", "stopped", "shutting-down", "terminated":
			return Interrupt
		}
	case interruption.KindRebalanceRecommendation:
		return Rebalance
	}
	return Ignore
}

// Source values of AnnotationInterruptionSource.
const (
	SourceKarpenterEvent = "karpenter-event"
	SourceRebalance      = "sqs/" + string(interruption.KindRebalanceRecommendation)
)

// KarpenterReasonSpotInterrupted is the reason of the Warning event Karpenter's AWS provider
// records on the NodeClaim and the Node when it handles a Spot interruption notice
// (karpenter-provider-aws pkg/controllers/interruption/events).
const KarpenterReasonSpotInterrupted = "SpotInterrupted"

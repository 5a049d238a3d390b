package intake

import "github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"

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
func Classify(m interruptionqueue.Message) Signal {
	switch m.Kind {
	case interruptionqueue.KindSpotInterruption, interruptionqueue.KindScheduledChange:
		return Interrupt
	case interruptionqueue.KindStateChange:
		switch m.State {
		case "stopping", "stopped", "shutting-down", "terminated":
			return Interrupt
		}
	case interruptionqueue.KindRebalanceRecommendation:
		return Rebalance
	}
	return Ignore
}

// KarpenterReasonSpotInterrupted is the reason of the Warning event Karpenter's AWS provider
// records on the NodeClaim and the Node when it handles a Spot interruption notice
// (karpenter-provider-aws pkg/controllers/interruption/events).
const KarpenterReasonSpotInterrupted = "SpotInterrupted"

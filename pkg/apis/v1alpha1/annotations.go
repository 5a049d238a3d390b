package v1alpha1

// Annotations and labels the controller writes on Nodes and workloads to keep its state in
// Kubernetes objects, never only in memory (docs/ARCHITECTURE.md "State, restarts and failing
// open"). docs/WARMPOOL.md describes each.
const (
	// LabelResumedFor on a pool Node names the interrupted Node it was resumed for. It is
	// written (with a resourceVersion precondition) before StartInstances, so a restarted or
	// duplicated decision finds the nodes already claimed.
	LabelResumedFor = Group + "/resumed-for"
	// AnnotationActivatedAt (RFC 3339) on a pool Node: when it was claimed to resume.
	AnnotationActivatedAt = Group + "/activated-at"
	// AnnotationStartRequestedAt (RFC 3339) on a claimed pool Node: when StartInstances
	// succeeded for it. A repeated decision pass does not start it again.
	AnnotationStartRequestedAt = Group + "/start-requested-at"
	// AnnotationResumedReadyAt (RFC 3339) on a pool Node: when it was first seen Ready after resuming
	// (its standby taint was removed then).
	AnnotationResumedReadyAt = Group + "/resumed-ready-at"
	// AnnotationDrainingSince (RFC 3339) on a pool Node: when its handoff started.
	AnnotationDrainingSince = Group + "/draining-since"
	// AnnotationHibernateRequestedAt (RFC 3339) on a warming pool Node: when StopInstances
	// (Hibernate=true) was sent.
	AnnotationHibernateRequestedAt = Group + "/hibernate-requested-at"
	// AnnotationWarmingSince (RFC 3339) on a pool Node: when its pre-pull started.
	AnnotationWarmingSince = Group + "/warming-since"
	// AnnotationInstanceID on a pool Node: its EC2 instance.
	AnnotationInstanceID = Group + "/instance-id"

	// AnnotationInterruptedAt (RFC 3339) on an interrupted Node: when the first notice arrived
	// (a real interruption after a rebalance recommendation replaces the recommendation's).
	AnnotationInterruptedAt = Group + "/interrupted-at"
	// AnnotationInterruptionSource on an interrupted Node: sqs/<kind> or karpenter-event.
	AnnotationInterruptionSource = Group + "/interruption-source"
	// AnnotationResumeDecision on an interrupted Node: the pool Nodes resumed for it (comma
	// separated, "none" when none was needed or available). Present = decided, once per mark: a
	// real interruption that re-marks a Node a rebalance recommendation marked removes it.
	AnnotationResumeDecision = Group + "/resume-decision"

	// AnnotationHandoffSurge on a Deployment: JSON of the surge in progress
	// ({"node":…,"base":R,"surge":n}) so a restarted controller finishes or undoes it.
	AnnotationHandoffSurge = Group + "/handoff-surge"
	// AnnotationHandoffHPAMin on a HorizontalPodAutoscaler: the minReplicas before a handoff
	// raised it.
	AnnotationHandoffHPAMin = Group + "/handoff-original-min-replicas"

	// AnnotationEvictionHold on a protected Pod of an interrupted Spot node: an RFC 3339 time
	// until which lifeboat-webhook refuses the Pod's eviction (HTTP 429, what a PodDisruptionBudget
	// answers) while its replacement starts on a lifeboat node, or "released" once Lifeboat let it
	// go. The time is the hard deadline: past it the webhook lets every eviction through, so a
	// crashed controller can never leave a hold on. Written by the bridge controller.
	AnnotationEvictionHold = Group + "/eviction-hold"
	// AnnotationKarpenterDoNotDisrupt is Karpenter's karpenter.sh/do-not-disrupt. The bridge
	// pairs a hold with it, as a duration that ends at the hold's deadline (Karpenter v1.15
	// counts it from the Pod's start), so Karpenter's eviction queue waits without calling the
	// Eviction API for a held Pod (docs/WARMPOOL.md "Bridge").
	AnnotationKarpenterDoNotDisrupt = "karpenter.sh/do-not-disrupt"
	// AnnotationDoNotDisruptByLifeboat on a Pod: "true" when the bridge wrote its
	// karpenter.sh/do-not-disrupt (and removes it on release); a user's own is never touched.
	AnnotationDoNotDisruptByLifeboat = Group + "/do-not-disrupt-by-lifeboat"
	// AnnotationBridgeSurge on a Deployment: JSON of the bridge surges in progress
	// ({"base":R,"nodes":{"<interrupted node>":n}}): replicas were raised by n for the n held Pods
	// on that node, and go back by n once those Pods are gone.
	AnnotationBridgeSurge = Group + "/bridge-surge"

	// AnnotationRecycledAt (RFC 3339) on a pool Node: when its instance was terminated after
	// the handoff.
	AnnotationRecycledAt = Group + "/recycled-at"

	// LabelPrePull marks the pre-pull Pods of warming nodes.
	LabelPrePull = Group + "/prepull"

	// LabelSeat marks the handoff's seats: placeholder Pods in Lifeboat's namespace that keep
	// room on ordinary capacity for a lifeboat Pod the handoff will evict (a StatefulSet's).
	// AnnotationSeatFor names that Pod (namespace/name), AnnotationSeatNode its lifeboat node.
	LabelSeat = Group + "/seat"
	// LabelSeatHost on a protected Pod: the kubernetes.io/hostname of the node where a seat kept
	// room, images pulled, for it (the webhook writes it from AnnotationSeats or
	// AnnotationBridgeSeats when the Pod is re-created; a hostname is a valid label value). The
	// lifeboat scheduler binds the Pod there while that node can take it: a preference alone
	// loses to the default scores (topology spread, least allocated) on an emptier node, which
	// has the Pod pull its images again while it is down.
	LabelSeatHost      = Group + "/seat-host"
	AnnotationSeatFor  = Group + "/seat-for"
	AnnotationSeatNode = Group + "/seat-node"
	// AnnotationSeats on a draining lifeboat Node records where the seat of each Pod the handoff
	// evicts was: a JSON object from "namespace/name" to the kubernetes.io/hostname of the seat's
	// node (policy.SeatRecord). The webhook gives a Pod re-created under that name (a
	// StatefulSet's) a preference for that node, which pulled its images for the seat.
	AnnotationSeats = Group + "/seats"
	// AnnotationBridgeSeats on a lifeboat Node records, in the same form, the seats of the held
	// StatefulSet Pods the bridge moved straight to their seat's node (their seat's room was up
	// before they moved to a lifeboat). The bridge writes it, the handoff AnnotationSeats: one
	// writer per annotation.
	AnnotationBridgeSeats = Group + "/bridge-seats"

	// FinalizerWarmPool terminates a deleted pool's instances before the WarmPool goes.
	FinalizerWarmPool = Group + "/instances"
)

// Event reasons the controller records on WarmPools and Nodes.
const (
	EventLaunched            = "Launched"
	EventHibernating         = "Hibernating"
	EventStandby             = "Standby"
	EventReplaced            = "Replaced"
	EventInterrupted         = "Interrupted"
	EventResumed             = "Resumed"
	EventResumeFailed        = "ResumeFailed"
	EventNoStandby           = "NoStandbyCapacity"
	EventActive              = "Active"
	EventHandoffStarted      = "HandoffStarted"
	EventDrainBlockedByPDB   = "DrainBlockedByPDB"
	EventHandoffDeadline     = "HandoffDeadlineExceeded"
	EventRecycled            = "Recycled"
	EventGarbageCollected    = "GarbageCollected"
	EventNodePoolNotReady    = "NodePoolNotReady"
	EventNodePoolPatched     = "NodePoolPatched"
	EventHibernationDegraded = "HibernationDegraded"
	EventEvictionHeld        = "EvictionHeld"
	EventEvictionReleased    = "EvictionReleased"
	EventBridged             = "Bridged"
	EventBridgeMove          = "BridgeMove"
	EventSeatMove            = "SeatMove"
)

// EvictionHoldReleased is the value of AnnotationEvictionHold once the hold is released.
const EvictionHoldReleased = "released"

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ReclaimBackPolicySpec says which Karpenter NodePools' On-Demand fallback nodes reclaim-back
// moves back to Spot, when, and how carefully (docs/RECLAIMBACK.md).
// +kubebuilder:validation:XValidation:rule="(has(self.always) && self.always) != (has(self.windows) && size(self.windows) > 0)",message="set exactly one of always: true and windows: moves run either at any time or inside maintenance windows"
type ReclaimBackPolicySpec struct {
	// NodePools selects Karpenter's NodePools. Empty: every NodePool.
	// +optional
	NodePools NodePoolSelector `json:"nodePools,omitempty"`

	// Always lets moves start at any time. Exactly one of always and windows is set.
	// +optional
	Always bool `json:"always,omitempty"`
	// Windows are the maintenance windows in which moves may start. A move that started inside
	// a window finishes (or is undone) after it closes.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Windows []MaintenanceWindow `json:"windows,omitempty"`

	// MaxInFlight is how many nodes move at once: a count, or a percentage of the fallback nodes
	// (rounded up, at least one).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? self.matches('^[0-9]+%$') && int(self.replace('%', '')) >= 1 && int(self.replace('%', '')) <= 100 : (self >= 1 && self <= 100)",message="maxInFlight must be an integer from 1 to 100 or a percentage from 1% to 100%"
	// +kubebuilder:default=1
	// +optional
	MaxInFlight *intstr.IntOrString `json:"maxInFlight,omitempty"`

	// MinSpotStability is how long no interruption of the NodePool's Spot instance types may
	// have happened (Lifeboat's capacity-pool interruption telemetry) before a move starts.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="minSpotStability must be between 0s and 168h (the telemetry's window bounds what it can see)"
	// +kubebuilder:default="30m"
	// +optional
	MinSpotStability *metav1.Duration `json:"minSpotStability,omitempty"`

	// MinPlacementScore is the lowest EC2 Spot placement score (1–10), over the zones the
	// NodePool uses, at which a move starts.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +kubebuilder:default=7
	// +optional
	MinPlacementScore int32 `json:"minPlacementScore,omitempty"`

	// CoolDown is the wait after a failed move (Karpenter launched On-Demand again, or the
	// replacements did not become Ready in time): initial, doubling with each failure in a row,
	// capped at max.
	// +kubebuilder:default={initial: "10m", max: "4h"}
	// +optional
	CoolDown CoolDownSpec `json:"coolDown,omitempty"`

	// MoveTimeout bounds a move: replacements not Ready (or the node not empty) by then undo it
	// and count as a failure.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('6h')",message="moveTimeout must be between 30s and 6h"
	// +kubebuilder:default="15m"
	// +optional
	MoveTimeout *metav1.Duration `json:"moveTimeout,omitempty"`
}

// NodePoolSelector selects Karpenter NodePools by name, by label, or both (a NodePool is
// selected when either matches). Both empty: every NodePool.
type NodePoolSelector struct {
	// Names of NodePools.
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Names []string `json:"names,omitempty"`
	// Selector on the NodePools' labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// MaintenanceWindow opens on each of days at start, wall-clock time in timeZone, for duration.
type MaintenanceWindow struct {
	// Days: Mon, Tue, Wed, Thu, Fri, Sat, Sun, or Daily.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun;Daily
	// +listType=set
	Days []string `json:"days"`
	// Start is HH:MM, 00:00 to 23:59.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Duration the window stays open, at most 24h (a window may cross midnight).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="a window's duration must be between 1m and 24h"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is an IANA name (Europe/Berlin). Empty: UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// CoolDownSpec is the back-off after failed moves.
// +kubebuilder:validation:XValidation:rule="duration(self.initial) <= duration(self.max)",message="coolDown.initial must not exceed coolDown.max"
type CoolDownSpec struct {
	// Initial wait after the first failure.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:default="10m"
	// +optional
	Initial metav1.Duration `json:"initial"`
	// Max caps the doubling.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:default="4h"
	// +optional
	Max metav1.Duration `json:"max"`
}

// ReclaimBackPolicyStatus is what the controller observed and did.
type ReclaimBackPolicyStatus struct {
	// ObservedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// FallbackNodes is the number of On-Demand nodes of the selected NodePools that Spot could
	// take back (movable now or in flight).
	// +optional
	FallbackNodes int32 `json:"fallbackNodes"`
	// InFlight are the nodes being moved now.
	// +listType=map
	// +listMapKey=node
	// +optional
	InFlight []MoveStatus `json:"inFlight,omitempty"`
	// NextWindow is the next opening of a window while none is open.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`
	// CoolDownUntil is when the cool-down after the last failed move ends.
	// +optional
	CoolDownUntil *metav1.Time `json:"coolDownUntil,omitempty"`
	// ConsecutiveFailures counts the failed moves since the last successful one; it sets the
	// cool-down's length.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Succeeded and Aborted count finished moves.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Aborted int32 `json:"aborted,omitempty"`
	// ReturnedNodes is the number of On-Demand nodes moved back to Spot so far.
	// +optional
	ReturnedNodes int32 `json:"returnedNodes,omitempty"`
	// OnDemandNodeHoursReturned is an estimate, as a decimal string: the On-Demand node-hours
	// not run since the moves, counting each returned node from its move on (a fallback node
	// stays until it is empty otherwise: consolidation WhenEmpty).
	// +optional
	OnDemandNodeHoursReturned string `json:"onDemandNodeHoursReturned,omitempty"`
	// LastMove is the last finished move.
	// +optional
	LastMove *FinishedMove `json:"lastMove,omitempty"`
	// AccountedAt is when OnDemandNodeHoursReturned was last brought up to date.
	// +optional
	AccountedAt *metav1.Time `json:"accountedAt,omitempty"`
	// Conditions: Ready (the policy is valid and the controller acts on it), Blocked (why no
	// move starts now: WindowClosed, CoolingDown, LowPlacementScore, SpotUnstable,
	// NoFallbackNodes, MaxInFlight, ProbeFailed, StartFailed; Moving when False).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MoveStatus is one node being moved.
type MoveStatus struct {
	Node     string `json:"node"`
	NodePool string `json:"nodePool"`
	// Phase: Surging, Draining or Aborting.
	Phase   string      `json:"phase"`
	Started metav1.Time `json:"started"`
}

// AnnotationReclaimBack on a Karpenter On-Demand Node being moved back to Spot: JSON of the
// move (policy, NodePool, phase, start, the owners of its Pods) so that a restarted controller
// finishes or undoes it (pkg/controllers/reclaimback/reclaimplan.Move).
const AnnotationReclaimBack = Group + "/reclaim-back"

// Event reasons of reclaim-back, on the Node and its NodePool (a bounded set).
const (
	EventReclaimBackStarted   = "ReclaimBackStarted"
	EventReclaimBackSucceeded = "ReclaimBackSucceeded"
	EventReclaimBackAborted   = "ReclaimBackAborted"
)

// FinalizerReclaimBack on a ReclaimBackPolicy: its moves in flight are undone before it goes
// (a node left cordoned and surged by a deleted policy would stay so).
const FinalizerReclaimBack = Group + "/reclaim-back-moves"

// FinishedMove is a move that succeeded or was aborted.
type FinishedMove struct {
	Node     string      `json:"node"`
	NodePool string      `json:"nodePool"`
	Started  metav1.Time `json:"started"`
	Finished metav1.Time `json:"finished"`
	// Result: Succeeded or Aborted.
	Result string `json:"result"`
	// Reason of an abort: OnDemandAgain, Timeout.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// Results of a FinishedMove.
const (
	MoveSucceeded = "Succeeded"
	MoveAborted   = "Aborted"
)

// Condition types and reasons of a ReclaimBackPolicy.
const (
	ConditionBlocked = "Blocked"

	ReasonPolicyValid       = "Valid"
	ReasonPolicyInvalid     = "Invalid"
	ReasonNotBlocked        = "Moving"
	ReasonWindowClosed      = "WindowClosed"
	ReasonCoolingDown       = "CoolingDown"
	ReasonLowPlacementScore = "LowPlacementScore"
	ReasonSpotUnstable      = "SpotUnstable"
	ReasonNoFallbackNodes   = "NoFallbackNodes"
	ReasonMaxInFlight       = "MaxInFlight"
	ReasonProbeFailed       = "ProbeFailed"
	ReasonStartFailed       = "StartFailed"
)

// ReclaimBackPolicy moves Karpenter's On-Demand fallback nodes back to Spot once Spot
// capacity is back: one node at a time, surge first, inside maintenance windows.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rbp,categories=lifeboat
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Fallback",type=integer,JSONPath=`.status.fallbackNodes`
// +kubebuilder:printcolumn:name="Moving",type=string,JSONPath=`.status.inFlight[*].node`
// +kubebuilder:printcolumn:name="Returned",type=integer,JSONPath=`.status.returnedNodes`
// +kubebuilder:printcolumn:name="Blocked",type=string,JSONPath=`.status.conditions[?(@.type=="Blocked")].reason`
// +kubebuilder:printcolumn:name="Next-Window",type=date,JSONPath=`.status.nextWindow`,priority=1
// +kubebuilder:printcolumn:name="Cool-Down-Until",type=date,JSONPath=`.status.coolDownUntil`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ReclaimBackPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ReclaimBackPolicySpec `json:"spec"`
	// +optional
	Status ReclaimBackPolicyStatus `json:"status,omitempty"`
}

// ReclaimBackPolicyList is a list of ReclaimBackPolicies.
// +kubebuilder:object:root=true
type ReclaimBackPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ReclaimBackPolicy `json:"items"`
}

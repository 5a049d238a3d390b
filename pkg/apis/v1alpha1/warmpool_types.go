package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SizeAuto is the value of spec.size that sizes the pool from the protected workloads.
const SizeAuto = "auto"

// HandoffPolicy says when resumed lifeboat nodes are handed back to Karpenter's capacity.
// +kubebuilder:validation:Enum=AfterActiveDuration;WhenReplacementReady
type HandoffPolicy string

const (
	// HandoffAfterActiveDuration cordons and drains a lifeboat node activeDuration after it was
	// activated.
	HandoffAfterActiveDuration HandoffPolicy = "AfterActiveDuration"
	// HandoffWhenReplacementReady starts earlier: as soon as no Pod is Pending and every
	// Karpenter NodeClaim is initialized (the replacement capacity is there), but never later
	// than activeDuration.
	HandoffWhenReplacementReady HandoffPolicy = "WhenReplacementReady"
)

// AfterUsePolicy says what happens to an empty lifeboat node after its handoff.
// +kubebuilder:validation:Enum=Terminate;Rehibernate
type AfterUsePolicy string

const (
	// AfterUseTerminate terminates the instance; the pool launches a fresh one.
	AfterUseTerminate AfterUsePolicy = "Terminate"
	// AfterUseRehibernate hibernates the instance again and returns it to standby.
	AfterUseRehibernate AfterUsePolicy = "Rehibernate"
)

// RebalancePolicy says what an EC2 rebalance recommendation does.
// +kubebuilder:validation:Enum=Ignore;PreResume
type RebalancePolicy string

const (
	// RebalanceIgnore ignores rebalance recommendations (they carry no guaranteed lead time and
	// are often followed by nothing).
	RebalanceIgnore RebalancePolicy = "Ignore"
	// RebalancePreResume treats a recommendation like an interruption notice: resume now.
	RebalancePreResume RebalancePolicy = "PreResume"
)

// PrePullPolicy chooses the images pulled onto a warming node before it hibernates.
// +kubebuilder:validation:Enum=Auto;List;None
type PrePullPolicy string

const (
	// PrePullAuto pulls the images of the protected Pods running in the cluster.
	PrePullAuto PrePullPolicy = "Auto"
	// PrePullList pulls spec.prePull.images.
	PrePullList PrePullPolicy = "List"
	// PrePullNone pulls nothing.
	PrePullNone PrePullPolicy = "None"
)

// WarmPoolSpec is the desired warm pool.
// +kubebuilder:validation:XValidation:rule="has(self.launchTemplateID) || has(self.imageID)",message="set launchTemplateID, or imageID (with rootVolumeGiB): the pool needs something to launch"
// +kubebuilder:validation:XValidation:rule="has(self.launchTemplateID) || (has(self.rootVolumeGiB) && self.rootVolumeGiB > 0)",message="rootVolumeGiB is required without a launch template: hibernation writes RAM to the encrypted root volume, so it must be larger than the instance's memory"
type WarmPoolSpec struct {
	// Size is the number of hibernated standby nodes to keep, or "auto": enough nodes to hold
	// the protected Pods' requests of the largest capacity pool (instance type × zone) in use,
	// the unit that EC2 reclaims together, capped by maxAutoSize.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? self == 'auto' : (self >= 0 && self <= 500)",message="size must be an integer from 0 to 500, or \"auto\""
	// +kubebuilder:default=1
	Size intstr.IntOrString `json:"size"`

	// MaxAutoSize caps size "auto".
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	// +kubebuilder:default=10
	// +optional
	MaxAutoSize int32 `json:"maxAutoSize,omitempty"`

	// InstanceTypes are tried in order at launch (the next one when EC2 has no capacity for
	// the previous one). Hibernation needs an instance family that supports it and at most
	// 150 GiB of RAM; the type of a hibernated instance cannot change.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+\.[a-z0-9-]+$`
	// +listType=set
	InstanceTypes []string `json:"instanceTypes"`

	// SubnetIDs (and so zones) are tried in order for each instance type. Empty: the launch
	// template's subnet.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^subnet-[0-9a-z]+$`
	// +optional
	SubnetIDs []string `json:"subnetIDs,omitempty"`

	// LaunchTemplateID is launched at its $Default version. Either it or imageID is required.
	// +kubebuilder:validation:Pattern=`^lt-[0-9a-z]+$`
	// +optional
	LaunchTemplateID string `json:"launchTemplateID,omitempty"`
	// ImageID is the AMI, when no launch template is used.
	// +kubebuilder:validation:Pattern=`^ami-[0-9a-z]+$`
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// InstanceProfile is the IAM instance profile's name or ARN.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// SecurityGroupIDs of the instances.
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Pattern=`^sg-[0-9a-z]+$`
	// +optional
	SecurityGroupIDs []string `json:"securityGroupIDs,omitempty"`
	// UserData is the raw (not base64) user data that joins the node to the cluster. It must
	// register the node with the taints lifeboat.dev/lifeboat=<pool>:NoSchedule and
	// lifeboat.dev/standby:NoSchedule and the label lifeboat.dev/pool=<pool> (docs/WARMPOOL.md).
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	UserData string `json:"userData,omitempty"`
	// RootVolumeGiB sizes the encrypted gp3 root volume; it must hold the instance's RAM plus
	// the OS and images. Required without a launch template.
	// +kubebuilder:validation:Minimum=8
	// +kubebuilder:validation:Maximum=16384
	// +optional
	RootVolumeGiB int32 `json:"rootVolumeGiB,omitempty"`
	// Tags are added to the instances and their volumes.
	// +kubebuilder:validation:MaxProperties=40
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('karpenter.sh/') && !k.startsWith('karpenter.k8s.aws/') && !k.startsWith('kubernetes.io/cluster/') && !k.startsWith('lifeboat.dev/'))",message="tags must not use the karpenter.sh/, karpenter.k8s.aws/, kubernetes.io/cluster/ or lifeboat.dev/ prefixes: Karpenter garbage-collects instances with its tags, and lifeboat.dev/ tags are Lifeboat's bookkeeping"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`

	// NodeLabels are added to the pool's Nodes (by the controller, once they register).
	// +kubebuilder:validation:MaxProperties=40
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('lifeboat.dev/') && !k.startsWith('karpenter.sh/'))",message="nodeLabels must not use the lifeboat.dev/ or karpenter.sh/ prefixes: pool nodes are not Karpenter's, and lifeboat.dev/ labels are set by Lifeboat"
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// PrePull chooses the images pulled before a node hibernates.
	// +kubebuilder:default={policy: Auto}
	// +optional
	PrePull PrePull `json:"prePull,omitempty"`

	// ActiveDuration is how long a resumed node serves before its handoff starts.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('24h')",message="activeDuration must be between 30s and 24h"
	// +kubebuilder:default="5m"
	// +optional
	ActiveDuration *metav1.Duration `json:"activeDuration,omitempty"`

	// Handoff says when the handoff starts.
	// +kubebuilder:default=AfterActiveDuration
	// +optional
	Handoff HandoffPolicy `json:"handoff,omitempty"`

	// HandoffDeadline bounds the whole drain of a lifeboat node. After it, the remaining Pods
	// are deleted even where a PodDisruptionBudget forbids it, and a Degraded condition and an
	// event say so.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="handoffDeadline must be at least 1m: it bounds the whole drain of a lifeboat node"
	// +kubebuilder:default="15m"
	// +optional
	HandoffDeadline *metav1.Duration `json:"handoffDeadline,omitempty"`

	// AfterUse says what happens to an empty lifeboat node after the handoff.
	// +kubebuilder:default=Terminate
	// +optional
	AfterUse AfterUsePolicy `json:"afterUse,omitempty"`

	// MaxStandbyAge replaces standby instances older than this. EC2 does not support
	// instances hibernated for more than 60 days.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('1440h')",message="maxStandbyAge must be between 1h and 1440h (60 days, EC2's hibernation limit)"
	// +kubebuilder:default="720h"
	// +optional
	MaxStandbyAge *metav1.Duration `json:"maxStandbyAge,omitempty"`

	// RebalanceRecommendation says what an EC2 rebalance recommendation does.
	// +kubebuilder:default=Ignore
	// +optional
	RebalanceRecommendation RebalancePolicy `json:"rebalanceRecommendation,omitempty"`

	// Karpenter configures the NodePool check.
	// +optional
	Karpenter KarpenterSpec `json:"karpenter,omitempty"`

	// Pricing overrides the controller's prices (--on-demand-hourly-price,
	// --spot-price-fraction, --ebs-gib-month-price) in this pool's cost estimate (status.cost).
	// +optional
	Pricing *Pricing `json:"pricing,omitempty"`
}

// Pricing holds prices in US dollars, as decimal strings (the API has no floats).
type Pricing struct {
	// OnDemandHourly is the hourly On-Demand price of the pool's instance type (the first of
	// instanceTypes): what a resumed pool node costs while it runs.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	OnDemandHourly string `json:"onDemandHourly,omitempty"`
	// SpotFraction is the Spot price as a fraction of OnDemandHourly: overprovisioning keeps the
	// same cover as running Spot nodes.
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	SpotFraction string `json:"spotFraction,omitempty"`
	// EBSGiBMonth is the price of a GiB-month of the root volumes (gp3).
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	EBSGiBMonth string `json:"ebsGiBMonth,omitempty"`
}

// PrePull chooses the images pulled before a node hibernates.
// +kubebuilder:validation:XValidation:rule="self.policy != 'List' || (has(self.images) && size(self.images) > 0)",message="prePull.images must list at least one image when prePull.policy is List"
// +kubebuilder:validation:XValidation:rule="self.policy == 'List' || !has(self.images) || size(self.images) == 0",message="prePull.images is only used with prePull.policy List; remove it or set the policy to List"
type PrePull struct {
	// Policy: Auto (the images of protected Pods), List (images) or None.
	// +kubebuilder:default=Auto
	Policy PrePullPolicy `json:"policy,omitempty"`
	// Images to pull with policy List. The kubelet reports at most 50 images in
	// node.status.images, which is how Lifeboat proves they are present.
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=set
	// +optional
	Images []string `json:"images,omitempty"`
	// Timeout bounds the pre-pull; a node whose images are not all present by then is
	// replaced.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:default="10m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// KarpenterSpec configures how Lifeboat treats Karpenter's NodePools.
type KarpenterSpec struct {
	// Manage lets Lifeboat patch NodePools so that they allow Spot. Otherwise it only reports
	// (condition NodePoolsReady and an event) what to change.
	// +optional
	Manage bool `json:"manage,omitempty"`
}

// WarmPoolStatus is the observed pool.
type WarmPoolStatus struct {
	// ObservedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Desired is the resolved standby size (size "auto" resolved).
	// +optional
	Desired int32 `json:"desired"`
	// Node counts per state.
	// +optional
	Warming int32 `json:"warming"`
	// +optional
	Standby int32 `json:"standby"`
	// +optional
	Active int32 `json:"active"`
	// +optional
	Draining int32 `json:"draining"`
	// Slots are the pool's standby places. Each holds one instance generation at a time; the
	// generation is recorded before the launch so that a retried launch reuses its EC2 client
	// token (idempotent across restarts) and a replacement never reuses one.
	// +listType=map
	// +listMapKey=slot
	// +optional
	Slots []SlotStatus `json:"slots,omitempty"`
	// LastActivation is when the pool last resumed a node.
	// +optional
	LastActivation *metav1.Time `json:"lastActivation,omitempty"`
	// Images are the images pre-pulled onto new nodes (resolved from prePull).
	// +listType=atomic
	// +optional
	Images []string `json:"images,omitempty"`
	// Cost is the pool's estimated cost beside that of overprovisioning the same cover
	// (docs/WARMPOOL.md "Cost model").
	// +optional
	Cost *CostStatus `json:"cost,omitempty"`
	// Conditions: Ready (the desired standby nodes are hibernated), Degraded (something needs
	// attention: launches failing, a drain blocked), NodePoolsReady (Karpenter allows Spot and
	// is diversified).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CostStatus is an estimate in US dollars, as decimal strings, from spec.pricing or the
// controller's prices.
type CostStatus struct {
	// Monthly is what the cover (the desired standby nodes) costs hibernated for a month:
	// their root volumes. Resumed time after an interruption is billed on top (Hourly).
	Monthly string `json:"monthly"`
	// OverprovisioningMonthly is what the same cover costs as running Spot nodes (balloon
	// Pods) for a month; empty when no On-Demand price is known.
	// +optional
	OverprovisioningMonthly string `json:"overprovisioningMonthly,omitempty"`
	// Hourly is the cost now: every pool instance's root volume plus the running instances'
	// On-Demand compute (the volumes only, when no On-Demand price is known).
	Hourly string `json:"hourly"`
}

// SlotStatus is one standby place of the pool.
type SlotStatus struct {
	Slot int32 `json:"slot"`
	// Generation of the instance the slot holds or is launching.
	Generation int32 `json:"generation"`
	// InstanceID once known.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`
}

// Condition types and reasons of a WarmPool.
const (
	ConditionReady          = "Ready"
	ConditionDegraded       = "Degraded"
	ConditionNodePoolsReady = "NodePoolsReady"

	ReasonStandbyReady        = "StandbyReady"
	ReasonWarming             = "Warming"
	ReasonAsExpected          = "AsExpected"
	ReasonLaunchFailed        = "LaunchFailed"
	ReasonHibernationDegraded = "HibernationDegraded"
	ReasonResumeFailed        = "ResumeFailed"
	ReasonDrainBlockedByPDB   = "DrainBlockedByPDB"
	ReasonHandoffDeadline     = "HandoffDeadlineExceeded"
	ReasonNoSpot              = "SpotNotAllowed"
	ReasonNotDiversified      = "NotDiversified"
	ReasonNodePoolsOK         = "SpotDiversified"
	ReasonNoNodePools         = "NoNodePools"
)

// WarmPool keeps hibernated nodes ready to resume when Spot capacity is reclaimed.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=wp,categories=lifeboat
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Standby",type=integer,JSONPath=`.status.standby`
// +kubebuilder:printcolumn:name="Warming",type=integer,JSONPath=`.status.warming`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Draining",type=integer,JSONPath=`.status.draining`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Monthly",type=string,JSONPath=`.status.cost.monthly`,description="Estimated monthly cost of the hibernated cover, US dollars"
// +kubebuilder:printcolumn:name="Overprovisioning",type=string,JSONPath=`.status.cost.overprovisioningMonthly`,priority=1,description="Monthly cost of the same cover as running Spot nodes, US dollars"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a WarmPool name is used as a label and taint value: at most 63 characters"
type WarmPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec WarmPoolSpec `json:"spec"`
	// +optional
	Status WarmPoolStatus `json:"status,omitempty"`
}

// WarmPoolList is a list of WarmPools.
// +kubebuilder:object:root=true
type WarmPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WarmPool `json:"items"`
}

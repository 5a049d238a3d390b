package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Karpenter's capacity types (karpenter.sh/capacity-type values).
const (
	CapacitySpot     = "spot"
	CapacityOnDemand = "on-demand"
)

// SpotPreferenceWeight is the weight of the preferred Spot term of the preferred tiers. The
// lifeboat scheduler's score outweighs it, so preferred tiers still land on lifeboat nodes.
const SpotPreferenceWeight int32 = 100

// PriorityClass is what the webhook needs to know about a scheduling.k8s.io PriorityClass.
type PriorityClass struct {
	Name             string
	Value            int32
	PreemptionPolicy *corev1.PreemptionPolicy
	GlobalDefault    bool
}

// Placement is the input to ApplyPlacement besides the Pod.
type Placement struct {
	Tier v1alpha1.Tier
	// TierClass is the tier's PriorityClass as it exists in the cluster; nil when it is missing.
	TierClass *PriorityClass
	// PodClass is the class the Pod already names (set by the user, or by the Priority admission
	// plugin from the global default); nil when the Pod names none.
	PodClass *PriorityClass
	// LifeboatActive: a lifeboat node is active now (Config.SchedulerRouting).
	LifeboatActive bool
	// SeatHost is the kubernetes.io/hostname of the node where the handoff kept a seat for the
	// Pod's previous incarnation (SeatRecord): "" for none.
	SeatHost string
}

// ApplyPlacement rewrites a protected Pod for its tier (docs/ARCHITECTURE.md "Tiers"). It only adds to what
// the user wrote: capacity-type affinity is merged into the user's terms (and skipped when the
// user already constrains karpenter.sh/capacity-type), tolerations are appended when missing,
// a priority class the user chose is kept. Applying it twice changes nothing. It returns notes
// for the admission warnings and logs.
func (c Config) ApplyPlacement(pod *corev1.Pod, p Placement) []string {
	var notes []string
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[v1alpha1.LabelProtected] = "true"
	pod.Labels[v1alpha1.LabelTier] = string(p.Tier)

	applyCapacityAffinity(pod, p.Tier)
	preferSeatNode(pod, p.SeatHost)
	if p.SeatHost != "" {
		pod.Labels[v1alpha1.LabelSeatHost] = p.SeatHost
	}
	if p.Tier != v1alpha1.TierCritical {
		addToleration(pod, corev1.Toleration{Key: c.SpotTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	if c.routesToLifeboatScheduler(p) && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
		pod.Spec.SchedulerName = c.SchedulerName
	}
	if n := c.applyPriority(pod, p); n != "" {
		notes = append(notes, n)
	}
	return notes
}

// routesToLifeboatScheduler: the Pod is to get SchedulerName (Config.SchedulerRouting), and
// always when it has a seat (SeatHost, whatever the routing): the lifeboat scheduler binds it
// to its seat's node while that node can take it (LabelSeatHost), where the default
// scheduler has only the preference, which an emptier node's scores outweigh (measured,
// compressed simulation: 6 of 29 moves of a StatefulSet's Pods landed on a new node, which
// pulled the image again, 9–11 s down instead of 3 s). It never puts a Pod with a seat on a lifeboat.
func (c Config) routesToLifeboatScheduler(p Placement) bool {
	if c.SchedulerName == "" {
		return false
	}
	return c.SchedulerRouting == RouteAlways || p.LifeboatActive || p.SeatHost != ""
}

// applyPriority sets priorityClassName with the matching priority and preemptionPolicy: the
// Priority admission plugin resolved them before any mutating webhook runs, so changing the
// name alone would leave a Pod whose priority contradicts its class (kubernetes #102724).
func (c Config) applyPriority(pod *corev1.Pod, p Placement) string {
	want := c.PriorityClasses[p.Tier]
	current := pod.Spec.PriorityClassName
	switch {
	case current == want:
		// Already ours (reinvocation); fall through to make the numbers consistent.
	case current != "" && (p.PodClass == nil || !p.PodClass.GlobalDefault || c.Allowed(current)):
		// The user's own choice. A class that is the cluster's global default was most likely put
		// there by the Priority plugin, not the user, so the tier's class replaces it.
		return ""
	}
	if p.TierClass == nil || p.TierClass.Name != want || !c.Allowed(p.TierClass.Name) {
		return fmt.Sprintf("PriorityClass %s of tier %s does not exist, so the Pod keeps its priority; apply manifests/webhook/priorityclasses.yaml", want, p.Tier)
	}
	if base := ptr.Deref(pod.Spec.Priority, 0); current != want && p.TierClass.Value < base {
		// Never lower a Pod's priority: ordinary Pods preempt strictly lower priorities, so a
		// lower one would make it easier to preempt than without Lifeboat.
		return fmt.Sprintf("PriorityClass %s of tier %s (%d) is below the Pod's priority %d (the cluster's default class), so the Pod keeps it: a lower priority would let ordinary Pods preempt it", want, p.Tier, p.TierClass.Value, base)
	}
	pod.Spec.PriorityClassName = p.TierClass.Name
	value := p.TierClass.Value
	pod.Spec.Priority = &value
	policy := corev1.PreemptLowerPriority
	if p.TierClass.PreemptionPolicy != nil {
		policy = *p.TierClass.PreemptionPolicy
	}
	pod.Spec.PreemptionPolicy = &policy
	return ""
}

// applyCapacityAffinity adds the tier's karpenter.sh/capacity-type constraint unless the user
// already constrains capacity type themselves (their choice wins, and it makes the mutation
// idempotent: the second pass finds the first pass's terms).
func applyCapacityAffinity(pod *corev1.Pod, tier v1alpha1.Tier) {
	if constrainsCapacityType(pod) {
		return
	}
	switch tier {
	case v1alpha1.TierCritical:
		// Required On-Demand; pool nodes carry no karpenter.sh labels, so critical Pods never match them.
		mergeRequired(pod, []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{capacityIn(CapacityOnDemand)}},
		})
	case v1alpha1.TierBestEffort:
		// Required Spot, ORed with lifeboat pool nodes (which are not Karpenter's). Karpenter tries
		// terms in order, so it still launches Spot.
		mergeRequired(pod, []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{capacityIn(CapacitySpot)}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelPool, Operator: corev1.NodeSelectorOpExists}}},
		})
	default:
		// stateless, checkpointed: prefer Spot, allow On-Demand and pool nodes.
		aff := nodeAffinity(pod)
		aff.PreferredDuringSchedulingIgnoredDuringExecution = append(aff.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.PreferredSchedulingTerm{
				Weight:     SpotPreferenceWeight,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{capacityIn(CapacitySpot)}},
			})
	}
}

func capacityIn(v string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}
}

func nodeAffinity(pod *corev1.Pod) *corev1.NodeAffinity {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	return pod.Spec.Affinity.NodeAffinity
}

// mergeRequired ANDs ours (an OR of terms) with the user's required terms (also ORed): the result
// is every user term combined with every one of ours, users' terms first.
func mergeRequired(pod *corev1.Pod, ours []corev1.NodeSelectorTerm) {
	aff := nodeAffinity(pod)
	if aff.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(aff.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		aff.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: ours}
		return
	}
	users := aff.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	merged := make([]corev1.NodeSelectorTerm, 0, len(users)*len(ours))
	for _, u := range users {
		for _, o := range ours {
			t := *u.DeepCopy()
			t.MatchExpressions = append(t.MatchExpressions, o.MatchExpressions...)
			merged = append(merged, t)
		}
	}
	aff.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = merged
}

func constrainsCapacityType(pod *corev1.Pod) bool {
	if _, ok := pod.Spec.NodeSelector[v1alpha1.LabelCapacityType]; ok {
		return true
	}
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		return false
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			if termMentions(t, v1alpha1.LabelCapacityType) {
				return true
			}
		}
	}
	for _, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		if termMentions(t.Preference, v1alpha1.LabelCapacityType) {
			return true
		}
	}
	return false
}

func termMentions(t corev1.NodeSelectorTerm, key string) bool {
	for _, r := range t.MatchExpressions {
		if r.Key == key {
			return true
		}
	}
	return false
}

// addToleration appends tol unless the Pod already tolerates that taint (including a wildcard
// toleration), so repeated mutation never duplicates it.
func addToleration(pod *corev1.Pod, tol corev1.Toleration) {
	for _, t := range pod.Spec.Tolerations {
		keyOK := t.Key == tol.Key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)
		effectOK := t.Effect == "" || t.Effect == tol.Effect
		if keyOK && effectOK && t.Operator == corev1.TolerationOpExists {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, tol)
}

package policy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func class(name string, value int32, globalDefault bool) *PriorityClass {
	return &PriorityClass{Name: name, Value: value, PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority), GlobalDefault: globalDefault}
}

var tierClasses = map[v1alpha1.Tier]*PriorityClass{
	v1alpha1.TierCritical:     class(v1alpha1.PriorityClassCritical, v1alpha1.PriorityCritical, false),
	v1alpha1.TierStateless:    class(v1alpha1.PriorityClassStateless, v1alpha1.PriorityStateless, false),
	v1alpha1.TierCheckpointed: class(v1alpha1.PriorityClassCheckpointed, v1alpha1.PriorityCheckpointed, false),
	v1alpha1.TierBestEffort:   class(v1alpha1.PriorityClassBestEffort, v1alpha1.PriorityBestEffort, false),
}

var (
	spotToleration = corev1.Toleration{Key: v1alpha1.TaintSpot, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	reqSpot        = corev1.NodeSelectorRequirement{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}
	reqOnDemand    = corev1.NodeSelectorRequirement{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}
	reqPool        = corev1.NodeSelectorRequirement{Key: v1alpha1.LabelPool, Operator: corev1.NodeSelectorOpExists}
	reqZone        = corev1.NodeSelectorRequirement{Key: v1alpha1.LabelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}
	reqArch        = corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
)

func required(terms ...[]corev1.NodeSelectorRequirement) *corev1.Affinity {
	ns := &corev1.NodeSelector{}
	for _, t := range terms {
		ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: t})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ns}}
}

func reqs(r ...corev1.NodeSelectorRequirement) []corev1.NodeSelectorRequirement { return r }

func preferredSpot() corev1.PreferredSchedulingTerm {
	return corev1.PreferredSchedulingTerm{Weight: SpotPreferenceWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: reqs(reqSpot)}}
}

func TestApplyPlacement(t *testing.T) {
	c := DefaultConfig()
	tests := []struct {
		name     string
		tier     v1alpha1.Tier
		pod      corev1.PodSpec
		podClass *PriorityClass
		noClass  bool
		want     func(s *corev1.PodSpec) // edits a copy of the input into the expected spec
		notes    int
	}{
		{
			name: "stateless on an empty pod",
			tier: v1alpha1.TierStateless,
			want: func(s *corev1.PodSpec) {
				s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferredSpot()}}}
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassStateless
				s.Priority = ptr.To(v1alpha1.PriorityStateless)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "critical: required on-demand merged into each user term, no spot toleration",
			tier: v1alpha1.TierCritical,
			pod:  corev1.PodSpec{Affinity: required(reqs(reqZone), reqs(reqArch)), SchedulerName: corev1.DefaultSchedulerName},
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqZone, reqOnDemand), reqs(reqArch, reqOnDemand))
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassCritical
				s.Priority = ptr.To(v1alpha1.PriorityCritical)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "best-effort: spot or pool, crossed with the user's term",
			tier: v1alpha1.TierBestEffort,
			pod:  corev1.PodSpec{Affinity: required(reqs(reqZone))},
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqZone, reqSpot), reqs(reqZone, reqPool))
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassBestEffort
				s.Priority = ptr.To(v1alpha1.PriorityBestEffort)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "best-effort without user affinity",
			tier: v1alpha1.TierBestEffort,
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqSpot), reqs(reqPool))
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassBestEffort
				s.Priority = ptr.To(v1alpha1.PriorityBestEffort)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "user's capacity-type choice is kept, user's pod affinity untouched",
			tier: v1alpha1.TierBestEffort,
			pod: corev1.PodSpec{
				NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "on-demand"},
				Affinity:     &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}},
			},
			want: func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassBestEffort
				s.Priority = ptr.To(v1alpha1.PriorityBestEffort)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "user's class and scheduler are kept; existing tolerations kept, wildcard counts",
			tier: v1alpha1.TierStateless,
			pod: corev1.PodSpec{
				PriorityClassName: "team-high", Priority: ptr.To[int32](5000),
				SchedulerName: "volcano",
				Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
			podClass: class("team-high", 5000, false),
			want: func(s *corev1.PodSpec) {
				s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferredSpot()}}}
			},
		},
		{
			name: "global default class set by the Priority plugin is replaced",
			tier: v1alpha1.TierCheckpointed,
			pod: corev1.PodSpec{
				PriorityClassName: "cluster-default", Priority: ptr.To[int32](7),
				PreemptionPolicy: ptr.To(corev1.PreemptNever),
			},
			podClass: class("cluster-default", 7, true),
			want: func(s *corev1.PodSpec) {
				s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferredSpot()}}}
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassCheckpointed
				s.Priority = ptr.To(v1alpha1.PriorityCheckpointed)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name:     "a tier class below the global default's priority is not assigned: never easier to preempt",
			tier:     v1alpha1.TierBestEffort,
			pod:      corev1.PodSpec{PriorityClassName: "cluster-default", Priority: ptr.To[int32](7)},
			podClass: class("cluster-default", 7, true),
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqSpot), reqs(reqPool))
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
			},
			notes: 1,
		},
		{
			name: "best-effort is the default priority: assigned over no class",
			tier: v1alpha1.TierBestEffort,
			pod:  corev1.PodSpec{Priority: ptr.To[int32](0)},
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqSpot), reqs(reqPool))
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
				s.PriorityClassName = v1alpha1.PriorityClassBestEffort
				s.Priority = ptr.To(v1alpha1.PriorityBestEffort)
				s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
			},
		},
		{
			name: "system class chosen by the user is theirs, never one the webhook assigns",
			tier: v1alpha1.TierCritical,
			pod:  corev1.PodSpec{PriorityClassName: "system-cluster-critical", Priority: ptr.To[int32](2000000000)},
			want: func(s *corev1.PodSpec) {
				s.Affinity = required(reqs(reqOnDemand))
				s.SchedulerName = v1alpha1.SchedulerName
			},
		},
		{
			name:    "missing tier class: priority untouched, a note",
			tier:    v1alpha1.TierStateless,
			noClass: true,
			pod:     corev1.PodSpec{Priority: ptr.To[int32](0)},
			want: func(s *corev1.PodSpec) {
				s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferredSpot()}}}
				s.Tolerations = []corev1.Toleration{spotToleration}
				s.SchedulerName = v1alpha1.SchedulerName
			},
			notes: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: *tt.pod.DeepCopy()}
			pod.Labels = map[string]string{"app": "x"}
			want := tt.pod.DeepCopy()
			tt.want(want)
			// A lifeboat is active: the Pod is handed to the lifeboat scheduler (TestSchedulerRouting).
			p := Placement{Tier: tt.tier, TierClass: tierClasses[tt.tier], PodClass: tt.podClass, LifeboatActive: true}
			if tt.noClass {
				p.TierClass = nil
			}
			notes := c.ApplyPlacement(pod, p)
			if diff := cmp.Diff(*want, pod.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if len(notes) != tt.notes {
				t.Errorf("notes = %q, want %d", notes, tt.notes)
			}
			wantLabels := map[string]string{"app": "x", v1alpha1.LabelProtected: "true", v1alpha1.LabelTier: string(tt.tier)}
			if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}

			// Idempotent: a second pass (webhook reinvocation) changes nothing.
			again := pod.DeepCopy()
			c.ApplyPlacement(again, p)
			if diff := cmp.Diff(pod, again); diff != "" {
				t.Errorf("second pass changed the Pod (-first +second):\n%s", diff)
			}

			// The class is the user's original or one of the allowlist, never anything else.
			if name := pod.Spec.PriorityClassName; name != tt.pod.PriorityClassName && !c.Allowed(name) {
				t.Errorf("assigned class %q outside the allowlist", name)
			}
		})
	}
}

func TestSchedulerRouting(t *testing.T) {
	tests := []struct {
		name      string
		routing   SchedulerRouting
		scheduler string // the config's SchedulerName
		active    bool
		pod       string // the Pod's schedulerName
		want      string
	}{
		{"steady state keeps the default scheduler", RouteWhileLifeboatActive, v1alpha1.SchedulerName, false, "", ""},
		{"steady state, explicit default scheduler", RouteWhileLifeboatActive, v1alpha1.SchedulerName, false, corev1.DefaultSchedulerName, corev1.DefaultSchedulerName},
		{"a lifeboat is active", RouteWhileLifeboatActive, v1alpha1.SchedulerName, true, "", v1alpha1.SchedulerName},
		{"a lifeboat is active, explicit default scheduler", RouteWhileLifeboatActive, v1alpha1.SchedulerName, true, corev1.DefaultSchedulerName, v1alpha1.SchedulerName},
		{"a lifeboat is active, the user's own scheduler wins", RouteWhileLifeboatActive, v1alpha1.SchedulerName, true, "volcano", "volcano"},
		{"always, steady state", RouteAlways, v1alpha1.SchedulerName, false, "", v1alpha1.SchedulerName},
		{"always, the user's own scheduler wins", RouteAlways, v1alpha1.SchedulerName, false, "volcano", "volcano"},
		{"rewriting off", RouteAlways, "", true, "", ""},
		{"rewriting off while a lifeboat is active", RouteWhileLifeboatActive, "", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.SchedulerName, c.SchedulerRouting = tt.scheduler, tt.routing
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: tt.pod}}
			p := Placement{Tier: v1alpha1.TierStateless, TierClass: tierClasses[v1alpha1.TierStateless], LifeboatActive: tt.active}
			c.ApplyPlacement(pod, p)
			if pod.Spec.SchedulerName != tt.want {
				t.Errorf("schedulerName = %q, want %q", pod.Spec.SchedulerName, tt.want)
			}
			if got, want := c.NeedsLifeboatState(), tt.scheduler != "" && tt.routing == RouteWhileLifeboatActive; got != want {
				t.Errorf("NeedsLifeboatState = %v, want %v", got, want)
			}
		})
	}
	c := DefaultConfig()
	c.SchedulerRouting = "Sometimes"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "WhileLifeboatActive, Always") {
		t.Errorf("Validate(routing Sometimes) = %v, want an error naming the valid routings", err)
	}
}

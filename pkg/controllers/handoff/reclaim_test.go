package handoff

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/internal/buildtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func TestAtRisk(t *testing.T) {
	notice := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC)
	spot := func(name, typ, zone string, created time.Time, annotations map[string]string) *corev1.Node {
		n := buildtest.Node(name, buildtest.CapacityType(buildtest.Spot), buildtest.InstanceType(typ), buildtest.Zone(zone), buildtest.Annotations(annotations))
		n.CreationTimestamp = metav1.NewTime(created)
		return n
	}
	at := func(t time.Time) map[string]string {
		return map[string]string{v1alpha1.AnnotationInterruptedAt: nodeutil.FormatTime(t)}
	}
	// Two notices in m5.xlarge/a, the first at notice; one in c5.large/b 30 s later.
	reclaimed := ReclaimedPools([]*corev1.Node{
		spot("v1", "m5.xlarge", "a", notice.Add(-time.Hour), at(notice.Add(10*time.Second))),
		spot("v2", "m5.xlarge", "a", notice.Add(-time.Hour), at(notice)),
		spot("v3", "c5.large", "b", notice.Add(-time.Hour), at(notice.Add(30*time.Second))),
	}, notice.Add(time.Minute))
	onDemand := buildtest.Node("od", buildtest.CapacityType(buildtest.OnDemand), buildtest.InstanceType("m5.xlarge"), buildtest.Zone("a"))
	tests := []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"ran in the reclaimed pool before its first notice", spot("n", "m5.xlarge", "a", notice.Add(-time.Second), nil), true},
		{"launched into the reclaimed pool after its first notice", spot("n", "m5.xlarge", "a", notice.Add(time.Second), nil), false},
		{"the second pool counts from its own first notice", spot("n", "c5.large", "b", notice.Add(20*time.Second), nil), true},
		{"another zone", spot("n", "m5.xlarge", "c", notice.Add(-time.Hour), nil), false},
		{"another instance type", spot("n", "m5.large", "a", notice.Add(-time.Hour), nil), false},
		{"On-Demand of the same type and zone", onDemand, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AtRisk(tt.node, reclaimed); got != tt.want {
				t.Errorf("AtRisk = %v, want %v (reclaimed %v)", got, tt.want, reclaimed)
			}
		})
	}
	if got := ReclaimedPools([]*corev1.Node{spot("v", "m5.xlarge", "a", notice.Add(-time.Hour), nil)}, notice); !got["m5.xlarge/a/spot"].Equal(notice) {
		t.Errorf("a node without a notice time counts from now: %v", got)
	}
}

// TestAtRiskHosts: the hosts a new seat avoids are the not-yet-interrupted nodes that ran in a
// pool being reclaimed before its first notice; none while nothing is interrupted.
func TestAtRiskHosts(t *testing.T) {
	notice := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC)
	node := func(name, typ string, created time.Time, opts ...buildtest.NodeOption) *corev1.Node {
		n := buildtest.Node(name, append([]buildtest.NodeOption{buildtest.CapacityType(buildtest.Spot), buildtest.InstanceType(typ), buildtest.Zone("a")}, opts...)...)
		n.CreationTimestamp = metav1.NewTime(created)
		return n
	}
	victim := node("v1", "m5.xlarge", notice.Add(-time.Hour), buildtest.Annotations(map[string]string{
		v1alpha1.AnnotationResumeDecision: "lb-1", v1alpha1.AnnotationInterruptedAt: nodeutil.FormatTime(notice)}))
	old := node("old", "m5.xlarge", notice.Add(-time.Hour), buildtest.Labels(map[string]string{corev1.LabelHostname: "host-old"}))
	unlabelled := node("old-2", "m5.xlarge", notice.Add(-time.Minute))
	fresh := node("fresh", "m5.xlarge", notice.Add(time.Second))
	other := node("other", "c5.large", notice.Add(-time.Hour))
	boat := node("lb-1", "m5.xlarge", notice.Add(-time.Hour), buildtest.Pool("pool", v1alpha1.NodeStateActive))
	nodes := []*corev1.Node{victim, old, unlabelled, fresh, other, boat}
	if got, want := AtRiskHosts(nodes, notice.Add(time.Minute)), []string{"host-old", "old-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("AtRiskHosts = %v, want %v", got, want)
	}
	if got := AtRiskHosts([]*corev1.Node{old, fresh, other}, notice); got != nil {
		t.Errorf("AtRiskHosts without an interruption = %v, want none", got)
	}
}

// TestSeatAvoidsHosts: AvoidHosts is ANDed into every required term of the Pod's node affinity
// the seat copies, or is the seat's only required term.
func TestSeatAvoidsHosts(t *testing.T) {
	avoid := corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"h1", "h2"}}
	zone := func(z string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: v1alpha1.LabelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{z}}
	}
	lifeboat := buildtest.Node("lb-1", buildtest.Pool("pool", v1alpha1.NodeStateActive))
	plain := buildtest.Pod("app", "db-0", buildtest.Requests("1", "1Gi"))
	withTerms := plain.DeepCopy()
	withTerms.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone("a")}}, {MatchExpressions: []corev1.NodeSelectorRequirement{zone("b")}}}}}}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		avoid []string
		want  []corev1.NodeSelectorTerm // nil: no required affinity
	}{
		{"nothing to avoid", plain, nil, nil},
		{"no affinity of its own", plain, []string{"h1", "h2"}, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{avoid}}}},
		{"into each of the Pod's terms", withTerms, []string{"h1", "h2"}, []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{zone("a"), avoid}}, {MatchExpressions: []corev1.NodeSelectorRequirement{zone("b"), avoid}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seat := Seat(tt.pod, lifeboat, SeatSpec{Namespace: "lifeboat-system", AvoidHosts: tt.avoid})
			var got []corev1.NodeSelectorTerm
			if a := seat.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				got = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("required terms %+v, want %+v", got, tt.want)
			}
			if tt.pod.Spec.Affinity != nil && len(tt.pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
				t.Errorf("the Pod's own affinity was changed")
			}
		})
	}
}

package reclaimrisk

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

func TestPlan(t *testing.T) {
	notice := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC)
	node := func(name string, created time.Duration, opts ...buildtest.NodeOption) *corev1.Node {
		base := []buildtest.NodeOption{buildtest.CapacityType(buildtest.Spot), buildtest.InstanceType("m5.xlarge"), buildtest.Zone("a")}
		n := buildtest.Node(name, append(base, opts...)...)
		n.CreationTimestamp = metav1.NewTime(notice.Add(created))
		return n
	}
	interrupted := buildtest.Annotations(map[string]string{v1alpha1.AnnotationResumeDecision: "{}", v1alpha1.AnnotationInterruptedAt: nodeutil.FormatTime(notice)})
	marked := buildtest.Labels(map[string]string{v1alpha1.LabelReclaimAtRisk: "true"})
	deleting := func(n *corev1.Node) *corev1.Node {
		n.DeletionTimestamp = &metav1.Time{Time: notice.Add(time.Minute)}
		return n
	}
	names := func(nodes []*corev1.Node) []string {
		var out []string
		for _, n := range nodes {
			out = append(out, n.Name)
		}
		return out
	}
	tests := []struct {
		name           string
		nodes          []*corev1.Node
		label, unlabel []string
	}{
		{"no notice: nothing marked", []*corev1.Node{node("old", -time.Hour)}, nil, nil},
		{"a notice marks the pool's older nodes, not the interrupted one, not newer ones, not other pools, not lifeboats", []*corev1.Node{
			node("victim", -time.Hour, interrupted),
			node("old", -time.Hour),
			node("new", time.Second),
			node("other-zone", -time.Hour, buildtest.Zone("b")),
			node("on-demand", -time.Hour, buildtest.CapacityType(buildtest.OnDemand)),
			node("lifeboat", -time.Hour, buildtest.Pool("default", v1alpha1.NodeStateActive)),
		}, []string{"old"}, nil},
		{"already marked: no write", []*corev1.Node{node("victim", -time.Hour, interrupted), node("old", -time.Hour, marked)}, nil, nil},
		{"the pool's last interrupted node gone: unmarked", []*corev1.Node{node("old", -time.Hour, marked)}, nil, []string{"old"}},
		{"a mark on a node that got its own notice goes", []*corev1.Node{node("victim", -time.Hour, interrupted), node("second", -time.Hour, interrupted, marked)}, nil, []string{"second"}},
		{"a node being deleted is left alone", []*corev1.Node{node("victim", -time.Hour, interrupted), deleting(node("old", -time.Hour)), deleting(node("gone", -time.Hour, marked))}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Plan(tt.nodes, notice.Add(time.Minute))
			if got := names(m.Label); !reflect.DeepEqual(got, tt.label) {
				t.Errorf("label %v, want %v", got, tt.label)
			}
			if got := names(m.Unlabel); !reflect.DeepEqual(got, tt.unlabel) {
				t.Errorf("unlabel %v, want %v", got, tt.unlabel)
			}
		})
	}
}

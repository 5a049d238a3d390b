package handoff

import (
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

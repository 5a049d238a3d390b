package handoff

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestSurgeOf(t *testing.T) {
	dep := func(annotations map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: annotations},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(6))}}
	}
	mine := `{"node":"lb-1","base":6,"surge":2,"readyBefore":5}`
	for _, tc := range []struct {
		name      string
		d         *appsv1.Deployment
		wantPhase SurgePhase
		wantSurge Surge
		wantErr   bool
	}{
		{"no surge: start one", dep(nil), SurgeStart, Surge{}, false},
		{"a bridge surge is on: wait for it", dep(map[string]string{v1alpha1.AnnotationBridgeSurge: `{"base":6}`}), SurgeWait, Surge{}, false},
		{"this node's surge runs", dep(map[string]string{v1alpha1.AnnotationHandoffSurge: mine}), SurgeRunning, Surge{Node: "lb-1", Base: 6, Surge: 2, ReadyBefore: 5}, false},
		{"this node's surge runs beside a bridge surge", dep(map[string]string{v1alpha1.AnnotationHandoffSurge: mine, v1alpha1.AnnotationBridgeSurge: `{}`}), SurgeRunning, Surge{Node: "lb-1", Base: 6, Surge: 2, ReadyBefore: 5}, false},
		{"another node's surge first", dep(map[string]string{v1alpha1.AnnotationHandoffSurge: `{"node":"lb-2","base":6,"surge":1}`}), SurgeWait, Surge{Node: "lb-2", Base: 6, Surge: 1}, false},
		{"a broken record is an error", dep(map[string]string{v1alpha1.AnnotationHandoffSurge: `{`}), SurgeWait, Surge{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			phase, s, err := SurgeOf(tc.d, "lb-1")
			if (err != nil) != tc.wantErr || phase != tc.wantPhase || s != tc.wantSurge {
				t.Errorf("SurgeOf = %v, %+v, %v; want %v, %+v, error %v", phase, s, err, tc.wantPhase, tc.wantSurge, tc.wantErr)
			}
		})
	}
}

func TestNewSurge(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replicas   *int32
		pods       int
		readyNow   int32
		want       Surge
		wantTarget int32
	}{
		{"all ready: wait for all of them elsewhere", ptr.To(int32(6)), 2, 6, Surge{Node: "lb-1", Base: 6, Surge: 2, ReadyBefore: 6}, 6},
		{"some down: wait for as many as were ready", ptr.To(int32(6)), 2, 4, Surge{Node: "lb-1", Base: 6, Surge: 2, ReadyBefore: 4}, 4},
		{"more ready than base (a surge ending elsewhere): never wait for more than base", ptr.To(int32(6)), 2, 8, Surge{Node: "lb-1", Base: 6, Surge: 2, ReadyBefore: 6}, 6},
		{"replicas unset default to one", nil, 1, 1, Surge{Node: "lb-1", Base: 1, Surge: 1, ReadyBefore: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: tc.replicas}}
			got := NewSurge(d, "lb-1", tc.pods, tc.readyNow)
			if got != tc.want || SurgeTarget(got) != tc.wantTarget {
				t.Errorf("NewSurge = %+v (target %d), want %+v (target %d)", got, SurgeTarget(got), tc.want, tc.wantTarget)
			}
		})
	}
}

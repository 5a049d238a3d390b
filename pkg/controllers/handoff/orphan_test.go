package handoff

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestHandoffSurgeNode(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"none", "", ""},
		{"handoff's", `{"node":"lb-1","base":2,"surge":2,"readyBefore":2}`, "lb-1"},
		{"reclaim-back's", `{"node":"od-1","base":2,"surge":2,"readyBefore":2,"by":"reclaim-back"}`, ""},
		{"unparsable", `{"node":`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{}
			if tc.raw != "" {
				d.Annotations = map[string]string{v1alpha1.AnnotationHandoffSurge: tc.raw}
			}
			if got := HandoffSurgeNode(d); got != tc.want {
				t.Errorf("HandoffSurgeNode = %q, want %q", got, tc.want)
			}
		})
	}
}

// A surge whose lifeboat Pods left another way (removed at the deadline after the scale-back's
// write failed, evicted by someone else) is taken back on the node's next pass, whether the
// node is still draining (empty), left the serving states, or is gone; another controller's
// record and another node's surge are left alone.
func TestOrphanSurgeTakenBack(t *testing.T) {
	surged := func(t *testing.T, ctrl *Controller, c client.Client, raw string) {
		t.Helper()
		reconcileLB(t, ctrl) // the surge starts: replicas and the HPA's bounds raised to 4
		d, _ := getAPI(t, c)
		d.Annotations[v1alpha1.AnnotationHandoffSurge] = raw
		if err := c.Update(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"api-a", "api-b"} {
			if err := c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const mine = `{"node":"lb-1","base":2,"surge":2,"readyBefore":2}`
	for _, tc := range []struct {
		name   string
		raw    string
		node   func(t *testing.T, c client.Client)
		wantTB bool
	}{
		{"draining and empty", mine, func(*testing.T, client.Client) {}, true},
		{"node deleted", mine, func(t *testing.T, c client.Client) {
			if err := c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-1"}}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"back to standby", mine, func(t *testing.T, c client.Client) {
			n := &corev1.Node{}
			if err := c.Get(context.Background(), types.NamespacedName{Name: "lb-1"}, n); err != nil {
				t.Fatal(err)
			}
			n.Labels[v1alpha1.LabelState] = string(v1alpha1.NodeStateStandby)
			if err := c.Update(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"another node's surge", `{"node":"lb-2","base":2,"surge":2,"readyBefore":2}`, func(*testing.T, client.Client) {}, false},
		{"reclaim-back's record", `{"node":"lb-1","base":2,"surge":2,"readyBefore":2,"by":"reclaim-back"}`, func(*testing.T, client.Client) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctrl, c := hpaFixture(t)
			surged(t, ctrl, c, tc.raw)
			tc.node(t, c)
			reconcileLB(t, ctrl)
			d, h := getAPI(t, c)
			tookBack := *d.Spec.Replicas == 2 && d.Annotations[v1alpha1.AnnotationHandoffSurge] == "" &&
				*h.Spec.MinReplicas == 1 && h.Spec.MaxReplicas == 2 && len(h.Annotations) == 0
			if tookBack != tc.wantTB {
				t.Errorf("took back %v, want %v: deployment replicas %d annotations %v; HPA min %d max %d annotations %v",
					tookBack, tc.wantTB, *d.Spec.Replicas, d.Annotations, *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations)
			}
			if !tc.wantTB && (*d.Spec.Replicas != 4 || d.Annotations[v1alpha1.AnnotationHandoffSurge] != tc.raw) {
				t.Errorf("deployment replicas %d annotations %v: want the surge left as it was", *d.Spec.Replicas, d.Annotations)
			}
		})
	}
}

func TestSurgedNodeMapsHandoffRecords(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationHandoffSurge: `{"node":"lb-1"}`}}}
	if got := surgedNode(context.Background(), d); len(got) != 1 || got[0].Name != "lb-1" {
		t.Errorf("surgedNode = %v, want lb-1", got)
	}
	if got := surgedNode(context.Background(), &appsv1.Deployment{}); len(got) != 0 {
		t.Errorf("surgedNode of a Deployment without a surge = %v, want none", got)
	}
}

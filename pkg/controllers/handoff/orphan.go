package handoff

import (
	"context"
	"encoding/json"
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// HandoffSurgeNode is the lifeboat node whose handoff surge d carries ("" when none, or when
// the record is another controller's: reclaim-back writes the same annotation with a "by"
// field). Pure.
func HandoffSurgeNode(d *appsv1.Deployment) string {
	raw := d.Annotations[v1alpha1.AnnotationHandoffSurge]
	if raw == "" {
		return ""
	}
	var rec struct {
		Node string `json:"node"`
		By   string `json:"by"`
	}
	if json.Unmarshal([]byte(raw), &rec) != nil || rec.By != "" {
		return ""
	}
	return rec.Node
}

// surgedNode maps a Deployment carrying a handoff surge to its node's request: the node's pass
// takes back a surge the node can no longer end (orphan.go). On start, the Deployment cache's
// initial list brings every surge left by a previous run.
func surgedNode(_ context.Context, o client.Object) []reconcile.Request {
	d, ok := o.(*appsv1.Deployment)
	if !ok {
		return nil
	}
	if node := HandoffSurgeNode(d); node != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
	}
	return nil
}

// endOrphanSurges takes back the handoff surges of node once it has nothing left to hand off:
// it is gone, no longer active or draining, or drained empty. A surge normally ends in
// surgeStep once the replacements are Ready, with the node's Pods still there; it is orphaned
// when the Pods left another way — removed at the handoff deadline after the scale-back's write
// failed, evicted by someone else, the node deleted — and then nothing else would ever scale
// the Deployment back or restore its HPA, and every later handoff of the Deployment would wait
// behind it (SurgeWait).
func (c *Controller) endOrphanSurges(ctx context.Context, node string) error {
	list := &appsv1.DeploymentList{}
	if err := c.client.List(ctx, list); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		d := &list.Items[i]
		if HandoffSurgeNode(d) != node {
			continue
		}
		_, s, err := SurgeOf(d, node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.endSurge(ctx, d, s); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Took back a handoff surge whose lifeboat Pods are gone", "deployment", klog.KObj(d), "replicas", s.Base, "surge", s.Surge)
	}
	return errors.Join(errs...)
}

// Package indexes names the field indexes the controllers register on the manager's cache and
// registers them.
package indexes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Field indexes on the manager's cache.
const (
	// NodeInstanceID indexes Nodes by their EC2 instance ID.
	NodeInstanceID = "lifeboat.dev/instance-id"
	// PodNodeName indexes Pods by spec.nodeName.
	PodNodeName = "spec.nodeName"
)

// Register adds the Node-by-instance-ID and Pod-by-node indexes.
func Register(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Node{}, NodeInstanceID, func(o client.Object) []string {
		if id := nodeutil.InstanceID(o.(*corev1.Node)); id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodNodeName, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	})
}

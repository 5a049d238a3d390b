package nodeutil

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// InPoolState reports whether o is a pool Node (label lifeboat.dev/pool) whose
// lifeboat.dev/state is one of states.
func InPoolState(o metav1.Object, states ...v1alpha1.NodeState) bool {
	l := o.GetLabels()
	return l[v1alpha1.LabelPool] != "" && slices.Contains(states, v1alpha1.NodeState(l[v1alpha1.LabelState]))
}

// RegisterForPoolNodes registers r as the controller name of the pool Nodes in one of states,
// reconciling up to workers Nodes at once (0: controller-runtime's default, one).
func RegisterForPoolNodes(mgr ctrl.Manager, name string, workers int, r reconcile.Reconciler, states ...v1alpha1.NodeState) error {
	inStates := predicate.NewPredicateFuncs(func(o client.Object) bool { return InPoolState(o, states...) })
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&corev1.Node{}, builder.WithPredicates(inStates)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

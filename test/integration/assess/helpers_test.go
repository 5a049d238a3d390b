package assess

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// corev1ServiceAccount has no role bound: the negative case of TestClusterRoleIsMinimal.
var corev1ServiceAccount = corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-permissions"}}

// +kubebuilder:object:generate=true
// +groupName=lifeboat.dev

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Version is the API version of Lifeboat's resources.
const Version = "v1alpha1"

var (
	// GroupVersion is lifeboat.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &WarmPool{}, &WarmPoolList{}, &ReclaimBackPolicy{}, &ReclaimBackPolicyList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

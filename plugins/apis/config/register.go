package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is kube-scheduler's internal config version; the args are registered there.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfig.GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder registers the internal args types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the internal args types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&LifeboatTaintsArgs{},
		&LifeboatPlacementArgs{},
		&CapacityPoolSpreadArgs{},
	)
	return nil
}

func init() {
	// kube-scheduler builds its plugin-args conversion scheme lazily from its own builder, so
	// joining it makes the args convert and default like in-tree ones.
	schedconfig.SchemeBuilder.Register(addKnownTypes)
}

package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
)

// SchemeGroupVersion is kube-scheduler's config group and version: kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schedconfigv1.SchemeGroupVersion

var (
	// SchemeBuilder registers the v1 args types, their defaults and conversions.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, RegisterDefaults, RegisterConversions)
	// AddToScheme registers the v1 args types, their defaults and conversions to a scheme.
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
	// Join kube-scheduler's v1 builder, from which it lazily builds the scheme that defaults
	// and converts plugin args (see package config).
	schedconfigv1.SchemeBuilder.Register(addKnownTypes, RegisterDefaults, RegisterConversions)
}

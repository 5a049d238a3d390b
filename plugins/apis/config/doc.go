// +kubebuilder:object:generate=true

// Package config holds the internal (unversioned) argument types of Lifeboat's scheduler
// plugins. They join kube-scheduler's own config group, kubescheduler.config.k8s.io, the way
// kubernetes-sigs/scheduler-plugins does, so a KubeSchedulerConfiguration v1 file can carry
// them in profiles[].pluginConfig[].args. The versioned wire form is in package v1.
package config

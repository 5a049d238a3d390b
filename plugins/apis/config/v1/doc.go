// +kubebuilder:object:generate=true

// Package v1 is the wire form of Lifeboat's scheduler plugin args in a KubeSchedulerConfiguration
// (apiVersion kubescheduler.config.k8s.io/v1), with defaults and conversion to package config.
//
//	pluginConfig:
//	- name: CapacityPoolSpread
//	  args:
//	    hotPoolPenalty: 2
//
// The kind (CapacityPoolSpreadArgs) and apiVersion may be omitted: kube-scheduler fills them in
// from the plugin name.
package v1

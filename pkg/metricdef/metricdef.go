// Package metricdef declares Lifeboat's Prometheus metrics: one call builds a metric and
// registers it with controller-runtime's registry, which each binary serves on its metrics
// endpoint. Names follow lifeboat_<subsystem>_<name>_<unit|total>; labels must stay bounded.
package metricdef

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Counter registers a counter without labels.
func Counter(name, help string) prometheus.Counter {
	return register(prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec registers a counter with labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// GaugeVec registers a gauge with labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// HistogramVec registers a histogram with buckets (in the metric's unit) and labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

func register[C prometheus.Collector](c C) C {
	crmetrics.Registry.MustRegister(c)
	return c
}

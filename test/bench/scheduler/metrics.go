package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var insecureClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the scheduler's self-signed serving cert on loopback
}}

// histogram is one labelled histogram series: cumulative counts by upper bound.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative, same order as bounds; last is +Inf
}

// series maps metric name → label signature → histogram.
type series map[string]map[string]histogram

func scrape(ctx context.Context, url string) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := series{}
	for _, name := range []string{"scheduler_framework_extension_point_duration_seconds", "scheduler_plugin_execution_duration_seconds"} {
		f := families[name]
		if f == nil {
			continue
		}
		out[name] = map[string]histogram{}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			var hist histogram
			for _, b := range h.GetBucket() {
				hist.bounds = append(hist.bounds, b.GetUpperBound())
				hist.counts = append(hist.counts, float64(b.GetCumulativeCount()))
			}
			hist.bounds = append(hist.bounds, math.Inf(1))
			hist.counts = append(hist.counts, float64(h.GetSampleCount()))
			out[name][labelKey(m.GetLabel())] = hist
		}
	}
	return out, nil
}

func labelKey(labels []*dto.LabelPair) string {
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func labelValue(key, name string) string {
	for _, kv := range strings.Split(key, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// delta sums after−before over the series whose labels pass keep.
func delta(before, after series, metric string, keep func(labels string) bool, group func(labels string) string) map[string]histogram {
	out := map[string]histogram{}
	for key, a := range after[metric] {
		if !keep(key) {
			continue
		}
		b := before[metric][key]
		g := group(key)
		acc, ok := out[g]
		if !ok {
			acc = histogram{bounds: a.bounds, counts: make([]float64, len(a.counts))}
		}
		for i := range a.counts {
			var prev float64
			if i < len(b.counts) {
				prev = b.counts[i]
			}
			acc.counts[i] += a.counts[i] - prev
		}
		out[g] = acc
	}
	return out
}

// quantile interpolates linearly inside the bucket, as PromQL's histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	n := len(h.counts)
	if n == 0 || h.counts[n-1] == 0 {
		return math.NaN()
	}
	rank := q * h.counts[n-1]
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		lo, prev := 0.0, 0.0
		if i > 0 {
			lo, prev = h.bounds[i-1], h.counts[i-1]
		}
		if math.IsInf(h.bounds[i], 1) {
			return lo
		}
		if c == prev {
			return h.bounds[i]
		}
		return lo + (h.bounds[i]-lo)*(rank-prev)/(c-prev)
	}
	return h.bounds[n-2]
}

func ms(seconds float64) float64 { return math.Round(seconds*1e6) / 1e3 }

// extensionPointP99 is the p99 per extension point of successful calls of a profile.
func extensionPointP99(before, after series, profile string) map[string]float64 {
	d := delta(before, after, "scheduler_framework_extension_point_duration_seconds",
		func(l string) bool {
			return labelValue(l, "profile") == profile && labelValue(l, "status") == "Success"
		},
		func(l string) string { return labelValue(l, "extension_point") })
	out := map[string]float64{}
	for ep, h := range d {
		if q := h.quantile(0.99); !math.IsNaN(q) {
			out[ep] = ms(q)
		}
	}
	return out
}

// pluginP99 is the p99 per plugin and extension point (the metric samples 10 % of cycles).
func pluginP99(before, after series, plugins []string) map[string]float64 {
	want := map[string]bool{}
	for _, p := range plugins {
		want[p] = true
	}
	d := delta(before, after, "scheduler_plugin_execution_duration_seconds",
		func(l string) bool { return want[labelValue(l, "plugin")] },
		func(l string) string { return labelValue(l, "plugin") + "/" + labelValue(l, "extension_point") })
	out := map[string]float64{}
	for k, h := range d {
		if q := h.quantile(0.99); !math.IsNaN(q) {
			out[k] = ms(q)
		}
	}
	return out
}

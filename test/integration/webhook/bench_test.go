package webhook

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// benchPhase is one measured run: Pods created at a fixed rate, with or without the webhook.
type benchPhase struct {
	RatePerSecond int     `json:"ratePerSecond"`
	Webhook       bool    `json:"webhook"`
	Pods          int     `json:"pods"`
	Errors        int     `json:"errors"`
	ClientP50Ms   float64 `json:"clientP50Ms"`
	ClientP99Ms   float64 `json:"clientP99Ms"`
	// Server-side, from lifeboat_webhook_request_duration_seconds (bucket-interpolated).
	ServerP50Ms float64 `json:"serverP50Ms,omitempty"`
	ServerP99Ms float64 `json:"serverP99Ms,omitempty"`
	Mutated     bool    `json:"mutated"`
}

type benchRate struct {
	RatePerSecond int     `json:"ratePerSecond"`
	P50Ratio      float64 `json:"p50Ratio"`
	P99Ratio      float64 `json:"p99Ratio"`
}

type benchResult struct {
	Command string `json:"command"`
	Date    string `json:"date"`
	// Duration is the measured time per mode and rate (two halves, ABBA order).
	Duration string       `json:"durationPerMode"`
	Phases   []benchPhase `json:"phases"`
	Ratios   []benchRate  `json:"ratios"`
}

// BenchmarkPodCreateLatency creates Pods of a protected Job at fixed rates (50/s and 200/s)
// against the real local apiserver, with the webhook registered and without, and reports the
// client-side p50/p99 of Pod CREATE and their ratio, plus the webhook's server-side latency.
// Run it once (-benchtime=1x) through hack/bench-webhook.sh, which writes the JSON to
// $LIFEBOAT_BENCH_OUT.
func BenchmarkPodCreateLatency(b *testing.B) {
	phaseDur := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("LIFEBOAT_BENCH_PHASE")); err == nil && d > 0 {
		phaseDur = d
	}
	applyPriorityClasses(b)
	ca := newTestCA(b)
	w := startWebhook(b, ca, 0, "--v=0")
	ns := newNamespace(b, "bench", protectedNS)
	j := suspendedJob(b, ns, "bench")

	cfg := shared.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	cs := kubernetes.NewForConfigOrDie(cfg)

	var result benchResult
	for i := 0; i < b.N; i++ {
		result = benchResult{Command: "bash hack/bench-webhook.sh", Date: time.Now().UTC().Format(time.RFC3339), Duration: phaseDur.String()}
		for _, rate := range []int{50, 200} {
			// ABBA order (without, with, with, without) so that drift in the shared machine's load
			// hits both modes alike; each mode's samples are pooled.
			samples := map[bool][]time.Duration{}
			phases := map[bool]*benchPhase{false: {RatePerSecond: rate}, true: {RatePerSecond: rate, Webhook: true, Mutated: true}}
			var before histogram
			for _, hooked := range []bool{false, true, true, false} {
				var reg *registration
				if hooked {
					r := registerWebhooks(b, fmt.Sprintf("-bench-%d", rate), "127.0.0.1", w.port, ca.caPEM)
					reg = &r
					waitForWebhooks(b, ns)
				}
				createPods(b, cs, j, 50, rate, "warm") // warm connections and caches; not measured
				if hooked && before.counts == nil {
					before = scrapeHistogram(b, w)
				}
				lat, p := createPods(b, cs, j, int(float64(rate)*phaseDur.Seconds()/2), rate, "m")
				samples[hooked] = append(samples[hooked], lat...)
				ph := phases[hooked]
				ph.Pods += p.Pods
				ph.Errors += p.Errors
				ph.Mutated = ph.Mutated && p.Mutated
				if hooked {
					unregister(b, *reg)
				}
				deletePods(b, cs, ns)
			}
			after := scrapeHistogram(b, w)
			phases[true].ServerP50Ms = round(after.quantile(before, 0.50) * 1000)
			phases[true].ServerP99Ms = round(after.quantile(before, 0.99) * 1000)
			for _, hooked := range []bool{false, true} {
				phases[hooked].ClientP50Ms = quantileMs(samples[hooked], 0.50)
				phases[hooked].ClientP99Ms = quantileMs(samples[hooked], 0.99)
				result.Phases = append(result.Phases, *phases[hooked])
			}
			without, with := phases[false], phases[true]
			result.Ratios = append(result.Ratios, benchRate{RatePerSecond: rate,
				P50Ratio: round(with.ClientP50Ms / without.ClientP50Ms), P99Ratio: round(with.ClientP99Ms / without.ClientP99Ms)})
			b.ReportMetric(with.ClientP99Ms/without.ClientP99Ms, fmt.Sprintf("p99-ratio@%d/s", rate))
			b.ReportMetric(with.ServerP99Ms, fmt.Sprintf("server-p99-ms@%d/s", rate))
		}
	}
	out, _ := json.MarshalIndent(result, "", "  ")
	b.Logf("%s", out)
	if path := os.Getenv("LIFEBOAT_BENCH_OUT"); path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func round(f float64) float64 { return math.Round(f*1000) / 1000 }

// createPods creates n Pods at a fixed rate (open loop: a slow response does not slow the
// arrivals) and measures each CREATE's latency.
func createPods(b testing.TB, cs kubernetes.Interface, job *batchv1.Job, n, rate int, prefix string) ([]time.Duration, benchPhase) {
	b.Helper()
	lat := make([]time.Duration, n)
	errs := 0
	mutated := true
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	stamp := time.Now().UnixNano()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := jobPod(job, fmt.Sprintf("%s-%d-%d", prefix, stamp, i))
			start := time.Now()
			created, err := cs.CoreV1().Pods(job.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			lat[i] = d
			if err != nil {
				errs++
				return
			}
			if created.Labels[v1alpha1.LabelProtected] != "true" {
				mutated = false
			}
		}(i)
	}
	wg.Wait()
	return lat, benchPhase{RatePerSecond: rate, Pods: n, Errors: errs, Mutated: mutated}
}

// quantileMs is the nearest-rank quantile in milliseconds.
func quantileMs(lat []time.Duration, f float64) float64 {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(a, c int) bool { return s[a] < s[c] })
	idx := int(math.Ceil(f*float64(len(s)))) - 1
	return round(float64(s[max(idx, 0)].Microseconds()) / 1000)
}

func deletePods(b testing.TB, cs kubernetes.Interface, ns string) {
	b.Helper()
	ctx := context.Background()
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("Pods not deleted: %v", err)
	}
}

// histogram is the cumulative bucket counts of the pods webhook's latency histogram.
type histogram struct {
	bounds []float64
	counts []float64
}

func scrapeHistogram(b testing.TB, w *webhookProcess) histogram {
	b.Helper()
	var h histogram
	sc := bufio.NewScanner(strings.NewReader(w.Metrics()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const prefix = `lifeboat_webhook_request_duration_seconds_bucket{webhook="pods",le="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		c, _ := strconv.ParseFloat(count, 64)
		h.bounds = append(h.bounds, bound)
		h.counts = append(h.counts, c)
	}
	return h
}

// quantile of the observations between before and h, interpolated linearly within a bucket
// (as Prometheus' histogram_quantile does).
func (h histogram) quantile(before histogram, q float64) float64 {
	if len(h.counts) == 0 {
		return 0
	}
	delta := make([]float64, len(h.counts))
	for i := range h.counts {
		delta[i] = h.counts[i]
		if i < len(before.counts) {
			delta[i] -= before.counts[i]
		}
	}
	total := delta[len(delta)-1]
	if total == 0 {
		return 0
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for i, c := range delta {
		if c >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return prevBound
			}
			return prevBound + (h.bounds[i]-prevBound)*(rank-prevCount)/math.Max(c-prevCount, 1)
		}
		prevBound, prevCount = h.bounds[i], c
	}
	return prevBound
}

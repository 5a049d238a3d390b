package webhook

import (
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// benchPhase is one measured run: Pods created at a fixed rate, with or without the webhook.
type benchPhase struct {
	RatePerSecond int `json:"ratePerSecond"`
	// Mode is "without" (no webhook registered), "with" (lifeboat-webhook) or "reference" (a
	// minimal webhook that answers with the same patch without doing any work).
	Mode         string  `json:"mode"`
	Webhook      bool    `json:"webhook"`
	Pods         int     `json:"pods"`
	Errors       int     `json:"errors"`
	ClientP50Ms  float64 `json:"clientP50Ms"`
	ClientP99Ms  float64 `json:"clientP99Ms"`
	ClientMeanMs float64 `json:"clientMeanMs"`
	// Server-side, from lifeboat_webhook_request_duration_seconds (bucket-interpolated).
	ServerP50Ms float64 `json:"serverP50Ms,omitempty"`
	ServerP99Ms float64 `json:"serverP99Ms,omitempty"`
	Mutated     bool    `json:"mutated"`
	// Breakdown is where the time and CPU go (apiserver and webhook metrics, /proc).
	Breakdown benchBreakdown `json:"breakdown"`
}

type benchRate struct {
	RatePerSecond int     `json:"ratePerSecond"`
	P50Ratio      float64 `json:"p50Ratio"`
	P99Ratio      float64 `json:"p99Ratio"`
	// The reference webhook against no webhook: the floor for any webhook making this mutation.
	ReferenceP50Ratio float64 `json:"referenceP50Ratio,omitempty"`
	ReferenceP99Ratio float64 `json:"referenceP99Ratio,omitempty"`
}

const (
	modeWithout   = "without"
	modeWith      = "with"
	modeReference = "reference"
)

type benchResult struct {
	Command string `json:"command"`
	Date    string `json:"date"`
	// Duration is the measured time per mode and rate, in Segments alternating segments.
	Duration          string       `json:"durationPerMode"`
	Segments          int          `json:"segments"`
	ClientContentType string       `json:"clientContentType"`
	Phases            []benchPhase `json:"phases"`
	Ratios            []benchRate  `json:"ratios"`
}

// BenchmarkPodCreateLatency creates Pods of a protected Job at fixed rates (50/s and 200/s)
// against the real local apiserver, with the webhook registered and without, and reports the
// client-side p50/p99 of Pod CREATE and their ratio, the webhook's server-side latency, and a
// breakdown of where the time and CPU go. Run it once (-benchtime=1x) through
// hack/bench-webhook.sh, which writes the JSON to $LIFEBOAT_BENCH_OUT.
//
// Method: the modes alternate in segments ABBA BAAB (A without the webhook, B with it), so that
// drift in a shared machine's load hits both alike; each mode's samples are pooled. With the
// reference webhook (C, see referenceWebhook; LIFEBOAT_BENCH_REFERENCE=0 skips it) the order is
// ABC CBA BCA ACB. The load
// generator talks protobuf, as the controllers that create Pods in a real cluster do
// (LIFEBOAT_BENCH_CONTENT_TYPE=json to compare). The Job is managed by "the benchmark"
// (spec.managedBy), so kube-controller-manager's Job controller does not react to every Pod (it
// would release each one with a PATCH, doubling the write load in both modes).
func BenchmarkPodCreateLatency(b *testing.B) {
	phaseDur := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("LIFEBOAT_BENCH_PHASE")); err == nil && d > 0 {
		phaseDur = d
	}
	// A = without, B = with lifeboat-webhook, C = the reference webhook (optional).
	order := []string{modeWithout, modeWith, modeWith, modeWithout, modeWith, modeWithout, modeWithout, modeWith}
	modes := []string{modeWithout, modeWith}
	if os.Getenv("LIFEBOAT_BENCH_REFERENCE") != "0" {
		order = []string{modeWithout, modeWith, modeReference, modeReference, modeWith, modeWithout,
			modeWith, modeReference, modeWithout, modeWithout, modeReference, modeWith}
		modes = append(modes, modeReference)
	}
	segment := phaseDur / time.Duration(len(order)/len(modes))
	applyPriorityClasses(b)
	ca := newTestCA(b)
	webhookArgs := []string{"--v=0"}
	pprofPort := 0
	if os.Getenv(profileDirEnv) != "" {
		pprofPort = freePort(b)
		webhookArgs = append(webhookArgs, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", pprofPort))
	}
	w := startWebhook(b, ca, 0, webhookArgs...)
	ns := newNamespace(b, "bench", protectedNS)
	j := benchJob(b, ns)

	cfg := shared.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	contentType := "protobuf"
	if os.Getenv("LIFEBOAT_BENCH_CONTENT_TYPE") != "json" {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	} else {
		contentType = "json"
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	var ref *referenceWebhook
	if len(modes) == 3 {
		ref = startReferenceWebhook(b, cs, ca, w, j)
	}

	var result benchResult
	for i := 0; i < b.N; i++ {
		result = benchResult{Command: "bash hack/bench-webhook.sh", Date: time.Now().UTC().Format(time.RFC3339),
			Duration: phaseDur.String(), Segments: len(order), ClientContentType: contentType}
		for _, rate := range []int{50, 200} {
			samples := map[string][]time.Duration{}
			phases := map[string]*benchPhase{}
			breakdowns := map[string]*breakdown{}
			for _, m := range modes {
				phases[m] = &benchPhase{RatePerSecond: rate, Mode: m, Webhook: m == modeWith, Mutated: m != modeWithout}
				breakdowns[m] = &breakdown{}
			}
			var server histogram
			for seg, mode := range order {
				var reg *registration
				switch mode {
				case modeWith:
					r := registerWebhooks(b, fmt.Sprintf("-bench-%d", rate), "127.0.0.1", w.port, ca.caPEM)
					reg = &r
					waitForWebhooks(b, ns)
				case modeReference:
					r := ref.register(b, fmt.Sprintf("-bench-ref-%d", rate), ns)
					reg = &r
				}
				createPods(b, cs, j, max(50, rate/2), rate, "warm") // warm connections and caches; not measured
				before := takeSnapshot(b, cs, w)
				stopProfile := profileAPIServer(b, cs, fmt.Sprintf("apiserver-%d-%s-%d.pprof", rate, mode, seg), segment)
				stopHookProfile := func() {}
				if mode == modeWith && pprofPort != 0 {
					stopHookProfile = profileURL(b, fmt.Sprintf("http://127.0.0.1:%d", pprofPort), fmt.Sprintf("webhook-%d-%d.pprof", rate, seg), segment)
				}
				lat, p := createPods(b, cs, j, int(float64(rate)*segment.Seconds()), rate, "m")
				stopProfile()
				stopHookProfile()
				after := takeSnapshot(b, cs, w)
				breakdowns[mode].add(before, after)
				if mode == modeWith {
					server.addDelta(before.hook, after.hook)
				}
				samples[mode] = append(samples[mode], lat...)
				ph := phases[mode]
				ph.Pods += p.Pods
				ph.Errors += p.Errors
				ph.Mutated = ph.Mutated && p.Mutated
				if reg != nil {
					unregister(b, *reg)
				}
				deletePods(b, cs, ns)
			}
			phases[modeWith].ServerP50Ms = round(server.quantile(0.50) * 1000)
			phases[modeWith].ServerP99Ms = round(server.quantile(0.99) * 1000)
			for _, m := range modes {
				phases[m].ClientP50Ms = quantileMs(samples[m], 0.50)
				phases[m].ClientP99Ms = quantileMs(samples[m], 0.99)
				phases[m].ClientMeanMs = meanMs(samples[m])
				phases[m].Breakdown = breakdowns[m].summary(phases[m].Pods)
				result.Phases = append(result.Phases, *phases[m])
			}
			without, with := phases[modeWithout], phases[modeWith]
			r := benchRate{RatePerSecond: rate,
				P50Ratio: round(with.ClientP50Ms / without.ClientP50Ms), P99Ratio: round(with.ClientP99Ms / without.ClientP99Ms)}
			if rp := phases[modeReference]; rp != nil {
				r.ReferenceP50Ratio = round(rp.ClientP50Ms / without.ClientP50Ms)
				r.ReferenceP99Ratio = round(rp.ClientP99Ms / without.ClientP99Ms)
				b.ReportMetric(r.ReferenceP99Ratio, fmt.Sprintf("reference-p99-ratio@%d/s", rate))
			}
			result.Ratios = append(result.Ratios, r)
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

func meanMs(lat []time.Duration) float64 {
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return round(float64(sum.Microseconds()) / 1000 / float64(max(len(lat), 1)))
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

// histogram is the cumulative bucket counts of the pods webhook's latency histogram, summed over
// measured segments.
type histogram struct {
	bounds []float64
	counts []float64
}

// addDelta adds the observations of lifeboat_webhook_request_duration_seconds{webhook="pods"}
// made between two scrapes.
func (h *histogram) addDelta(before, after series) {
	const prefix = `lifeboat_webhook_request_duration_seconds_bucket{webhook="pods",le="`
	type bucket struct{ bound, count float64 }
	var buckets []bucket
	for k, v := range after {
		le, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		le = strings.TrimSuffix(le, `"}`)
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		buckets = append(buckets, bucket{bound, v - before[k]})
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].bound < buckets[j].bound })
	if h.counts == nil {
		h.counts = make([]float64, len(buckets))
		for _, bk := range buckets {
			h.bounds = append(h.bounds, bk.bound)
		}
	}
	for i, bk := range buckets {
		h.counts[i] += bk.count
	}
}

// quantile of the observations, interpolated linearly within a bucket (as Prometheus'
// histogram_quantile does).
func (h histogram) quantile(q float64) float64 {
	if len(h.counts) == 0 {
		return 0
	}
	total := h.counts[len(h.counts)-1]
	if total == 0 {
		return 0
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for i, c := range h.counts {
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

// benchJob is a suspended Job whose Pods the benchmark creates itself, marked as managed by
// another controller so that kube-controller-manager's Job controller ignores it and its Pods.
func benchJob(b testing.TB, ns string) *batchv1.Job {
	b.Helper()
	j, err := shared.Client().BatchV1().Jobs(ns).Create(context.Background(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns},
		Spec: batchv1.JobSpec{
			Suspend:   ptr.To(true),
			ManagedBy: ptr.To("lifeboat.dev/benchmark"),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return j
}

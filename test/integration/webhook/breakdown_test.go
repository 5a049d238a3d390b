package webhook

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Where the added latency of the webhook goes: counters and histogram sums scraped from the
// apiserver's and the webhook's /metrics before and after every measured half, and the CPU time
// of every process of the local control plane (read from /proc). Means from _sum/_count are exact,
// unlike quantiles from the apiserver's coarse admission buckets (5 ms, 25 ms, ...).

// series is one scrape of a Prometheus text endpoint: "name{labels}" → value.
type series map[string]float64

func parseSeries(text string) series {
	s := series{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s[line[:i]] = v
	}
	return s
}

// sum adds the values of name whose labels include every want ("key": "value").
func (s series) sum(name string, want map[string]string) float64 {
	total := 0.0
	for k, v := range s {
		n, labels, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for lk, lv := range want {
			if !strings.Contains(","+labels, ","+lk+`="`+lv+`"`) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// procCPU is the user+system CPU seconds of this process and its children (the control plane
// and the webhook), by command name.
func procCPU() map[string]float64 {
	out := map[string]float64{}
	self := strconv.Itoa(os.Getpid())
	tick := 100.0 // USER_HZ on Linux
	read := func(pid string) {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			return
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < 0 {
			return
		}
		comm := s[open+1 : closing]
		f := strings.Fields(s[closing+2:])
		if len(f) < 13 || (pid != self && f[1] != self) {
			return
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		if pid == self {
			comm = "load generator (test)"
		} else if strings.HasSuffix(comm, ".test") {
			comm = "lifeboat-webhook"
		}
		out[comm] += (u + st) / tick
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			read(e.Name())
		}
	}
	return out
}

// snapshot is the state of the counters at one instant.
type snapshot struct {
	api, hook series
	cpu       map[string]float64
}

func takeSnapshot(b testing.TB, cs kubernetes.Interface, w *webhookProcess) snapshot {
	b.Helper()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("scrape kube-apiserver /metrics: %v", err)
	}
	if dir := os.Getenv(profileDirEnv); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "apiserver-metrics.txt"), raw, 0o644)
	}
	return snapshot{api: parseSeries(string(raw)), hook: parseSeries(w.Metrics()), cpu: procCPU()}
}

// breakdown accumulates, per mode, the differences between snapshots around measured halves.
type breakdown struct {
	api, hook series
	cpu       map[string]float64
}

func (d *breakdown) add(before, after snapshot) {
	if d.api == nil {
		d.api, d.hook, d.cpu = series{}, series{}, map[string]float64{}
	}
	for k, v := range after.api {
		d.api[k] += v - before.api[k]
	}
	for k, v := range after.hook {
		d.hook[k] += v - before.hook[k]
	}
	for k, v := range after.cpu {
		d.cpu[k] += v - before.cpu[k]
	}
}

// benchBreakdown is the JSON form: mean milliseconds per call of each stage, calls per Pod, CPU
// milliseconds per Pod of each process.
type benchBreakdown struct {
	// Pod POST as the apiserver measures it (from reading the request to writing the response).
	APIServerPodCreateMeanMs float64 `json:"apiserverPodCreateMeanMs"`
	// The same without the time spent waiting on webhooks (apiserver_request_sli_duration_seconds).
	APIServerPodCreateSLIMeanMs float64 `json:"apiserverPodCreateSLIMeanMs"`
	// The mutating admission step as a whole (all in-tree plugins and webhooks, reinvocation included).
	AdmitStepMeanMs    float64 `json:"admitStepMeanMs"`
	ValidateStepMeanMs float64 `json:"validateStepMeanMs"`
	// Per admission plugin (admit), mean ms per Pod.
	AdmitPluginMs map[string]float64 `json:"admitPluginMsPerPod,omitempty"`
	// The apiserver's view of one call of pods.lifeboat.dev: building the review, the HTTP round
	// trip, decoding the response and applying the patch.
	WebhookCallMeanMs  float64 `json:"webhookCallMeanMs,omitempty"`
	WebhookCallsPerPod float64 `json:"webhookCallsPerPod,omitempty"`
	// The webhook's own histogram (request read to response written).
	WebhookServerMeanMs float64 `json:"webhookServerMeanMs,omitempty"`
	EtcdCreateMeanMs    float64 `json:"etcdCreateMeanMs"`
	// Requests on pods other than the benchmark's POSTs (e.g. controllers reacting), per Pod.
	OtherPodRequestsPerPod map[string]float64 `json:"otherPodRequestsPerPod,omitempty"`
	CPUMsPerPod            map[string]float64 `json:"cpuMsPerPod"`
}

func mean(s series, name string, want map[string]string) float64 {
	c := s.sum(name+"_count", want)
	if c == 0 {
		return 0
	}
	return round(s.sum(name+"_sum", want) / c * 1000)
}

func (d *breakdown) summary(pods int) benchBreakdown {
	if d.api == nil || pods == 0 {
		return benchBreakdown{}
	}
	podPost := map[string]string{"verb": "POST", "resource": "pods", "subresource": ""}
	out := benchBreakdown{
		APIServerPodCreateMeanMs:    mean(d.api, "apiserver_request_duration_seconds", podPost),
		APIServerPodCreateSLIMeanMs: mean(d.api, "apiserver_request_sli_duration_seconds", podPost),
		AdmitStepMeanMs:             mean(d.api, "apiserver_admission_step_admission_duration_seconds", map[string]string{"operation": "CREATE", "type": "admit"}),
		ValidateStepMeanMs:          mean(d.api, "apiserver_admission_step_admission_duration_seconds", map[string]string{"operation": "CREATE", "type": "validate"}),
		WebhookCallMeanMs:           mean(d.api, "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "pods.lifeboat.dev", "type": "admit"}),
		WebhookServerMeanMs:         mean(d.hook, "lifeboat_webhook_request_duration_seconds", map[string]string{"webhook": "pods"}),
		EtcdCreateMeanMs:            mean(d.api, "etcd_request_duration_seconds", map[string]string{"operation": "create", "group": "", "resource": "pods"}),
		AdmitPluginMs:               map[string]float64{},
		OtherPodRequestsPerPod:      map[string]float64{},
		CPUMsPerPod:                 map[string]float64{},
	}
	calls := d.api.sum("apiserver_admission_webhook_admission_duration_seconds_count", map[string]string{"name": "pods.lifeboat.dev", "type": "admit"})
	out.WebhookCallsPerPod = round(calls / float64(pods))
	for k, v := range d.api {
		n, labels, _ := strings.Cut(k, "{")
		switch n {
		case "apiserver_admission_controller_admission_duration_seconds_sum":
			if strings.Contains(labels, `operation="CREATE"`) && strings.Contains(labels, `type="admit"`) && v > 0 {
				name := labelValue(labels, "name")
				out.AdmitPluginMs[name] = round(out.AdmitPluginMs[name] + v*1000/float64(pods))
			}
		case "apiserver_request_total":
			if strings.Contains(labels, `resource="pods"`) && v > 0 {
				verb := labelValue(labels, "verb")
				if sub := labelValue(labels, "subresource"); sub != "" {
					verb += "/" + sub
				}
				out.OtherPodRequestsPerPod[verb] += v
			}
		}
	}
	for verb, v := range out.OtherPodRequestsPerPod {
		if verb == "POST" {
			v -= float64(pods)
		}
		if math.Abs(v) < 0.5 {
			delete(out.OtherPodRequestsPerPod, verb)
			continue
		}
		out.OtherPodRequestsPerPod[verb] = round(v / float64(pods))
	}
	for p, v := range d.cpu {
		if v > 0 {
			out.CPUMsPerPod[p] = round(v * 1000 / float64(pods))
		}
	}
	return out
}

func labelValue(labels, key string) string {
	_, rest, ok := strings.Cut(","+labels, ","+key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// profileAPIServer records a CPU profile of kube-apiserver for d into
// $LIFEBOAT_BENCH_PROFILE_DIR/name (when set; the harness then starts the apiserver with
// --profiling). The returned function waits for the profile.
func profileAPIServer(b testing.TB, cs kubernetes.Interface, name string, d time.Duration) func() {
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(math.Max(1, d.Seconds())))).Timeout(d + time.Minute).DoRaw(context.Background())
		if err != nil {
			b.Errorf("profile kube-apiserver: %v", err)
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			b.Error(err)
		}
	}()
	return func() { <-done }
}

// profileURL records a CPU profile from a Go /debug/pprof endpoint (the webhook's
// --pprof-bind-address) into $LIFEBOAT_BENCH_PROFILE_DIR/name.
func profileURL(b testing.TB, base, name string, d time.Duration) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(math.Max(1, d.Seconds()))))
		if err != nil {
			b.Errorf("profile %s: %v", base, err)
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if err := os.WriteFile(filepath.Join(os.Getenv(profileDirEnv), name), raw, 0o644); err != nil {
			b.Error(err)
		}
	}()
	return func() { <-done }
}

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// BenchmarkNoticeToStartInstances measures, on the real control plane with the emulator, the
// time from an interruption notice being received by the controller (the interrupted-at time it
// records) to StartInstances having succeeded (the start-requested-at annotation on the claimed
// node), with 1 and with 10 Spot nodes interrupted at once. The two sizes are measured side by
// side in one environment, their rounds alternating (1, 10, 1, 10, ...), so that the machine's
// load weighs on both alike: each round creates the Spot nodes with one protected 3-CPU Pod
// each, waits for the cluster to settle, sends the notices, waits for the decisions, then for
// the pool to refill. The sub-benchmarks report the two sizes' samples; b.N is ignored.
func BenchmarkNoticeToStartInstances(b *testing.B) {
	var (
		once    sync.Once
		samples map[int]resumeSamples
	)
	// 20 rounds of each size by default: their p99 is their maximum. LIFEBOAT_BENCH_ROUNDS=100
	// (~15 min) gives a p99 that is not a single round.
	rounds := 20
	if v, err := strconv.Atoi(os.Getenv("LIFEBOAT_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for _, burst := range []int{1, 10} {
		b.Run(fmt.Sprintf("simultaneous=%d", burst), func(b *testing.B) {
			once.Do(func() { samples = benchResume(b, []int{1, 10}, rounds) })
			r := samples[burst]
			ms := func(d []time.Duration, p float64) float64 {
				sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				return float64(percentile(d, p).Microseconds()) / 1000
			}
			b.ReportMetric(ms(r.lat, 0.5), "p50-ms")
			b.ReportMetric(ms(r.lat, 0.95), "p95-ms")
			b.ReportMetric(ms(r.lat, 0.99), "p99-ms")
			b.ReportMetric(ms(r.fromSend, 0.5), "p50-from-send-ms")
			b.ReportMetric(ms(r.fromSend, 0.99), "p99-from-send-ms")
			// Where the time goes: notice → claim decided (batch window, plan) and claim →
			// StartInstances returned (the ledger write, the StartInstances call).
			b.ReportMetric(ms(r.toClaim, 0.5), "p50-to-claim-ms")
			b.ReportMetric(ms(r.claimToStart, 0.5), "p50-claim-to-start-ms")
			// Nodes of one SQS receive share their notice time, nodes of one decision batch
			// their StartInstances time.
			b.ReportMetric(float64(r.receives)/float64(rounds), "receives/round")
			b.ReportMetric(float64(r.batches)/float64(rounds), "batches/round")
			b.ReportMetric(float64(len(r.lat)), "samples")
			b.ReportMetric(float64(r.splitRounds), "split-rounds")
			b.ReportMetric(ms(r.latOneReceive, 0.99), "p99-one-receive-ms")
			// What one durable write per resumed node would cost on this machine: burst Node
			// patches (merge patch with a resourceVersion precondition), issued in parallel,
			// until the last returns.
			b.ReportMetric(ms(r.writeFloor, 0.5), "floor-p50-ms")
			b.ReportMetric(ms(r.writeFloor, 0.99), "floor-p99-ms")
		})
	}
}

type resumeSamples struct {
	lat, fromSend, toClaim, claimToStart, writeFloor []time.Duration
	// latOneReceive: the samples of the rounds whose notices all came in one SQS receive (a
	// long poll returns as soon as a message is there, so a burst can be split over two).
	latOneReceive     []time.Duration
	receives, batches int
	splitRounds       int
}

// benchResume runs rounds rounds of each burst size, alternating, in one environment whose pool
// holds the largest size.
func benchResume(b *testing.B, bursts []int, rounds int) map[int]resumeSamples {
	out := map[int]resumeSamples{}
	largest := 0
	for _, n := range bursts {
		largest = max(largest, n)
	}
	e := newBenchEnv(b, localcluster.Options{KWOK: true, ControllerManager: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	wp := e.warmPool(largest, "1h")
	if err := e.client.Create(ctx, wp); err != nil {
		b.Fatal(err)
	}
	e.startManager()
	e.waitFor("standby pool", 180*time.Second, e.standbyConverged(largest))
	for r := 0; r < 20; r++ {
		for _, burst := range bursts {
			s := out[burst]
			s.writeFloor = append(s.writeFloor, e.parallelPatchFloor(b, burst, 1)...)
			out[burst] = s
		}
	}
	for r := 0; r < rounds; r++ {
		for _, burst := range bursts {
			s := out[burst]
			e.resumeRound(b, &s, fmt.Sprintf("spot-%d-%d", burst, r), burst, r*1000+burst*100)
			out[burst] = s
			e.waitFor("pool refilled", 180*time.Second, e.standbyConverged(largest))
		}
	}
	return out
}

// resumeRound interrupts burst fresh Spot nodes (named prefix-i, instance IDs from idBase) at
// once and records the samples.
func (e *env) resumeRound(b *testing.B, out *resumeSamples, prefix string, burst, idBase int) {
	ctx := context.Background()
	var names, ids []string
	for i := 0; i < burst; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		id := fmt.Sprintf("i-%017x", 0xa0000+idBase+i)
		n := kwokNode(name, map[string]string{v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelInstanceType: "m5.xlarge", v1alpha1.LabelZone: "us-east-1a"}, "4", "aws:///us-east-1a/"+id)
		if _, err := e.cluster.CreateKWOKNode(ctx, n); err != nil {
			b.Fatal(err)
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{v1alpha1.LabelProtected: "true"}},
			Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}},
		}
		if err := e.client.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		names, ids = append(names, name), append(ids, id)
	}
	// Measure on a settled cluster: the round's Pods Running (KWOK has played their stages)
	// and a second for the writes they set off (kube-controller-manager, KWOK's Node
	// heartbeats, the controller's cache) — ten times more of them for ten nodes than for one,
	// and not what is measured.
	e.waitFor("the round's Pods Running", 60*time.Second, e.podsRunning("default", names...))
	time.Sleep(time.Second)
	sent := time.Now()
	for i, id := range ids {
		if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice(id, idBase+i)); err != nil {
			b.Fatal(err)
		}
	}
	// The latencies come from the controller's own timestamps: the test stays off the API
	// server while the burst is handled (its polls would cost ten times more for ten nodes).
	time.Sleep(300 * time.Millisecond)
	e.waitFor("decisions", 60*time.Second, func(ctx context.Context) (bool, string) {
		list := &corev1.NodeList{}
		if err := e.client.List(ctx, list); err != nil {
			return false, err.Error()
		}
		wanted, done := map[string]bool{}, 0
		for _, name := range names {
			wanted[name] = true
		}
		for _, n := range list.Items {
			if wanted[n.Name] && n.Annotations[v1alpha1.AnnotationResumeDecision] != "" {
				done++
			}
		}
		return done == len(names), fmt.Sprintf("%d/%d decided", done, len(names))
	})
	notices, starts := map[time.Time]bool{}, map[time.Time]bool{}
	var (
		worst, worstToClaim, worstClaimToStart time.Duration
		round                                  []time.Duration
	)
	for _, name := range names {
		claimed := &corev1.NodeList{}
		if err := e.client.List(ctx, claimed, client.MatchingLabels{v1alpha1.LabelResumedFor: name}); err != nil {
			b.Fatal(err)
		}
		for i := range claimed.Items {
			c := &claimed.Items[i]
			notice, ok1 := nodeutil.Time(c.Annotations, v1alpha1.AnnotationInterruptedAt)
			started, ok2 := nodeutil.Time(c.Annotations, v1alpha1.AnnotationStartRequestedAt)
			claimedAt, ok3 := nodeutil.Time(c.Annotations, v1alpha1.AnnotationActivatedAt)
			if ok1 && ok2 && ok3 {
				out.lat = append(out.lat, started.Sub(notice))
				round = append(round, started.Sub(notice))
				out.fromSend = append(out.fromSend, started.Sub(sent))
				out.toClaim = append(out.toClaim, claimedAt.Sub(notice))
				out.claimToStart = append(out.claimToStart, started.Sub(claimedAt))
				notices[notice], starts[started] = true, true
				worst = max(worst, started.Sub(notice))
				worstToClaim, worstClaimToStart = max(worstToClaim, claimedAt.Sub(notice)), max(worstClaimToStart, started.Sub(claimedAt))
			}
		}
	}
	out.receives += len(notices)
	out.batches += len(starts)
	if len(notices) == 1 {
		out.latOneReceive = append(out.latOneReceive, round...)
	} else {
		out.splitRounds++
	}
	// One line per round (hack/bench-controller.sh keeps them in controller-rounds.txt).
	fmt.Printf("round %s: %d at once, worst %v (to claim %v, claim → start %v), %d receives, %d batches\n", prefix, burst, worst, worstToClaim, worstClaimToStart, len(notices), len(starts))
	// Clean up: the interrupted nodes go (as EC2 would reclaim them), the lifeboats are
	// released by terminating their instances (the handoff is not what is measured here).
	for _, name := range names {
		_ = e.client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}, client.GracePeriodSeconds(0))
		_ = e.client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		claimed := &corev1.NodeList{}
		_ = e.client.List(ctx, claimed, client.MatchingLabels{v1alpha1.LabelResumedFor: name})
		for i := range claimed.Items {
			_ = e.inst.Terminate(ctx, nodeutil.InstanceID(&claimed.Items[i]))
		}
	}
}

// parallelPatchFloor times n parallel Node patches (an annotation, merge patch with a
// resourceVersion precondition — what a claim is) on the pool's standby Nodes, rounds times.
func (e *env) parallelPatchFloor(b *testing.B, n, rounds int) []time.Duration {
	ctx := context.Background()
	var out []time.Duration
	for r := 0; r < rounds; r++ {
		list := &corev1.NodeList{}
		if err := e.sampler().List(ctx, list, client.MatchingLabels{v1alpha1.LabelState: string(v1alpha1.NodeStateStandby)}); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) < n {
			b.Fatalf("%d standby Nodes, want %d", len(list.Items), n)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				node := list.Items[i].DeepCopy()
				before := node.DeepCopy()
				node.Annotations["bench.lifeboat.dev/touch"] = fmt.Sprint(r)
				errs[i] = e.sampler().Patch(ctx, node, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
			}()
		}
		wg.Wait()
		out = append(out, time.Since(start))
		for _, err := range errs {
			if err != nil && !apierrors.IsConflict(err) {
				b.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out
}

// countingTransport counts API requests by verb.
type countingTransport struct {
	next          http.RoundTripper
	reads, writes atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		c.reads.Add(1)
	} else {
		c.writes.Add(1)
	}
	return c.next.RoundTrip(r)
}

// BenchmarkReconcile100 measures one steady-state reconcile of a converged 100-instance pool:
// wall time, EC2 calls and Kubernetes API requests (the manager reads from its cache; watches
// are long-running GETs started before the measurement).
func BenchmarkReconcile100(b *testing.B) {
	e := newBenchEnv(b, localcluster.Options{KWOK: true, ControllerManager: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	if err := e.client.Create(ctx, e.warmPool(100, "1h")); err != nil {
		b.Fatal(err)
	}
	ct := &countingTransport{}
	e.wrap = func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct }
	m := e.startManager()
	e.waitFor("100 standby", 600*time.Second, e.standbyConverged(100))
	time.Sleep(2 * time.Second) // let the status settle
	ec2Before := e.emu.TotalCalls("DescribeInstances") + e.emu.TotalCalls("RunInstances") + e.emu.TotalCalls("StopInstances") + e.emu.TotalCalls("StartInstances") + e.emu.TotalCalls("TerminateInstances")
	r0, w0 := ct.reads.Load(), ct.writes.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.reg.WarmPool.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: poolName}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ec2After := e.emu.TotalCalls("DescribeInstances") + e.emu.TotalCalls("RunInstances") + e.emu.TotalCalls("StopInstances") + e.emu.TotalCalls("StartInstances") + e.emu.TotalCalls("TerminateInstances")
	// The manager's own periodic resyncs run concurrently and are counted too: an upper bound.
	b.ReportMetric(float64(ec2After-ec2Before)/float64(b.N), "ec2-calls/op")
	b.ReportMetric(float64(ct.reads.Load()-r0)/float64(b.N), "kube-reads/op")
	b.ReportMetric(float64(ct.writes.Load()-w0)/float64(b.N), "kube-writes/op")
}

// BenchmarkLedgerPatch measures, on an idle control plane, what the resume ledger's write costs
// by its content: a merge patch (resourceVersion precondition) adding 1 entry of 250 bytes, 10
// such entries, or 1 entry of 2.5 kB, rounds interleaved, each patch's keys removed again after
// it. It tells the ledger's size from the machine's own write latency. b.N is ignored.
func BenchmarkLedgerPatch(b *testing.B) {
	e := newBenchEnv(b, localcluster.Options{})
	ctx := context.Background()
	key := types.NamespacedName{Namespace: v1alpha1.DefaultNamespace, Name: "ledger-patch-probe"}
	if err := e.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		b.Fatal(err)
	}
	entry := strings.Repeat("x", 250)
	shapes := []struct {
		name string
		data func(r int) map[string]any
	}{
		{"entries=1", func(r int) map[string]any { return map[string]any{fmt.Sprintf("k-%d", r): entry} }},
		{"entries=10", func(r int) map[string]any {
			d := map[string]any{}
			for i := range 10 {
				d[fmt.Sprintf("k-%d-%d", r, i)] = entry
			}
			return d
		}},
		{"entries=1-bytes=2500", func(r int) map[string]any { return map[string]any{fmt.Sprintf("k-%d", r): strings.Repeat(entry, 10)} }},
	}
	lat := map[string][]time.Duration{}
	patch := func(body map[string]any) time.Duration {
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		start := time.Now()
		if err := e.client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, raw)); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for r := 0; r < 150; r++ {
		for _, s := range shapes {
			cur := &corev1.ConfigMap{}
			if err := e.client.Get(ctx, key, cur); err != nil {
				b.Fatal(err)
			}
			data := s.data(r)
			time.Sleep(20 * time.Millisecond) // idle between writes
			lat[s.name] = append(lat[s.name], patch(map[string]any{"metadata": map[string]string{"resourceVersion": cur.ResourceVersion}, "data": data}))
			for k := range data {
				data[k] = nil
			}
			patch(map[string]any{"data": data})
		}
	}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			d := lat[s.name]
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			b.ReportMetric(float64(percentile(d, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(d, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

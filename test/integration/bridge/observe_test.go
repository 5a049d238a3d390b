package bridge

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// podHistory is what a recorder saw of one Pod.
type podHistory struct {
	name, node string
	// holds are the values of the eviction-hold annotation in the order they were seen
	// ("" first when the Pod had none).
	holds []string
	// evicted: the Eviction API took it (the DisruptionTarget condition it sets before the
	// delete); holdAtEviction is the hold annotation then, evictedAt when the recorder saw it.
	evicted        bool
	holdAtEviction string
	evictedAt      time.Time
	// deleting: its deletion was requested (by an eviction or a delete); holdAtDeletion is the
	// annotation then, deletingRV the resourceVersion of that write.
	deleting       bool
	holdAtDeletion string
	deletingRV     int64
	gone           bool
	// readyOn is the node the Pod was first seen Ready on.
	readyOn string
	// doNotDisrupt: every write of a hold deadline came with Lifeboat's
	// karpenter.sh/do-not-disrupt ending at the deadline (policy.HoldAnnotations); unpaired
	// says how one did not, "" when all did.
	paired   int
	unpaired string
	// steps is the Pod's timeline (first seen, bound, Ready, evicted, deleting, gone), for a
	// failing test's log.
	steps []string
}

// recorder watches Pods and keeps every Pod's history. Watch events of one object arrive in
// the order of its writes, so "the hold annotation at the moment the deletion was written" is
// exact, not sampled.
type recorder struct {
	mu     sync.Mutex
	pods   map[types.UID]*podHistory
	cancel context.CancelFunc
	done   chan struct{}
}

// recordPods starts a recorder of the namespace's Pods matching selector; it stops at test end.
func (e *env) recordPods(t *testing.T, ns, selector string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{pods: map[types.UID]*podHistory{}, cancel: cancel}
	r.done = e.watchPods(ctx, t, ns, selector, r.observe)
	t.Cleanup(r.stop)
	return r
}

// watchPods lists the Pods of ns matching selector, hands each to observe (as Added), then
// watches from the list's resourceVersion, re-watching after a closed watch, and hands every
// event's Pod to observe in the order of its writes, until ctx ends; the returned channel
// closes then. A failed list fails the test.
func (e *env) watchPods(ctx context.Context, t *testing.T, ns, selector string, observe func(watch.EventType, *corev1.Pod)) chan struct{} {
	t.Helper()
	list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		observe(watch.Added, &list.Items[i])
	}
	rv := list.ResourceVersion
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := e.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type != watch.Bookmark {
					observe(ev.Type, p)
				}
			}
		}
	}()
	return done
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

func (r *recorder) observe(typ watch.EventType, p *corev1.Pod) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.pods[p.UID]
	step := func(format string, args ...any) {
		h.steps = append(h.steps, now.Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
	if h == nil {
		h = &podHistory{name: p.Name}
		r.pods[p.UID] = h
		step("seen (created %s, seat host %q, scheduler %q)", p.CreationTimestamp.Format("15:04:05"), p.Labels[v1alpha1.LabelSeatHost], p.Spec.SchedulerName)
	}
	if p.Spec.NodeName != "" {
		if h.node == "" {
			step("bound to %s", p.Spec.NodeName)
		}
		h.node = p.Spec.NodeName
		if h.readyOn == "" && nodeutil.PodReady(p) {
			h.readyOn = p.Spec.NodeName
			step("Ready on %s", p.Spec.NodeName)
		}
	}
	hold := p.Annotations[v1alpha1.AnnotationEvictionHold]
	if len(h.holds) == 0 || h.holds[len(h.holds)-1] != hold {
		h.holds = append(h.holds, hold)
	}
	if until, err := time.Parse(time.RFC3339Nano, hold); err == nil && h.unpaired == "" {
		if msg := doNotDisruptMismatch(p, until); msg != "" {
			h.unpaired = msg
		} else {
			h.paired++
		}
	}
	if !h.evicted && evictedByAPI(p) {
		h.evicted, h.holdAtEviction, h.evictedAt = true, hold, now
		step("evicted (hold %q)", hold)
	}
	if !h.deleting && p.DeletionTimestamp != nil {
		h.deleting, h.holdAtDeletion = true, hold
		h.deletingRV, _ = strconv.ParseInt(p.ResourceVersion, 10, 64)
		step("deleting (hold %q, phase %s)", hold, p.Status.Phase)
	}
	if typ == watch.Deleted && !h.gone {
		h.gone = true
		step("gone")
	}
}

// doNotDisruptMismatch: why p's karpenter.sh/do-not-disrupt does not end at the hold's
// deadline (Karpenter counts the duration from the Pod's start), "" when it does.
func doNotDisruptMismatch(p *corev1.Pod, until time.Time) string {
	raw := p.Annotations[v1alpha1.AnnotationKarpenterDoNotDisrupt]
	d, err := time.ParseDuration(raw)
	switch {
	case p.Annotations[v1alpha1.AnnotationDoNotDisruptByLifeboat] != "true" || err != nil:
		return fmt.Sprintf("%s held until %s without Lifeboat's do-not-disrupt (%q)", p.Name, until.Format(time.StampMilli), raw)
	case p.Status.StartTime == nil:
		return p.Name + " has a do-not-disrupt duration but no start time"
	}
	end := p.Status.StartTime.Add(d)
	if end.Before(until) || end.After(until.Add(time.Second)) {
		return fmt.Sprintf("%s: do-not-disrupt %s from its start ends at %s, the hold at %s", p.Name, raw, end.Format(time.StampMilli), until.Format(time.StampMilli))
	}
	return ""
}

// evictedByAPI: the Eviction API's DisruptionTarget condition.
func evictedByAPI(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
			return true
		}
	}
	return false
}

// history returns a copy of the Pod's history.
func (r *recorder) history(uid types.UID) podHistory {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.pods[uid]; h != nil {
		c := *h
		c.holds = append([]string(nil), h.holds...)
		c.steps = append([]string(nil), h.steps...)
		return c
	}
	return podHistory{}
}

// all returns every Pod's history.
func (r *recorder) all() map[types.UID]podHistory {
	r.mu.Lock()
	uids := make([]types.UID, 0, len(r.pods))
	for uid := range r.pods {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	out := map[types.UID]podHistory{}
	for _, uid := range uids {
		out[uid] = r.history(uid)
	}
	return out
}

// timeline is every recorded Pod's steps, grouped by Pod name and ordered by the first step,
// for a failing test's log.
func (r *recorder) timeline() string {
	type entry struct{ name, first, body string }
	var entries []entry
	for uid, h := range r.all() {
		first := ""
		if len(h.steps) > 0 {
			first = h.steps[0]
		}
		entries = append(entries, entry{h.name, first, fmt.Sprintf("  %s (%s):\n    %s", h.name, uid, strings.Join(h.steps, "\n    "))})
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].name != entries[j].name {
			return entries[i].name < entries[j].name
		}
		return entries[i].first < entries[j].first
	})
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.body + "\n")
	}
	return b.String()
}

// holdViolation says what is wrong with an old Pod's end, "" if nothing: its eviction or
// deletion came before Lifeboat decided its hold, or the Eviction API took it while its hold
// was in force (the webhook must refuse that). allowHeldEviction is for the fail-open check,
// where the webhook is down on purpose.
func holdViolation(h podHistory, allowHeldEviction bool) string {
	switch {
	case h.evicted && h.holdAtEviction == "":
		return fmt.Sprintf("%s evicted before its hold was decided (hold annotations seen: %q)", h.name, h.holds)
	case h.deleting && h.holdAtDeletion == "":
		return fmt.Sprintf("%s deleted before its hold was decided (hold annotations seen: %q)", h.name, h.holds)
	case h.evicted && !allowHeldEviction:
		if until, err := time.Parse(time.RFC3339Nano, h.holdAtEviction); err == nil && h.evictedAt.Before(until) {
			return fmt.Sprintf("%s evicted at %s while held until %s", h.name, h.evictedAt.UTC().Format(time.StampMilli), until.UTC().Format(time.StampMilli))
		}
	}
	return ""
}

// sampler counts a selector's serving Pods (Ready, not terminating) every 100 ms.
type sampler struct {
	mu      sync.Mutex
	min     int
	samples int
	lowest  string // when the minimum was first seen, and what was Ready
	cancel  context.CancelFunc
	done    chan struct{}
}

func (e *env) sampleReady(t *testing.T, ns, selector string) *sampler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{min: 1 << 30, cancel: cancel, done: make(chan struct{})}
	began := time.Now()
	first := make(chan struct{})
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			pods, err := e.listPods(ctx, ns, selector)
			if err == nil && ctx.Err() == nil {
				n := readyCount(pods)
				s.mu.Lock()
				if n < s.min {
					s.min = n
					s.lowest = fmt.Sprintf("%d ready at +%s of %d Pods", n, time.Since(began).Round(time.Millisecond), len(pods))
				}
				s.samples++
				if s.samples == 1 {
					close(first)
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the ready sampler got no sample in 10s")
	}
	t.Cleanup(s.stop)
	return s
}

// stop ends sampling and returns the minimum and the number of samples.
func (s *sampler) stop() {
	s.cancel()
	<-s.done
}

func (s *sampler) result() (min, samples int, lowest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.min, s.samples, s.lowest
}

// seatWatch records the resourceVersion of the first Node write that showed a Ready seat
// (seatReady). The API server's resourceVersions are etcd revisions, one counter for every
// object, so comparing one with a Pod write's says which came first; the harness runs
// kube-apiserver on etcd3, where that holds.
type seatWatch struct {
	mu   sync.Mutex
	rv   int64
	node string
	// boats are the names of every node of the pool seen.
	boats  map[string]bool
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *env) watchSeats(t *testing.T) *seatWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &seatWatch{boats: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelPool + "=" + poolName}
	list, err := e.kube.CoreV1().Nodes().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if seatReady(&list.Items[i]) {
			t.Fatalf("lifeboat %s is already active before the notice", list.Items[i].Name)
		}
		s.boats[list.Items[i].Name] = true
	}
	rv := list.ResourceVersion
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			opts := sel
			opts.ResourceVersion = rv
			w, err := e.kube.CoreV1().Nodes().Watch(ctx, opts)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					continue
				}
				rv = n.ResourceVersion
				s.mu.Lock()
				s.boats[n.Name] = true
				s.mu.Unlock()
				if ev.Type != watch.Deleted && seatReady(n) {
					s.mu.Lock()
					if s.rv == 0 {
						s.rv, _ = strconv.ParseInt(n.ResourceVersion, 10, 64)
						s.node = n.Name
					}
					s.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// isBoat: the node is one of the pool's.
func (s *seatWatch) isBoat(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boats[node]
}

func (s *seatWatch) first() (int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv, s.node
}

package interruption

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/intake"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/marks"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// fakeStore is a fake API server holding copies of objs, with the Node and Pod indexes, the
// WarmPool kind (status subresource) and a WarmPool for every pool a Node of objs names.
func fakeStore(objs ...client.Object) client.WithWatch {
	copies := make([]client.Object, 0, len(objs))
	pools := map[string]bool{}
	for _, o := range objs {
		copies = append(copies, o.DeepCopyObject().(client.Object))
		if wp, ok := o.(*v1alpha1.WarmPool); ok {
			pools[wp.Name] = true
		}
	}
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && nodeutil.Pool(n) != "" && !pools[nodeutil.Pool(n)] {
			pools[nodeutil.Pool(n)] = true
			copies = append(copies, &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: nodeutil.Pool(n)}})
		}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(copies...).
		WithStatusSubresource(&v1alpha1.WarmPool{}).
		WithIndex(&corev1.Pod{}, indexes.PodNodeName, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithIndex(&corev1.Node{}, indexes.NodeInstanceID, func(o client.Object) []string { return []string{nodeutil.InstanceID(o.(*corev1.Node))} }).
		Build()
}

// deliver hands msgs to HandleBatch as the SQS consumer does, running the reconciles it
// triggers meanwhile (HandleBatch returns once the decisions it requested are recorded).
func deliver(t *testing.T, ctrl *Controller, msgs ...interruptionqueue.Message) []error {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- ctrl.intake.HandleBatch(context.Background(), msgs) }()
	for {
		select {
		case errs := <-done:
			drainConcurrently(t, ctrl)
			return errs
		case <-time.After(2 * time.Millisecond):
			drainConcurrently(t, ctrl)
		}
	}
}

// laggingCache is an informer cache that never catches up: reads come from a snapshot of
// objs, writes go to the API server (api), as the manager's client does.
func laggingCache(api client.WithWatch, objs ...client.Object) client.Client {
	return interceptor.NewClient(fakeStore(objs...), interceptor.Funcs{
		Create: func(ctx context.Context, _ client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return api.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, _ client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return api.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return api.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, _ client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return api.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, _ client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return api.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, _ client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return api.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}

// listCounter counts the reader's Node lists by label selector.
type listCounter struct {
	mu    sync.Mutex
	lists map[string]int
}

func (l *listCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		o := &client.ListOptions{}
		o.ApplyOptions(opts)
		if _, ok := list.(*corev1.NodeList); ok && o.LabelSelector != nil {
			l.mu.Lock()
			l.lists[o.LabelSelector.String()]++
			l.mu.Unlock()
		}
		return c.List(ctx, list, opts...)
	}}
}

func (l *listCounter) count(selectorPrefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for sel, c := range l.lists {
		if len(sel) >= len(selectorPrefix) && sel[:len(selectorPrefix)] == selectorPrefix {
			n += c
		}
	}
	return n
}

func newController(cache client.Client, reader client.Reader) (*Controller, *cloudtest.Instances) {
	f := cloudtest.New()
	f.UnknownState = cloud.StateStopped
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	return realWindows(New(cache, reader, f, clk, events.NewFakeRecorder(1000), nil, "")), f
}

// realWindows runs the batch windows in real time: the tests step the decisions' fake clock
// only.
func realWindows(c *Controller) *Controller {
	c.batch.clock = clock.RealClock{}
	c.beforeStart.clock = clock.RealClock{}
	return c
}

// drainConcurrently runs the reconciles of the triggered Nodes as the controller's workers do
// (each Node in its own goroutine, one reconcile per Node at a time, a requeue or a trigger
// meanwhile running it again), taking in the triggers that arrive while they run, until none
// runs and none is triggered. A reconcile that never returns (a batch waiting for a Node that
// never joins it) fails the test after drainTimeout rather than hanging it.
func drainConcurrently(t *testing.T, ctrl *Controller) {
	t.Helper()
	const (
		drainTimeout = 30 * time.Second
		maxRuns      = 1000
	)
	type finished struct {
		name    string
		requeue bool
	}
	var (
		running = map[string]bool{}
		again   = map[string]bool{}
		done    = make(chan finished, maxRuns)
		runs    int
	)
	start := func(name string) {
		running[name] = true
		runs++
		go func() {
			res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
			if err != nil {
				t.Errorf("reconcile %s: %v", name, err)
			}
			done <- finished{name: name, requeue: res.Requeue}
		}()
	}
	triggered := func(name string) {
		if running[name] {
			again[name] = true
			return
		}
		start(name)
	}
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	for {
		if runs > maxRuns {
			t.Fatalf("reconcile did not settle: %d reconciles", runs)
		}
		select {
		case ev := <-ctrl.trigger:
			triggered(ev.Object.GetName())
			continue
		default:
		}
		if len(running) == 0 {
			return
		}
		select {
		case ev := <-ctrl.trigger:
			triggered(ev.Object.GetName())
		case f := <-done:
			delete(running, f.name)
			if f.requeue || again[f.name] {
				delete(again, f.name)
				start(f.name)
			}
		case <-deadline.C:
			names := make([]string, 0, len(running))
			for n := range running {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Fatalf("the reconciles of %v did not return in %v (a decision batch waiting for a Node that never joins it?)", names, drainTimeout)
		}
	}
}

func decisionOf(t *testing.T, c client.Reader, node string) string {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Annotations[v1alpha1.AnnotationResumeDecision]
}

// TestBurstIsOneBatch: ten notices of one receive batch (with duplicates and a reordered
// state change) are decided as one batch: one live read of the ledger and of the pool's Nodes,
// one ledger write with the ten claims before one StartInstances call with the ten instances,
// one distinct lifeboat per interrupted node, each marked with its decision in one write.
func TestBurstIsOneBatch(t *testing.T) {
	const burst = 10
	var objs []client.Object
	var msgs []interruptionqueue.Message
	for i := range burst {
		objs = append(objs, spotNode(fmt.Sprintf("spot-%d", i), fmt.Sprintf("i-spot%d", i)), protectedPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("spot-%d", i), "3"),
			standbyNode(fmt.Sprintf("sb-%d", i), fmt.Sprintf("i-sb%d", i), "4"))
		msgs = append(msgs, spotMessage(fmt.Sprintf("i-spot%d", i)))
	}
	msgs = append(msgs, spotMessage("i-spot3"), interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "shutting-down", InstanceIDs: []string{"i-spot5"}}, spotMessage("i-spot3"))
	api := fakeStore(objs...)
	lists := &listCounter{lists: map[string]int{}}
	var (
		writeMu      sync.Mutex
		ledgerWrites []int // claims per ledger write
		nodeWrites   = map[string]int{}
	)
	cache := interceptor.NewClient(api, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				writeMu.Lock()
				ledgerWrites = append(ledgerWrites, len(cm.Data))
				writeMu.Unlock()
			}
			return cl.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writeMu.Lock()
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				ledgerWrites = append(ledgerWrites, len(cm.Data))
			} else {
				nodeWrites[obj.GetName()]++
			}
			writeMu.Unlock()
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	ctrl, f := newController(cache, interceptor.NewClient(api, lists.funcs()))
	// Only the announced Nodes' arrival closes the batch (however slow the fake client is).
	ctrl.batch.max, ctrl.batch.awaitFor = time.Hour, time.Hour

	for i, err := range deliver(t, ctrl, msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	drainConcurrently(t, ctrl)

	if len(f.Batches) != 1 || len(f.Batches[0]) != burst {
		t.Fatalf("StartInstances calls %v, want one with %d instances", f.Batches, burst)
	}
	if got := lists.count(v1alpha1.LabelPool); got != 0 {
		t.Errorf("%d live reads of the pool nodes, want none (the plan is made on the cache)", got)
	}
	// One write adds the ten claims; the ledger's reconcile removes them once the cache shows
	// the Nodes' labels.
	if len(ledgerWrites) != 1 || ledgerWrites[0] != burst {
		t.Errorf("ledger writes with %v claims, want [%d]", ledgerWrites, burst)
	}
	reconcilePool(t, ctrl)
	for i := range burst {
		if n := nodeWrites[fmt.Sprintf("spot-%d", i)]; n != 1 {
			t.Errorf("spot-%d written %d times, want 1 (mark and decision together)", i, n)
		}
		if n := nodeWrites[fmt.Sprintf("sb-%d", i)]; n != 1 {
			t.Errorf("sb-%d written %d times, want 1 (the claim's labels)", i, n)
		}
	}
	assertLedgerEmpty(t, api)
	used := map[string]bool{}
	for i := range burst {
		d := decisionOf(t, api, fmt.Sprintf("spot-%d", i))
		if d == "" || used[d] {
			t.Fatalf("spot-%d decision %q (used %v)", i, d, used)
		}
		used[d] = true
	}
	for id, n := range f.Resumed {
		if n != 1 {
			t.Errorf("%s started %d times", id, n)
		}
	}
	// The same notices again: nothing more.
	for _, err := range deliver(t, ctrl, msgs...) {
		if err != nil {
			t.Fatal(err)
		}
	}
	drainConcurrently(t, ctrl)
	if len(f.Batches) != 1 {
		t.Fatalf("StartInstances calls %v after the duplicates, want still one", f.Batches)
	}
}

// TestBurstPartialICE: one instance of the batch's StartInstances has no capacity: it is
// terminated and unclaimed, the others start, and its interrupted node gets another standby
// node in a second pass.
func TestBurstPartialICE(t *testing.T) {
	objs := []client.Object{standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"), standbyNode("sb-3", "i-sb3", "4")}
	var msgs []interruptionqueue.Message
	for i := range 3 {
		objs = append(objs, spotNode(fmt.Sprintf("spot-%d", i), fmt.Sprintf("i-spot%d", i)), protectedPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("spot-%d", i), "3"))
		msgs = append(msgs, spotMessage(fmt.Sprintf("i-spot%d", i)))
	}
	api := fakeStore(objs...)
	ctrl, f := newController(api, api)
	ctrl.batch.max, ctrl.batch.awaitFor = time.Hour, time.Hour
	// Equal demands are planned in name order and first-fit decreasing opens the largest
	// node first: spot-0 gets sb-big, which has no capacity.
	f.ICE["i-sbbig"] = true
	for _, err := range deliver(t, ctrl, msgs...) {
		if err != nil {
			t.Fatal(err)
		}
	}
	drainConcurrently(t, ctrl)

	if !f.Gone["i-sbbig"] || f.Resumed["i-sbbig"] != 0 {
		t.Fatalf("gone %v resumed %v: want i-sbbig terminated", f.Gone, f.Resumed)
	}
	if len(f.Batches) != 2 || len(f.Batches[0]) != 3 || len(f.Batches[1]) != 1 {
		t.Fatalf("StartInstances calls %v, want one for the batch (3) and one for the re-plan (1)", f.Batches)
	}
	used := map[string]bool{}
	for i := range 3 {
		d := decisionOf(t, api, fmt.Sprintf("spot-%d", i))
		if d == "" || d == "sb-big" || used[d] {
			t.Fatalf("spot-%d decision %q", i, d)
		}
		used[d] = true
	}
	big := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-big"}, big)
	if big.Labels[v1alpha1.LabelResumedFor] != "" || big.Labels[v1alpha1.LabelState] != string(v1alpha1.NodeStateDraining) {
		t.Fatalf("sb-big labels %v, want unclaimed and draining", big.Labels)
	}
}

// TestStaleCacheLedgerReplansFromAPI: the cache does not show a ledger entry another batch
// wrote for sb-big an instant ago; the plan made on the cache picks sb-big, its ledger write
// fails the resourceVersion precondition, and the plan is made again from the API server,
// which resumes a free node.
func TestStaleCacheLedgerReplansFromAPI(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	objs := []client.Object{spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-2", "i-sb2", "4")}
	api := fakeStore(objs...)
	// Another batch put sb-big into the ledger after the cache's snapshot.
	if err := api.Create(context.Background(), ledgerWith(ledger.Claim{Node: "sb-big", InstanceID: "i-sbbig", For: "spot-other", Holder: "other/1"})); err != nil {
		t.Fatal(err)
	}
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(laggingCache(api, objs...), interceptor.NewClient(api, lists.funcs()))
	ctrl.holders.run("other/1")

	drainOne(t, ctrl, "spot-1")

	if len(f.Resumed) != 1 || f.Resumed["i-sb2"] != 1 {
		t.Fatalf("resumed %v, want only i-sb2", f.Resumed)
	}
	if got := lists.count(v1alpha1.LabelPool); got != 1 {
		t.Errorf("%d pool-node lists from the API server, want 1 (the re-plan)", got)
	}
	if d := decisionOf(t, api, "spot-1"); d != "sb-2" {
		t.Fatalf("decision %q, want sb-2", d)
	}
}

// assertLedgerEmpty: every ledger entry was labelled and removed.
func assertLedgerEmpty(t *testing.T, c client.Reader) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := c.Get(context.Background(), ledger.Key(v1alpha1.DefaultNamespace), cm)
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) > 0 {
		t.Errorf("the resume ledger still holds %v", cm.Data)
	}
}

// ledgerWith is the resume ledger holding claims.
func ledgerWith(claims ...ledger.Claim) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: ledger.Name}, Data: map[string]string{}}
	for _, cl := range claims {
		cm.Data[cl.Node] = ledger.Encode(cl)
	}
	return cm
}

// conflictingLedger returns interceptor funcs whose writes of the ledger with this process's
// claims conflict: the first time only, after another writer (a second controller during a
// leader handover) put sb-big into the ledger for spot-other, or always. writes counts them.
func conflictingLedger(always bool, writes *atomic.Int32) interceptor.Funcs {
	ours := func(obj client.Object) bool {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return false
		}
		claims, _ := ledger.Decode(cm)
		for _, cl := range claims {
			if cl.Holder != "other/1" {
				return true
			}
		}
		return false
	}
	conflict := func(ctx context.Context, cl client.WithWatch, obj client.Object) error {
		if n := writes.Add(1); always {
			return apierrors.NewConflict(corev1.Resource("configmaps"), obj.GetName(), fmt.Errorf("the object has been modified"))
		} else if n == 1 {
			if err := cl.Create(ctx, ledgerWith(ledger.Claim{Node: "sb-big", InstanceID: "i-sbbig", For: "spot-other", Holder: "other/1"})); err != nil {
				return err
			}
		}
		return nil
	}
	return interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if ours(obj) {
				if err := conflict(ctx, cl, obj); err != nil {
					return err
				}
			}
			return cl.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			// The claims are in the patch (a merge patch of the ledger's data).
			body, err := patch.Data(obj)
			if err != nil {
				return err
			}
			patched := &corev1.ConfigMap{}
			if _, isLedger := obj.(*corev1.ConfigMap); isLedger && json.Unmarshal(body, patched) == nil && ours(patched) {
				if err := conflict(ctx, cl, obj); err != nil {
					return err
				}
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	}
}

// TestClaimConflictReplansFromAPI: another writer claims the planned node in the ledger between
// the plan and the ledger write (the write's precondition fails); the re-plan reads the ledger
// again and claims another node; nothing is resumed twice.
func TestClaimConflictReplansFromAPI(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	store := fakeStore(spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-2", "i-sb2", "4"))
	var writes atomic.Int32
	c := interceptor.NewClient(store, conflictingLedger(false, &writes))
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(c, interceptor.NewClient(store, lists.funcs()))
	ctrl.holders.run("other/1") // the other writer's batch is still running

	drainOne(t, ctrl, "spot-1")

	if writes.Load() != 2 || len(f.Resumed) != 1 || f.Resumed["i-sb2"] != 1 {
		t.Fatalf("ledger writes %d resumed %v, want the conflict and then only i-sb2", writes.Load(), f.Resumed)
	}
	if got := lists.count(v1alpha1.LabelPool); got != 1 {
		t.Errorf("%d pool-node lists from the API server, want 1 (the re-plan)", got)
	}
	if d := decisionOf(t, store, "spot-1"); d != "sb-2" {
		t.Fatalf("decision %q, want sb-2", d)
	}
	reconcilePool(t, ctrl)
	cm := &corev1.ConfigMap{}
	if err := store.Get(context.Background(), ledger.Key(v1alpha1.DefaultNamespace), cm); err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data["sb-big"]; len(cm.Data) != 1 || !ok {
		t.Fatalf("ledger %v, want only the other writer's sb-big entry", cm.Data)
	}
}

// TestPersistentConflictRequeues: a ledger write that keeps conflicting is planned three
// times, then the Node is requeued, nothing started and no decision recorded.
func TestPersistentConflictRequeues(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	store := fakeStore(spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
	var writes atomic.Int32
	ctrl, f := newController(interceptor.NewClient(store, conflictingLedger(true, &writes)), store)
	res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot-1"}})
	if err != nil || !res.Requeue {
		t.Fatalf("res %+v err %v, want a requeue", res, err)
	}
	if writes.Load() != 3 || len(f.Resumed) != 0 || decisionOf(t, store, "spot-1") != "" {
		t.Fatalf("ledger writes %d resumed %v decision %q", writes.Load(), f.Resumed, decisionOf(t, store, "spot-1"))
	}
	assertLedgerEmpty(t, store)
}

// TestCacheLagsOwnClaim: a pass claimed sb-1 for spot-1 (ledger entry and label written) and
// failed before StartInstances; the cache shows neither the entry nor the label. The plan made
// on the cache fails its ledger write's precondition; the re-plan reads the API server, starts
// sb-1 and claims nothing more.
func TestCacheLagsOwnClaim(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	objs := []client.Object{spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4")}
	api := fakeStore(objs...)
	if err := api.Create(context.Background(), ledgerWith(ledger.Claim{Node: "sb-1", InstanceID: "i-sb1", For: "spot-1", Holder: "earlier/1"})); err != nil {
		t.Fatal(err)
	}
	claimed := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-1"}, claimed)
	claimed.Labels[v1alpha1.LabelState], claimed.Labels[v1alpha1.LabelResumedFor] = string(v1alpha1.NodeStateActive), "spot-1"
	if err := api.Update(context.Background(), claimed); err != nil {
		t.Fatal(err)
	}
	ctrl, f := newController(laggingCache(api, objs...), api)
	drainOne(t, ctrl, "spot-1")
	if len(f.Resumed) != 1 || f.Resumed["i-sb1"] != 1 {
		t.Fatalf("resumed %v, want only the already-claimed i-sb1", f.Resumed)
	}
	sb2 := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-2"}, sb2)
	if sb2.Labels[v1alpha1.LabelState] != string(v1alpha1.NodeStateStandby) {
		t.Fatalf("sb-2 claimed too: %v", sb2.Labels)
	}
}

// TestCacheMissesFreshPods: the notice comes right after the protected Pods were bound, before
// the cache shows them. The decision does not settle for "none" on the cache's word: the API
// server's list of the Node's Pods has them, and their lifeboat is resumed.
func TestCacheMissesFreshPods(t *testing.T) {
	spot, sb := spotNode("spot-1", "i-spot1"), standbyNode("sb-1", "i-sb1", "4")
	api := fakeStore(spot, protectedPod("a", "spot-1", "3"), sb)
	ctrl, f := newController(laggingCache(api, spot, sb), api)
	if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
		t.Fatal(err)
	}
	if f.Resumed["i-sb1"] != 1 || decisionOf(t, api, "spot-1") != "sb-1" {
		t.Fatalf("resumed %v decision %q, want sb-1 for the Pod only the API server shows", f.Resumed, decisionOf(t, api, "spot-1"))
	}
	// A Node without protected Pods is still decided "none" (after the same check).
	spot2 := spotNode("spot-2", "i-spot2")
	api2 := fakeStore(spot2, sb)
	ctrl2, f2 := newController(laggingCache(api2, spot2, sb), api2)
	if err := deliver(t, ctrl2, spotMessage("i-spot2"))[0]; err != nil {
		t.Fatal(err)
	}
	if len(f2.Resumed) != 0 || decisionOf(t, api2, "spot-2") != "none" {
		t.Fatalf("resumed %v decision %q, want none", f2.Resumed, decisionOf(t, api2, "spot-2"))
	}
}

// TestCacheLagsMarkAndDecision: the cache never shows the mark nor the decision. Repeated
// notices conflict on the mark's precondition (and find it written), and the decision this
// process recorded is checked against the API server: one resume in all.
func TestCacheLagsMarkAndDecision(t *testing.T) {
	objs := []client.Object{spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4")}
	api := fakeStore(objs...)
	ctrl, f := newController(laggingCache(api, objs...), api)
	for range 3 {
		if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
			t.Fatal(err)
		}
		drainConcurrently(t, ctrl)
		// The Node watch would deliver the stale copy too.
		ctrl.RequestDecision("spot-1")
		drainConcurrently(t, ctrl)
	}
	total := 0
	for _, n := range f.Resumed {
		total += n
	}
	if total != 1 || decisionOf(t, api, "spot-1") == "" {
		t.Fatalf("resumed %v decision %q, want one resume and a decision", f.Resumed, decisionOf(t, api, "spot-1"))
	}
}

// TestKarpenterEventPath: Karpenter's SpotInterrupted event on the Node marks it and resumes a
// lifeboat, with the Karpenter source.
func TestKarpenterEventPath(t *testing.T) {
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "spot-1.spot"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "spot-1"},
		Reason:         intake.KarpenterReasonSpotInterrupted, Type: corev1.EventTypeWarning,
	}
	api := fakeStore(spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), ev)
	ctrl, f := newController(api, api)
	if _, err := ctrl.intake.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "spot-1.spot"}}); err != nil {
		t.Fatal(err)
	}
	drainConcurrently(t, ctrl)
	n := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "spot-1"}, n)
	if f.Resumed["i-sb1"] != 1 || n.Annotations[v1alpha1.AnnotationResumeDecision] != "sb-1" || n.Annotations[v1alpha1.AnnotationInterruptionSource] != marks.SourceKarpenterEvent {
		t.Fatalf("resumed %v annotations %v", f.Resumed, n.Annotations)
	}
}

// TestDaemonSetOverheadInDecision: the interrupted node's DaemonSet Pods come along to the
// lifeboat; the plan leaves room for them.
func TestDaemonSetOverheadInDecision(t *testing.T) {
	ds := protectedPod("agent-x", "spot-1", "1500m")
	ds.Namespace, ds.Labels = "kube-system", nil
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", APIVersion: "apps/v1"}}
	ds.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	api := fakeStore(spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), ds, standbyNode("sb-4", "i-sb4", "4"), standbyNode("sb-8", "i-sb8", "8"))
	ctrl, f := newController(api, api)
	if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
		t.Fatal(err)
	}
	drainConcurrently(t, ctrl)
	if f.Resumed["i-sb8"] != 1 || len(f.Resumed) != 1 {
		t.Fatalf("resumed %v, want the 8-CPU node (3 + 1.5 CPU do not fit 4)", f.Resumed)
	}
}

func drainOne(t *testing.T, ctrl *Controller, node string) {
	t.Helper()
	ctrl.RequestDecision(node)
	drainConcurrently(t, ctrl)
}

func TestBatcher(t *testing.T) {
	type got struct {
		mu      sync.Mutex
		batches [][]string
	}
	newBOn := func(clk clock.Clock, idle, max, awaitFor time.Duration) (*batcher, *got) {
		g := &got{}
		b := newBatcher(clk, idle, max, awaitFor, 100, func(batch []*decisionRequest) {
			var names []string
			for _, r := range batch {
				names = append(names, r.node.Name)
			}
			sort.Strings(names)
			g.mu.Lock()
			g.batches = append(g.batches, names)
			g.mu.Unlock()
			// The results after the record: a test reading batches after a result sees it.
			for _, r := range batch {
				r.done <- decisionResult{}
			}
		})
		return b, g
	}
	newB := func(idle, max, awaitFor time.Duration) (*batcher, *got) {
		return newBOn(clock.RealClock{}, idle, max, awaitFor)
	}
	req := func(name string) *decisionRequest {
		return &decisionRequest{ctx: context.Background(), node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, done: make(chan decisionResult, 1)}
	}
	wait := func(rs ...*decisionRequest) {
		for _, r := range rs {
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no result", r.node.Name)
			}
		}
	}

	t.Run("announced Nodes close the batch when the last arrives", func(t *testing.T) {
		// A short maximum: it does not cut a batch whose announced Nodes are still coming.
		b, g := newB(time.Hour, time.Millisecond, time.Hour)
		b.await([]string{"a", "b", "c"})
		ra, rb := req("a"), req("b")
		b.join(ra)
		time.Sleep(20 * time.Millisecond) // b's mark is slow
		b.join(rb)
		b.stopAwaiting("c") // its mark found it marked before
		wait(ra, rb)
		if len(g.batches) != 1 || len(g.batches[0]) != 2 {
			t.Fatalf("batches %v, want [a b]", g.batches)
		}
	})
	t.Run("unannounced Nodes wait for the idle window and share it", func(t *testing.T) {
		b, g := newB(50*time.Millisecond, time.Hour, time.Hour)
		ra, rb := req("a"), req("b")
		b.join(ra)
		b.join(rb)
		wait(ra, rb)
		if len(g.batches) != 1 || len(g.batches[0]) != 2 {
			t.Fatalf("batches %v, want [a b]", g.batches)
		}
	})
	t.Run("an announced Node that never comes holds the batch until its announcement lapses", func(t *testing.T) {
		b, g := newB(time.Hour, time.Hour, 20*time.Millisecond)
		b.await([]string{"a", "never"})
		ra := req("a")
		b.join(ra)
		wait(ra)
		if len(g.batches) != 1 {
			t.Fatalf("batches %v", g.batches)
		}
	})
	t.Run("a single announced notice is decided without a window", func(t *testing.T) {
		b, g := newB(time.Hour, time.Hour, time.Hour)
		b.await([]string{"a"})
		ra := req("a")
		b.join(ra)
		wait(ra)
		if len(g.batches) != 1 {
			t.Fatalf("batches %v", g.batches)
		}
	})
	t.Run("the windows run on the batcher's clock", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
		b, g := newBOn(clk, time.Hour, time.Hour, time.Minute)
		b.await([]string{"a", "never"})
		ra := req("a")
		b.join(ra)
		// The window waits for "never" on the fake clock: nothing is decided until the
		// announcement lapses there.
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-ra.done:
			t.Fatal("decided before the announcement lapsed")
		case <-time.After(20 * time.Millisecond):
		}
		clk.Step(time.Minute)
		wait(ra)
		if len(g.batches) != 1 {
			t.Fatalf("batches %v", g.batches)
		}
	})
}

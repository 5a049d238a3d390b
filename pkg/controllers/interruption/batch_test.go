package interruption

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	cloudinterruption "github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

func fakeStore(objs ...client.Object) client.WithWatch {
	copies := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		copies = append(copies, o.DeepCopyObject().(client.Object))
	}
	return fake.NewClientBuilder().WithObjects(copies...).
		WithIndex(&corev1.Pod{}, IndexPodNodeName, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithIndex(&corev1.Node{}, IndexNodeInstanceID, func(o client.Object) []string { return []string{nodeutil.InstanceID(o.(*corev1.Node))} }).
		Build()
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

func newController(cache client.Client, reader client.Reader) (*Controller, *fakeInstances) {
	f := &fakeInstances{resumed: map[string]int{}, ice: map[string]bool{}, gone: map[string]bool{}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	return New(cache, reader, f, clk, events.NewFakeRecorder(1000), nil), f
}

// drainConcurrently runs the reconciles of every triggered Node at once, as the controller's
// workers do (one per Node at a time), until nothing is left to do.
func drainConcurrently(t *testing.T, ctrl *Controller) {
	t.Helper()
	for round := 0; round < 20; round++ {
		names := map[string]bool{}
	collect:
		for {
			select {
			case ev := <-ctrl.trigger:
				names[ev.Object.GetName()] = true
			default:
				break collect
			}
		}
		if len(names) == 0 {
			return
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			requeue []string
		)
		for name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
				if err != nil {
					t.Errorf("reconcile %s: %v", name, err)
				}
				if res.Requeue {
					mu.Lock()
					requeue = append(requeue, name)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, name := range requeue {
			ctrl.requestDecision(name)
		}
	}
	t.Fatal("reconcile did not settle")
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
// state change) are decided as one batch: one live read of the claimed nodes, one
// StartInstances call with the ten instances, one distinct lifeboat per interrupted node.
func TestBurstIsOneBatch(t *testing.T) {
	const burst = 10
	var objs []client.Object
	var msgs []cloudinterruption.Message
	for i := range burst {
		objs = append(objs, spotNode(fmt.Sprintf("spot-%d", i), fmt.Sprintf("i-spot%d", i)), protectedPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("spot-%d", i), "3"),
			standbyNode(fmt.Sprintf("sb-%d", i), fmt.Sprintf("i-sb%d", i), "4"))
		msgs = append(msgs, spotMessage(fmt.Sprintf("i-spot%d", i)))
	}
	msgs = append(msgs, spotMessage("i-spot3"), cloudinterruption.Message{Kind: cloudinterruption.KindStateChange, State: "shutting-down", InstanceIDs: []string{"i-spot5"}}, spotMessage("i-spot3"))
	api := fakeStore(objs...)
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(api, interceptor.NewClient(api, lists.funcs()))
	// Only the announced Nodes' arrival closes the batch (however slow the fake client is).
	ctrl.batch.max, ctrl.batch.expectFor = time.Hour, time.Hour

	for i, err := range ctrl.HandleBatch(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	drainConcurrently(t, ctrl)

	if len(f.batches) != 1 || len(f.batches[0]) != burst {
		t.Fatalf("StartInstances calls %v, want one with %d instances", f.batches, burst)
	}
	if got := lists.count(v1alpha1.LabelResumedFor + " in "); got != 1 {
		t.Errorf("%d live reads of the claimed nodes, want 1 for the batch", got)
	}
	used := map[string]bool{}
	for i := range burst {
		d := decisionOf(t, api, fmt.Sprintf("spot-%d", i))
		if d == "" || used[d] {
			t.Fatalf("spot-%d decision %q (used %v)", i, d, used)
		}
		used[d] = true
	}
	for id, n := range f.resumed {
		if n != 1 {
			t.Errorf("%s started %d times", id, n)
		}
	}
	// The same notices again: nothing more.
	for _, err := range ctrl.HandleBatch(context.Background(), msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	drainConcurrently(t, ctrl)
	if len(f.batches) != 1 {
		t.Fatalf("StartInstances calls %v after the duplicates, want still one", f.batches)
	}
}

// TestBurstPartialICE: one instance of the batch's StartInstances has no capacity: it is
// terminated and unclaimed, the others start, and its interrupted node gets another standby
// node in a second pass.
func TestBurstPartialICE(t *testing.T) {
	objs := []client.Object{standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"), standbyNode("sb-3", "i-sb3", "4")}
	var msgs []cloudinterruption.Message
	for i := range 3 {
		objs = append(objs, spotNode(fmt.Sprintf("spot-%d", i), fmt.Sprintf("i-spot%d", i)), protectedPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("spot-%d", i), "3"))
		msgs = append(msgs, spotMessage(fmt.Sprintf("i-spot%d", i)))
	}
	api := fakeStore(objs...)
	ctrl, f := newController(api, api)
	ctrl.batch.max, ctrl.batch.expectFor = time.Hour, time.Hour
	// Equal demands are planned in name order and first-fit decreasing opens the largest
	// node first: spot-0 gets sb-big, which has no capacity.
	f.ice["i-sbbig"] = true
	for _, err := range ctrl.HandleBatch(context.Background(), msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	drainConcurrently(t, ctrl)

	if !f.gone["i-sbbig"] || f.resumed["i-sbbig"] != 0 {
		t.Fatalf("gone %v resumed %v: want i-sbbig terminated", f.gone, f.resumed)
	}
	if len(f.batches) != 2 || len(f.batches[0]) != 3 || len(f.batches[1]) != 1 {
		t.Fatalf("StartInstances calls %v, want one for the batch (3) and one for the re-plan (1)", f.batches)
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

// TestStaleCacheCandidateConflictReplansFromAPI: the cache still shows a standby node another
// decision has claimed; the claim's resourceVersion precondition fails and the plan is made
// again from the API server, which resumes a free node.
func TestStaleCacheCandidateConflictReplansFromAPI(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	objs := []client.Object{spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-2", "i-sb2", "4")}
	api := fakeStore(objs...)
	// Another decision claimed sb-big after the cache's snapshot.
	taken := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-big"}, taken)
	taken.Labels[v1alpha1.LabelState], taken.Labels[v1alpha1.LabelResumedFor] = string(v1alpha1.NodeStateActive), "spot-other"
	if err := api.Update(context.Background(), taken); err != nil {
		t.Fatal(err)
	}
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(laggingCache(api, objs...), interceptor.NewClient(api, lists.funcs()))

	drainOne(t, ctrl, "spot-1")

	if len(f.resumed) != 1 || f.resumed["i-sb2"] != 1 {
		t.Fatalf("resumed %v, want only i-sb2", f.resumed)
	}
	if got := lists.count(v1alpha1.LabelState + "="); got != 1 {
		t.Errorf("%d standby lists from the API server, want 1 (the re-plan)", got)
	}
	if d := decisionOf(t, api, "spot-1"); d != "sb-2" {
		t.Fatalf("decision %q, want sb-2", d)
	}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-big"}, taken)
	if taken.Labels[v1alpha1.LabelResumedFor] != "spot-other" {
		t.Fatalf("sb-big taken from its decision: %v", taken.Labels)
	}
}

// TestClaimConflictReplansFromAPI: a writer changes the planned node between the plan and the
// claim (the claim's precondition fails, the cache is current); the re-plan reads the API
// server and claims another node; nothing is resumed twice.
func TestClaimConflictReplansFromAPI(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	store := fakeStore(spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-big", "i-sbbig", "8"), standbyNode("sb-2", "i-sb2", "4"))
	var raced atomic.Bool
	c := interceptor.NewClient(store, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == "sb-big" && !raced.Swap(true) {
			// Another writer (a second controller during a leader handover) claims it first.
			n := &corev1.Node{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), n); err != nil {
				return err
			}
			n.Labels[v1alpha1.LabelState], n.Labels[v1alpha1.LabelResumedFor] = string(v1alpha1.NodeStateActive), "spot-other"
			if err := cl.Update(ctx, n); err != nil {
				return err
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(c, interceptor.NewClient(store, lists.funcs()))

	drainOne(t, ctrl, "spot-1")

	if !raced.Load() || len(f.resumed) != 1 || f.resumed["i-sb2"] != 1 {
		t.Fatalf("raced %v resumed %v, want the conflict and then only i-sb2", raced.Load(), f.resumed)
	}
	if got := lists.count(v1alpha1.LabelState + "="); got != 1 {
		t.Errorf("%d standby lists from the API server, want 1 (the re-plan)", got)
	}
	if d := decisionOf(t, store, "spot-1"); d != "sb-2" {
		t.Fatalf("decision %q, want sb-2", d)
	}
}

// TestPersistentConflictRequeues: a claim that keeps conflicting is planned three times, then
// the Node is requeued, nothing started and no decision recorded.
func TestPersistentConflictRequeues(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	store := fakeStore(spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"))
	var claims atomic.Int32
	c := interceptor.NewClient(store, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == "sb-1" {
			claims.Add(1)
			return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, obj.GetName(), fmt.Errorf("the object has been modified"))
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
	ctrl, f := newController(c, store)
	res, err := ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot-1"}})
	if err != nil || !res.Requeue {
		t.Fatalf("res %+v err %v, want a requeue", res, err)
	}
	if claims.Load() != 3 || len(f.resumed) != 0 || decisionOf(t, store, "spot-1") != "" {
		t.Fatalf("claims %d resumed %v decision %q", claims.Load(), f.resumed, decisionOf(t, store, "spot-1"))
	}
}

// TestCacheLagsOwnClaim: a pass that claimed sb-1 for spot-1 was interrupted (a restart) and
// the cache still shows sb-1 as a free standby node. The claimed nodes are read from the API
// server: the next pass starts sb-1 and claims nothing more.
func TestCacheLagsOwnClaim(t *testing.T) {
	spot := spotNode("spot-1", "i-spot1")
	spot.Annotations = map[string]string{v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z"}
	objs := []client.Object{spot, protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4")}
	api := fakeStore(objs...)
	claimed := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-1"}, claimed)
	claimed.Labels[v1alpha1.LabelState], claimed.Labels[v1alpha1.LabelResumedFor] = string(v1alpha1.NodeStateActive), "spot-1"
	if err := api.Update(context.Background(), claimed); err != nil {
		t.Fatal(err)
	}
	ctrl, f := newController(laggingCache(api, objs...), api)
	drainOne(t, ctrl, "spot-1")
	if len(f.resumed) != 1 || f.resumed["i-sb1"] != 1 {
		t.Fatalf("resumed %v, want only the already-claimed i-sb1", f.resumed)
	}
	sb2 := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "sb-2"}, sb2)
	if sb2.Labels[v1alpha1.LabelState] != string(v1alpha1.NodeStateStandby) {
		t.Fatalf("sb-2 claimed too: %v", sb2.Labels)
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
		if err := ctrl.HandleMessage(context.Background(), spotMessage("i-spot1")); err != nil {
			t.Fatal(err)
		}
		drainConcurrently(t, ctrl)
		// The Node watch would deliver the stale copy too.
		ctrl.requestDecision("spot-1")
		drainConcurrently(t, ctrl)
	}
	total := 0
	for _, n := range f.resumed {
		total += n
	}
	if total != 1 || decisionOf(t, api, "spot-1") == "" {
		t.Fatalf("resumed %v decision %q, want one resume and a decision", f.resumed, decisionOf(t, api, "spot-1"))
	}
}

// TestKarpenterEventPath: Karpenter's SpotInterrupted event on the Node marks it and resumes a
// lifeboat, with the Karpenter source.
func TestKarpenterEventPath(t *testing.T) {
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "spot-1.spot"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "spot-1"},
		Reason:         KarpenterReasonSpotInterrupted, Type: corev1.EventTypeWarning,
	}
	api := fakeStore(spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), ev)
	ctrl, f := newController(api, api)
	if _, err := ctrl.reconcileKarpenterEvent(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "spot-1.spot"}}); err != nil {
		t.Fatal(err)
	}
	drainConcurrently(t, ctrl)
	n := &corev1.Node{}
	_ = api.Get(context.Background(), types.NamespacedName{Name: "spot-1"}, n)
	if f.resumed["i-sb1"] != 1 || n.Annotations[v1alpha1.AnnotationResumeDecision] != "sb-1" || n.Annotations[v1alpha1.AnnotationInterruptionSource] != SourceKarpenterEvent {
		t.Fatalf("resumed %v annotations %v", f.resumed, n.Annotations)
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
	if err := ctrl.HandleMessage(context.Background(), spotMessage("i-spot1")); err != nil {
		t.Fatal(err)
	}
	drainConcurrently(t, ctrl)
	if f.resumed["i-sb8"] != 1 || len(f.resumed) != 1 {
		t.Fatalf("resumed %v, want the 8-CPU node (3 + 1.5 CPU do not fit 4)", f.resumed)
	}
}

func drainOne(t *testing.T, ctrl *Controller, node string) {
	t.Helper()
	ctrl.requestDecision(node)
	drainConcurrently(t, ctrl)
}

func TestBatcher(t *testing.T) {
	type got struct {
		mu      sync.Mutex
		batches [][]string
	}
	newB := func(idle, max, expectFor time.Duration) (*batcher, *got) {
		g := &got{}
		b := newBatcher(idle, max, expectFor, 100, func(batch []*decisionRequest) {
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
		b.expect([]string{"a", "b", "c"})
		ra, rb := req("a"), req("b")
		b.add(ra)
		time.Sleep(20 * time.Millisecond) // b's mark is slow
		b.add(rb)
		b.forget("c") // its mark found it marked before
		wait(ra, rb)
		if len(g.batches) != 1 || len(g.batches[0]) != 2 {
			t.Fatalf("batches %v, want [a b]", g.batches)
		}
	})
	t.Run("unannounced Nodes wait for the idle window and share it", func(t *testing.T) {
		b, g := newB(50*time.Millisecond, time.Hour, time.Hour)
		ra, rb := req("a"), req("b")
		b.add(ra)
		b.add(rb)
		wait(ra, rb)
		if len(g.batches) != 1 || len(g.batches[0]) != 2 {
			t.Fatalf("batches %v, want [a b]", g.batches)
		}
	})
	t.Run("an announced Node that never comes holds the batch until its announcement lapses", func(t *testing.T) {
		b, g := newB(time.Hour, time.Hour, 20*time.Millisecond)
		b.expect([]string{"a", "never"})
		ra := req("a")
		b.add(ra)
		wait(ra)
		if len(g.batches) != 1 {
			t.Fatalf("batches %v", g.batches)
		}
	})
	t.Run("a single announced notice is decided without a window", func(t *testing.T) {
		b, g := newB(time.Hour, time.Hour, time.Hour)
		b.expect([]string{"a"})
		ra := req("a")
		b.add(ra)
		wait(ra)
		if len(g.batches) != 1 {
			t.Fatalf("batches %v", g.batches)
		}
	})
}

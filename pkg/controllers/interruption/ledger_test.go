package interruption

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
)

// orphanedClaim is sb-1's claim for spot-1 in the ledger, as a decision batch of holder left it.
func orphanedClaim(holder string) *corev1.ConfigMap {
	return ledgerWith(ledger.Claim{
		Node: "sb-1", InstanceID: "i-sb1", For: "spot-1", InterruptedAt: "2026-11-29T20:59:59.5Z",
		Source: "sqs/spot-interruption", ClaimedAt: "2026-11-29T20:59:59.6Z", Holder: holder,
	})
}

func reconcilePool(t *testing.T, ctrl *Controller) {
	t.Helper()
	if _, err := ctrl.reconcileLedger(context.Background(), reconcile.Request{NamespacedName: ledger.Key(ctrl.ledger.Namespace())}); err != nil {
		t.Fatal(err)
	}
}

func nodeNamed(t *testing.T, c client.Reader, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLedgerReplay: the entries a crashed decision left in the ledger are finished by the next
// leader — the claimed node labelled, the interrupted Node marked and decided with that node,
// its instance started exactly once (not again if it was started before the crash) — and an
// in-flight batch's entries are left alone.
func TestLedgerReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		// startedBeforeCrash: StartInstances had returned when the process died.
		startedBeforeCrash bool
		// redeliver: the queue delivers the notice again before the ledger is looked at.
		redeliver bool
		// inFlight: the entry's batch is running in this process.
		inFlight    bool
		wantResumed int
	}{
		{name: "crash before StartInstances", wantResumed: 1},
		{name: "crash after StartInstances", startedBeforeCrash: true, wantResumed: 0},
		{name: "notice delivered again first, crash before StartInstances", redeliver: true, wantResumed: 1},
		{name: "notice delivered again first, crash after StartInstances", redeliver: true, startedBeforeCrash: true, wantResumed: 0},
		{name: "entry of a batch in flight", inFlight: true, wantResumed: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := fakeStore(orphanedClaim("dead/7"), spotNode("spot-1", "i-spot1"), protectedPod("a", "spot-1", "3"), standbyNode("sb-1", "i-sb1", "4"), standbyNode("sb-2", "i-sb2", "4"))
			ctrl, f := newController(store, store)
			f.Running = map[string]bool{"i-sb1": tc.startedBeforeCrash}
			if tc.inFlight {
				ctrl.holders.run("dead/7")
			}
			if tc.redeliver {
				if err := deliver(t, ctrl, spotMessage("i-spot1"))[0]; err != nil {
					t.Fatal(err)
				}
			}
			reconcilePool(t, ctrl)
			drainConcurrently(t, ctrl)

			if got := f.TotalResumed(); got != tc.wantResumed {
				t.Fatalf("StartInstances for %v, want %d", f.Resumed, tc.wantResumed)
			}
			sb1, spot := nodeNamed(t, store, "sb-1"), nodeNamed(t, store, "spot-1")
			if tc.inFlight {
				if nodeStateOf(sb1) != v1alpha1.NodeStateStandby || spot.Annotations[v1alpha1.AnnotationInterruptedAt] != "" {
					t.Fatalf("an in-flight entry was acted on: sb-1 %v, spot-1 %v", sb1.Labels, spot.Annotations)
				}
				cm := &corev1.ConfigMap{}
				_ = store.Get(context.Background(), ledger.Key(v1alpha1.DefaultNamespace), cm)
				if len(cm.Data) != 1 {
					t.Fatalf("ledger %v, want the in-flight entry kept", cm.Data)
				}
				return
			}
			if nodeStateOf(sb1) != v1alpha1.NodeStateActive || sb1.Labels[v1alpha1.LabelResumedFor] != "spot-1" || sb1.Annotations[v1alpha1.AnnotationStartRequestedAt] == "" {
				t.Fatalf("sb-1 labels %v annotations %v, want claimed for spot-1 and started", sb1.Labels, sb1.Annotations)
			}
			if d := spot.Annotations[v1alpha1.AnnotationResumeDecision]; d != "sb-1" {
				t.Fatalf("spot-1 decision %q, want sb-1 (the ledger's claim, nothing more)", d)
			}
			if got := spot.Annotations[v1alpha1.AnnotationInterruptedAt]; tc.redeliver == false && got != "2026-11-29T20:59:59.5Z" {
				t.Errorf("spot-1 interrupted-at %q, want the notice's receipt from the ledger", got)
			}
			if nodeStateOf(nodeNamed(t, store, "sb-2")) != v1alpha1.NodeStateStandby {
				t.Fatal("sb-2 claimed too")
			}
			reconcilePool(t, ctrl)
			assertLedgerEmpty(t, store)
		})
	}
}

func nodeStateOf(n *corev1.Node) v1alpha1.NodeState {
	return v1alpha1.NodeState(n.Labels[v1alpha1.LabelState])
}

// TestSplitBurstNoConflict: a burst split over two receives is decided in two batches, the
// second planned on a cache that shows neither the first batch's ledger entry nor its labels.
// The second plan sees the first batch's claim through this process's own last ledger write,
// picks another node and adds its claim to that write: no conflict, no read of the API server,
// two distinct lifeboats.
func TestSplitBurstNoConflict(t *testing.T) {
	var objs []client.Object
	for _, n := range []string{"1", "2"} {
		objs = append(objs, spotNode("spot-"+n, "i-spot"+n), protectedPod("p-"+n, "spot-"+n, "3"), standbyNode("sb-"+n, "i-sb"+n, "4"))
	}
	api := fakeStore(objs...)
	lists := &listCounter{lists: map[string]int{}}
	ctrl, f := newController(laggingCache(api, objs...), interceptor.NewClient(api, lists.funcs()))
	for _, id := range []string{"i-spot1", "i-spot2"} {
		if err := deliver(t, ctrl, spotMessage(id))[0]; err != nil {
			t.Fatal(err)
		}
	}
	d1, d2 := decisionOf(t, api, "spot-1"), decisionOf(t, api, "spot-2")
	if d1 == "" || d2 == "" || d1 == d2 || f.TotalResumed() != 2 {
		t.Fatalf("decisions %q and %q, resumed %v: want two distinct lifeboats", d1, d2, f.Resumed)
	}
	if got := lists.count(v1alpha1.LabelPool); got != 0 {
		t.Errorf("%d pool-node lists from the API server, want none (no conflict)", got)
	}
	cm := &corev1.ConfigMap{}
	if err := api.Get(context.Background(), ledger.Key(v1alpha1.DefaultNamespace), cm); err != nil || len(cm.Data) != 2 {
		t.Fatalf("ledger %v (%v), want both claims", cm.Data, err)
	}
}

// TestGatheredReceivesAreOneBatch: a burst that the queue returned in two receives, the second
// taken by the consumer's follow-up poll (Gather). The first part's decision waits in its batch,
// held open, until the second part is announced: one ledger write, one StartInstances call
// with both instances.
func TestGatheredReceivesAreOneBatch(t *testing.T) {
	var objs []client.Object
	for _, n := range []string{"1", "2"} {
		objs = append(objs, spotNode("spot-"+n, "i-spot"+n), protectedPod("p-"+n, "spot-"+n, "3"), standbyNode("sb-"+n, "i-sb"+n, "4"))
	}
	api := fakeStore(objs...)
	ctrl, f := newController(api, api)
	ctx := context.Background()

	// The controller's workers: each triggered Node's reconcile runs at once.
	stop := make(chan struct{})
	var workers sync.WaitGroup
	go func() {
		for {
			select {
			case ev := <-ctrl.trigger:
				workers.Add(1)
				go func() {
					defer workers.Done()
					_, _ = ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: ev.Object.GetName()}})
				}()
			case <-stop:
				return
			}
		}
	}()

	var once sync.Once
	release := ctrl.HoldBatchOpen()
	results := make(chan []error, 2)
	go func() { results <- ctrl.intake.HandleBatch(ctx, []interruptionqueue.Message{spotMessage("i-spot1")}) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctrl.batch.mu.Lock()
		waiting := len(ctrl.batch.pending)
		ctrl.batch.mu.Unlock()
		started := f.BatchCount()
		if waiting == 1 || started > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first part's decision never joined a batch")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	early := f.BatchCount()
	if early != 0 {
		t.Fatalf("StartInstances called %d times before the rest of the burst was announced, want 0 (batch held open)", early)
	}
	go func() {
		results <- ctrl.intake.HandleBatch(interruptionqueue.WithBatchTakenIn(ctx, func() { once.Do(release) }), []interruptionqueue.Message{spotMessage("i-spot2")})
	}()
	for range 2 {
		for _, err := range <-results {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	workers.Wait()
	if len(f.Batches) != 1 || len(f.Batches[0]) != 2 {
		t.Fatalf("StartInstances calls %v, want one with both instances", f.Batches)
	}
	if d1, d2 := decisionOf(t, api, "spot-1"), decisionOf(t, api, "spot-2"); d1 == "" || d2 == "" || d1 == d2 {
		t.Fatalf("decisions %q and %q, want two distinct lifeboats", d1, d2)
	}
}

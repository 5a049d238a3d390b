package elect

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCampaignSurvivesALostLease: a replica whose renewals fail stops its task, keeps running
// and takes the lease back once it is free again.
func TestCampaignSurvivesALostLease(t *testing.T) {
	cs := fake.NewClientset()
	var failA atomic.Bool
	cs.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if failA.Load() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a" {
			return true, nil, errors.New("the apiserver is too slow")
		}
		return false, nil, nil
	})
	type event struct {
		who     string
		running bool
	}
	events := make(chan event, 100)
	campaign := func(id string) *Campaign {
		return &Campaign{Leases: cs.CoordinationV1(), Namespace: "lifeboat-system", Name: "audit", Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
			Task: func(ctx context.Context) error {
				events <- event{id, true}
				<-ctx.Done()
				events <- event{id, false}
				return nil
			}}
	}
	next := func(want event) {
		t.Helper()
		select {
		case e := <-events:
			if e != want {
				t.Fatalf("event %+v, want %+v", e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event, want %+v", want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startA := make(chan error, 1)
	go func() { startA <- campaign("a").Start(ctx) }()
	next(event{"a", true})

	ctxB, cancelB := context.WithCancel(ctx)
	startB := make(chan error, 1)
	go func() { startB <- campaign("b").Start(ctxB) }()

	failA.Store(true)
	// a releases the lease a moment before its task's context ends (see Task): b may start first.
	got := map[event]bool{}
	for range 2 {
		select {
		case e := <-events:
			got[e] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v, want a's task stopped and b's started", got)
		}
	}
	if !got[event{"a", false}] || !got[event{"b", true}] {
		t.Fatalf("events %v, want a's task stopped and b's started", got)
	}
	select {
	case err := <-startA:
		t.Fatalf("a's campaign ended after losing the lease: %v", err)
	default:
	}

	failA.Store(false)
	cancelB() // b stops and releases the lease: a takes it back
	next(event{"b", false})
	if err := <-startB; err != nil {
		t.Fatalf("b: %v", err)
	}
	next(event{"a", true})

	cancel()
	next(event{"a", false})
	if err := <-startA; err != nil {
		t.Fatalf("a: %v", err)
	}
}

func TestCampaignNeedsNoManagerElection(t *testing.T) {
	if (&Campaign{}).NeedLeaderElection() {
		t.Error("a Campaign must run on every replica: it is the election")
	}
}

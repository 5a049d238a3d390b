package pooltelemetry

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

func TestWindow(t *testing.T) {
	now := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	events := []Event{
		{Node: "a", Pool: "m5.large/us-east-1a/spot", Time: now.Add(-2 * time.Hour)},
		{Node: "b", Pool: "m5.large/us-east-1a/spot", Time: now.Add(-30 * time.Minute)},
		{Node: "c", Pool: "m5.large/us-east-1a/spot", Time: now.Add(-10 * time.Minute)},
		{Node: "d", Pool: "c5.large/us-east-1b/spot", Time: now.Add(-time.Minute)},
	}
	doc, kept := Window(events, time.Hour, now)
	if len(kept) != 3 {
		t.Fatalf("kept %d events, want 3 (one aged out)", len(kept))
	}
	if got := doc.Pools["m5.large/us-east-1a/spot"]; got.Interruptions != 2 || !got.LastInterruption.Equal(now.Add(-10*time.Minute)) {
		t.Errorf("m5 pool = %+v", got)
	}
	if got := doc.Pools["c5.large/us-east-1b/spot"].Interruptions; got != 1 {
		t.Errorf("c5 pool = %d", got)
	}
	if doc.WindowSeconds != 3600 {
		t.Errorf("window = %d", doc.WindowSeconds)
	}
}

func TestRecordIsIdempotentAndAgesOut(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	c := fake.NewClientBuilder().Build()
	s := &Store{Client: c, Clock: clk, Window: time.Hour}
	for i := 0; i < 5; i++ {
		added, err := s.Record(ctx, "node-1", "m5.large/us-east-1a/spot", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if added != (i == 0) {
			t.Fatalf("delivery %d: added = %v", i, added)
		}
	}
	read := func() *telemetry.Telemetry {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: telemetry.Namespace, Name: telemetry.Name}, cm); err != nil {
			t.Fatal(err)
		}
		doc, err := telemetry.Parse(cm.Data)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if n := read().Pools["m5.large/us-east-1a/spot"].Interruptions; n != 1 {
		t.Fatalf("interruptions = %d, want 1", n)
	}
	clk.Step(2 * time.Hour)
	ctrl := &Controller{Store: s, Period: time.Minute}
	res, err := ctrl.Reconcile(ctx, reconcile.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != time.Minute {
		t.Errorf("requeue = %v", res.RequeueAfter)
	}
	if n := len(read().Pools); n != 0 {
		t.Errorf("pools after the window = %d, want 0", n)
	}
}

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// TestCrashAfterLedgerWrite: the controller died right after its burst's one durable write —
// the resume ledger entry — either before StartInstances or after it, before any Node was
// labelled or marked; its notice was not deleted. The state such a crash leaves is put in place
// (the ledger entry as the controller writes it, the instance started or not, the notice back in
// the queue) and a new controller started: it finishes the claim — the lifeboat active and Ready
// for the interrupted node, the decision naming it — with exactly one StartInstances in all,
// nothing else resumed, the ledger emptied, nothing orphaned and the pool refilled.
func TestCrashAfterLedgerWrite(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	if err := e.client.Create(ctx, e.warmPool(2, "1h")); err != nil {
		t.Fatal(err)
	}
	m := e.startManager()
	e.waitFor("2 hibernated standby", 120*time.Second, e.standbyConverged(2))
	m.stop()

	for i, startedBeforeCrash := range []bool{false, true} {
		name, id := fmt.Sprintf("spot-l%d", i), fmt.Sprintf("i-00000000000000e%02d", i)
		t.Logf("crash %s StartInstances", map[bool]string{false: "before", true: "after"}[startedBeforeCrash])
		e.spotWithProtectedPod(ctx, name, id, "3")
		boat := e.poolNodes(ctx, poolName)[v1alpha1.NodeStateStandby][0]
		boatID := nodeutil.InstanceID(&boat)
		now := nodeutil.FormatTime(time.Now())
		entry := ledger.Claim{Node: boat.Name, InstanceID: boatID, For: name, InterruptedAt: now, Source: "sqs/spot-interruption", ClaimedAt: now, Holder: "crashed/1"}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: ledger.Name}}
		err := e.client.Get(ctx, types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}, cm)
		switch {
		case apierrors.IsNotFound(err):
			cm.Data = map[string]string{boat.Name: ledger.Encode(entry)}
			err = e.client.Create(ctx, cm)
		case err == nil:
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[boat.Name] = ledger.Encode(entry)
			err = e.client.Update(ctx, cm)
		}
		if err != nil {
			t.Fatal(err)
		}
		if startedBeforeCrash {
			if err := e.inst.Resume(ctx, boatID); err != nil {
				t.Fatal(err)
			}
		}
		starts := e.emu.Calls("StartInstances", "")
		if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice(id, 900+i)); err != nil {
			t.Fatal(err)
		}

		m = e.startManager()
		e.waitFor("the ledger's lifeboat active and Ready for "+name, 60*time.Second, e.activeReadyFor(name, 1))
		want := 1
		if startedBeforeCrash {
			want = 0
		}
		if got := e.emu.Calls("StartInstances", "") - starts; got != want {
			t.Fatalf("%d StartInstances after the restart, want %d", got, want)
		}
		if got := e.lifeboatsFor(ctx, name)[0].Name; got != boat.Name {
			t.Fatalf("lifeboat %s, want the ledger's %s", got, boat.Name)
		}
		e.waitFor("the decision recorded and the ledger emptied", 30*time.Second, func(ctx context.Context) (bool, string) {
			spot, cm := &corev1.Node{}, &corev1.ConfigMap{}
			if err := e.client.Get(ctx, types.NamespacedName{Name: name}, spot); err != nil {
				return false, err.Error()
			}
			if err := e.client.Get(ctx, types.NamespacedName{Namespace: v1alpha1.DefaultNamespace, Name: ledger.Name}, cm); err != nil {
				return false, err.Error()
			}
			d := spot.Annotations[v1alpha1.AnnotationResumeDecision]
			return d == boat.Name && len(cm.Data) == 0, fmt.Sprintf("decision %q, ledger %v", d, cm.Data)
		})
		e.waitFor("the pool refilled, nothing orphaned", 120*time.Second, func(ctx context.Context) (bool, string) {
			ok, desc := e.standbyConverged(2)(ctx)
			clean, orphans := e.noOrphans(ctx)
			return ok && clean, desc + "; " + orphans
		})
		if got := e.emu.Calls("StartInstances", "") - starts; got != want {
			t.Fatalf("%d StartInstances by the end, want %d", got, want)
		}
		m.stop()
	}
}

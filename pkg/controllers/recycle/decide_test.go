package recycle

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
)

var now = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

func testPool(afterUse v1alpha1.AfterUsePolicy, opts ...func(*v1alpha1.WarmPool)) *v1alpha1.WarmPool {
	p := &v1alpha1.WarmPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec:       v1alpha1.WarmPoolSpec{AfterUse: afterUse, MaxStandbyAge: &metav1.Duration{Duration: 720 * time.Hour}},
		Status:     v1alpha1.WarmPoolStatus{Slots: []v1alpha1.SlotStatus{{Slot: 0, Generation: 3, InstanceID: "i-1"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func running(opts ...func(*cloud.Instance)) *cloud.Instance {
	in := &cloud.Instance{ID: "i-1", Pool: "pool", Slot: 0, Generation: 3, State: cloud.StateRunning, HibernationConfigured: true, LaunchTime: now.Add(-2 * time.Hour)}
	for _, o := range opts {
		o(in)
	}
	return in
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		obs       Observed
		want      Action
		reasonHas string
	}{
		{"afterUse Terminate", Observed{Pool: testPool(v1alpha1.AfterUseTerminate), Instance: running(), Now: now}, Terminate, "afterUse Terminate"},
		{"afterUse unset (defaulted by the API to Terminate)", Observed{Pool: testPool(""), Instance: running(), Now: now}, Terminate, "afterUse Terminate"},
		{"pool gone", Observed{Instance: running(), Now: now}, Terminate, "WarmPool is gone"},
		{"pool being deleted", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate, func(p *v1alpha1.WarmPool) {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}), Instance: running(), Now: now}, Terminate, "being deleted"},
		{"Rehibernate: running, slot held, young", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate), Instance: running(), Now: now}, Rehibernate, "afterUse Rehibernate"},
		{"Rehibernate: instance unknown to EC2", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate), Now: now}, Terminate, "does not know"},
		{"Rehibernate: instance shutting down (ICE on resume terminated it)", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate), Instance: running(func(i *cloud.Instance) { i.State = cloud.StateShuttingDown }), Now: now}, Terminate, "shutting-down"},
		{"Rehibernate: instance stopped behind Lifeboat's back", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate), Instance: running(func(i *cloud.Instance) { i.State = cloud.StateStopped }), Now: now}, Terminate, "stopped, not running"},
		{"Rehibernate: no hibernation configured", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate), Instance: running(func(i *cloud.Instance) { i.HibernationConfigured = false }), Now: now}, Terminate, "no hibernation"},
		{"Rehibernate: slot refilled (claimed while the pool said Terminate)", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate, func(p *v1alpha1.WarmPool) {
			p.Status.Slots[0].Generation = 4
		}), Instance: running(), Now: now}, Terminate, "no longer the instance's"},
		{"Rehibernate: pool shrank below the slot", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate, func(p *v1alpha1.WarmPool) {
			p.Status.Slots = nil
		}), Instance: running(), Now: now}, Terminate, "no longer the instance's"},
		{"Rehibernate: older than maxStandbyAge", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate, func(p *v1alpha1.WarmPool) {
			p.Spec.MaxStandbyAge = &metav1.Duration{Duration: time.Hour}
		}), Instance: running(), Now: now}, Terminate, "older"},
		{"Rehibernate: maxStandbyAge unset defaults to 720h", Observed{Pool: testPool(v1alpha1.AfterUseRehibernate, func(p *v1alpha1.WarmPool) {
			p.Spec.MaxStandbyAge = nil
		}), Instance: running(func(i *cloud.Instance) { i.LaunchTime = now.Add(-721 * time.Hour) }), Now: now}, Terminate, "older"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Decide(tt.obs)
			if got != tt.want || !strings.Contains(reason, tt.reasonHas) {
				t.Errorf("Decide = %s (%q), want %s (reason containing %q)", got, reason, tt.want, tt.reasonHas)
			}
		})
	}
}

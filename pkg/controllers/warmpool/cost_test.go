package warmpool

import (
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
)

func TestPoolPrices(t *testing.T) {
	base := cost.Prices{OnDemandHourly: 0.192, SpotFraction: 0.35, EBSGiBMonth: 0.08}
	tests := []struct {
		name    string
		pricing *v1alpha1.Pricing
		want    cost.Prices
	}{
		{name: "no spec.pricing: the controller's", want: base},
		{name: "empty spec.pricing: the controller's", pricing: &v1alpha1.Pricing{}, want: base},
		{name: "the pool's own instance price", pricing: &v1alpha1.Pricing{OnDemandHourly: "0.384"}, want: cost.Prices{OnDemandHourly: 0.384, SpotFraction: 0.35, EBSGiBMonth: 0.08}},
		{name: "every price", pricing: &v1alpha1.Pricing{OnDemandHourly: "1", SpotFraction: "0.5", EBSGiBMonth: "0.1"}, want: cost.Prices{OnDemandHourly: 1, SpotFraction: 0.5, EBSGiBMonth: 0.1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := poolPrices(tt.pricing, base); got != tt.want {
				t.Errorf("poolPrices = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestEstimateAndCostStatus(t *testing.T) {
	pool := &v1alpha1.WarmPool{Spec: v1alpha1.WarmPoolSpec{RootVolumeGiB: 40, Pricing: &v1alpha1.Pricing{OnDemandHourly: "0.192"}}}
	instances := []cloud.Instance{{State: cloud.StateStopped}, {State: cloud.StateStopped}, {State: cloud.StateRunning}, {State: cloud.StatePending}, {State: cloud.StateStopping}}
	base := cost.Prices{SpotFraction: 0.35, EBSGiBMonth: 0.08}
	got := costStatus(estimate(pool, 4, instances, base))
	// cover 4 × 40 GiB × 0.08 = 12.80; overprovisioning 4 × (0.192 × 0.35 × 730 + 3.20) = 209.02;
	// now 5 volumes × 3.20 / 730 + 2 running × 0.192 = 0.406.
	want := v1alpha1.CostStatus{Monthly: "12.80", OverprovisioningMonthly: "209.02", Hourly: "0.406"}
	if *got != want {
		t.Errorf("cost %+v, want %+v", *got, want)
	}

	pool.Spec.Pricing, pool.Spec.RootVolumeGiB = nil, 0 // no compute price; the launch template's volume
	got = costStatus(estimate(pool, 2, instances[:2], base))
	want = v1alpha1.CostStatus{Monthly: "4.80", Hourly: "0.007"} // 2 × 30 × 0.08; 4.80 / 730
	if *got != want {
		t.Errorf("cost without an On-Demand price %+v, want %+v (no overprovisioning figure)", *got, want)
	}
}

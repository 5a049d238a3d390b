package cost

import (
	"math"
	"testing"
)

func TestOf(t *testing.T) {
	prices := Prices{OnDemandHourly: 0.192, SpotFraction: 0.35, EBSGiBMonth: 0.08} // m5.xlarge, gp3
	tests := []struct {
		name   string
		pool   Pool
		prices Prices
		want   Estimate
	}{
		{
			name:   "four hibernated 40 GiB nodes",
			pool:   Pool{Cover: 4, Instances: 4, RootVolumeGiB: 40},
			prices: prices,
			// 4 × 40 × 0.08 = 12.80; 4 × (0.192 × 0.35 × 730 + 3.20) = 209.024; 160 × 0.08 / 730
			want: Estimate{WarmPoolMonthly: 12.80, OverprovisioningMonthly: 209.024, Hourly: 12.80 / 730, ComputeKnown: true},
		},
		{
			name:   "two of them resumed after an interruption, one replacement warming",
			pool:   Pool{Cover: 4, Instances: 5, Running: 3, RootVolumeGiB: 40},
			prices: prices,
			want:   Estimate{WarmPoolMonthly: 12.80, OverprovisioningMonthly: 209.024, Hourly: 5*3.2/730 + 3*0.192, ComputeKnown: true},
		},
		{
			name:   "no On-Demand price: compute is unknown, not zero-cost",
			pool:   Pool{Cover: 4, Instances: 4, Running: 2, RootVolumeGiB: 40},
			prices: Prices{SpotFraction: 0.35, EBSGiBMonth: 0.08},
			want:   Estimate{WarmPoolMonthly: 12.80, Hourly: 12.80 / 730},
		},
		{
			name:   "empty pool",
			prices: prices,
			want:   Estimate{ComputeKnown: true},
		},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Of(tt.pool, tt.prices)
			if !near(got.WarmPoolMonthly, tt.want.WarmPoolMonthly) || !near(got.OverprovisioningMonthly, tt.want.OverprovisioningMonthly) ||
				!near(got.Hourly, tt.want.Hourly) || got.ComputeKnown != tt.want.ComputeKnown {
				t.Errorf("Of = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	if r := Of(Pool{Cover: 4, RootVolumeGiB: 40}, Prices{OnDemandHourly: 0.192, SpotFraction: 0.35, EBSGiBMonth: 0.08}).Ratio(); !(r > 0.061 && r < 0.062) {
		t.Errorf("Ratio = %v, want 12.80 / 209.024 ≈ 0.0612", r)
	}
	if r := Of(Pool{Cover: 4, RootVolumeGiB: 40}, Prices{EBSGiBMonth: 0.08}).Ratio(); r != 0 {
		t.Errorf("Ratio without a compute price = %v, want 0 (unknown)", r)
	}
}

package warmpool

import (
	"strconv"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cost"
)

// defaultRootVolumeGiB prices a pool whose volume size comes from its launch template.
const defaultRootVolumeGiB = 30

// poolPrices are the controller's prices with the pool's spec.pricing on top (the CRD's
// patterns guarantee that the strings parse).
func poolPrices(p *v1alpha1.Pricing, base cost.Prices) cost.Prices {
	if p == nil {
		return base
	}
	set := func(dst *float64, s string) {
		if v, err := strconv.ParseFloat(s, 64); s != "" && err == nil {
			*dst = v
		}
	}
	set(&base.OnDemandHourly, p.OnDemandHourly)
	set(&base.SpotFraction, p.SpotFraction)
	set(&base.EBSGiBMonth, p.EBSGiBMonth)
	return base
}

// estimate prices the pool: its desired standby nodes as the cover, its instances as billed.
func estimate(pool *v1alpha1.WarmPool, desired int, instances []cloud.Instance, base cost.Prices) cost.Estimate {
	gib := float64(pool.Spec.RootVolumeGiB)
	if gib == 0 {
		gib = defaultRootVolumeGiB
	}
	p := cost.Pool{Cover: desired, Instances: len(instances), RootVolumeGiB: gib}
	for _, in := range instances {
		if in.State == cloud.StateRunning || in.State == cloud.StatePending {
			p.Running++
		}
	}
	return cost.Of(p, poolPrices(pool.Spec.Pricing, base))
}

// costStatus is status.cost: cents for the monthly figures, a tenth of a cent for the hourly.
func costStatus(e cost.Estimate) *v1alpha1.CostStatus {
	st := &v1alpha1.CostStatus{
		Monthly: strconv.FormatFloat(e.WarmPoolMonthly, 'f', 2, 64),
		Hourly:  strconv.FormatFloat(e.Hourly, 'f', 3, 64),
	}
	if e.ComputeKnown {
		st.OverprovisioningMonthly = strconv.FormatFloat(e.OverprovisioningMonthly, 'f', 2, 64)
	}
	return st
}

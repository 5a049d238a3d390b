// Package cost prices the two ways to keep spare capacity for the Pods of interrupted Spot
// nodes: a warm pool of hibernated nodes, and overprovisioning (low-priority balloon Pods that
// keep the same number of nodes running). It is pure arithmetic: the warm pool controller
// publishes it (WarmPool status, lifeboat_pool_monthly_cost_dollars), `lifeboat status` prints
// it, and the simulation projects its runs with it.
package cost

// HoursPerMonth is AWS's billing month.
const HoursPerMonth = 730

// Defaults of the prices that have one (us-east-1 list prices).
const (
	// DefaultEBSGiBMonth is gp3's price per GiB-month.
	DefaultEBSGiBMonth = 0.08
	// DefaultSpotFraction is a typical Spot price as a fraction of On-Demand.
	DefaultSpotFraction = 0.35
)

// Prices are the inputs in dollars. OnDemandHourly is the price of the pool's instance type;
// zero means unknown, and then every compute figure is unknown (Estimate.ComputeKnown).
type Prices struct {
	OnDemandHourly float64
	SpotFraction   float64
	EBSGiBMonth    float64
}

// Pool is what is billed.
type Pool struct {
	// Cover is the number of standby nodes the pool keeps (its resolved size): the capacity
	// both protections hold ready.
	Cover int
	// Instances are all the pool's instances now (each pays its root volume), Running those
	// not hibernated (each pays compute at the On-Demand price: pool instances are On-Demand).
	Instances, Running int
	RootVolumeGiB      float64
}

// Estimate is the result, in dollars.
type Estimate struct {
	// WarmPoolMonthly is the cover hibernated for a month: its root volumes. Time spent active
	// after an interruption is billed on top, while it lasts (Hourly).
	WarmPoolMonthly float64
	// OverprovisioningMonthly is the same cover as running nodes for a month: compute at the
	// Spot price (balloons sit on the cheapest capacity the protected Pods may use) and their
	// root volumes.
	OverprovisioningMonthly float64
	// Hourly is what the pool costs now: HourlyVolumes (every instance's root volume) plus
	// HourlyCompute (the running ones at the On-Demand price).
	Hourly, HourlyVolumes, HourlyCompute float64
	// ComputeKnown is false without an On-Demand price: OverprovisioningMonthly and the compute
	// part of Hourly are then left out (zero), not guessed.
	ComputeKnown bool
}

// Of prices a pool.
func Of(p Pool, pr Prices) Estimate {
	volumeMonth := p.RootVolumeGiB * pr.EBSGiBMonth
	e := Estimate{
		WarmPoolMonthly: float64(p.Cover) * volumeMonth,
		HourlyVolumes:   float64(p.Instances) * volumeMonth / HoursPerMonth,
		ComputeKnown:    pr.OnDemandHourly > 0,
	}
	if e.ComputeKnown {
		e.OverprovisioningMonthly = float64(p.Cover) * (pr.OnDemandHourly*pr.SpotFraction*HoursPerMonth + volumeMonth)
		e.HourlyCompute = float64(p.Running) * pr.OnDemandHourly
	}
	e.Hourly = e.HourlyVolumes + e.HourlyCompute
	return e
}

// Ratio is the warm pool's monthly cost as a fraction of overprovisioning's (0 when unknown).
func (e Estimate) Ratio() float64 {
	if !e.ComputeKnown || e.OverprovisioningMonthly == 0 {
		return 0
	}
	return e.WarmPoolMonthly / e.OverprovisioningMonthly
}

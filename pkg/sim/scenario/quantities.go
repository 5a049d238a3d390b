package scenario

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func isQuantity(s string) bool {
	if s == "" {
		return false
	}
	q, err := resource.ParseQuantity(s)
	return err == nil && q.Sign() > 0
}

func isNonNegInt(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// MaxUnavailable is a PDB's maxUnavailable: a count or a percentage.
type MaxUnavailable struct {
	Count     int
	Percent   int // used when IsPercent
	IsPercent bool
}

// ParseMaxUnavailable parses "1", "20%", or "0" / "0%" (a PDB that allows no disruption).
func ParseMaxUnavailable(s string) (MaxUnavailable, error) {
	count, pct, isPct, err := parseIntOrPercent(s)
	return MaxUnavailable{Count: count, Percent: pct, IsPercent: isPct}, err
}

// Floor is the number of replicas the PDB keeps available: replicas − maxUnavailable, where a
// percentage of replicas is rounded up (more replicas may be unavailable) as the disruption
// controller does (intstr.GetScaledValueFromIntOrPercent with roundUp).
func (m MaxUnavailable) Floor(replicas int32) int32 {
	unavailable := int32(m.Count)
	if m.IsPercent {
		unavailable = ceilPercent(m.Percent, replicas)
	}
	if f := replicas - unavailable; f > 0 {
		return f
	}
	return 0
}

// MinAvailable is a PDB's minAvailable: a count or a percentage.
type MinAvailable struct {
	Count     int
	Percent   int // used when IsPercent
	IsPercent bool
}

// ParseMinAvailable parses "2", "80%"; "100%" (or a count equal to the replicas) allows no
// disruption, "0" allows every disruption.
func ParseMinAvailable(s string) (MinAvailable, error) {
	count, pct, isPct, err := parseIntOrPercent(s)
	return MinAvailable{Count: count, Percent: pct, IsPercent: isPct}, err
}

// Floor is the number of replicas the PDB keeps available: minAvailable, where a percentage of
// replicas is rounded up (more replicas must stay available) as the disruption controller
// does; never more than the replicas.
func (m MinAvailable) Floor(replicas int32) int32 {
	f := int32(m.Count)
	if m.IsPercent {
		f = ceilPercent(m.Percent, replicas)
	}
	return max(0, min(f, replicas))
}

// parseIntOrPercent parses a PDB value: a count ≥ 0 or a percentage in 0%..100%.
func parseIntOrPercent(s string) (count, percent int, isPercent bool, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return 0, 0, false, fmt.Errorf("want a percentage in 0%%..100%%, got %q", s)
		}
		return 0, n, true, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, 0, false, fmt.Errorf("want a count ≥ 0 or a percentage such as \"20%%\", got %q", s)
	}
	return n, 0, false, nil
}

// ceilPercent is ⌈percent × replicas / 100⌉, in integers (no float rounding error).
func ceilPercent(percent int, replicas int32) int32 {
	return int32((int64(percent)*int64(replicas) + 99) / 100)
}

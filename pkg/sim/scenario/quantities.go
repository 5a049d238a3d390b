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

// IntOrPercent is a PDB value: a count, or a percentage of the replicas.
type IntOrPercent struct {
	Count     int
	Percent   int // used when IsPercent
	IsPercent bool
}

// scaled is the value for replicas, a percentage rounded up as the disruption controller
// rounds both fields (intstr.GetScaledValueFromIntOrPercent with roundUp).
func (v IntOrPercent) scaled(replicas int32) int32 {
	if v.IsPercent {
		return ceilPercent(v.Percent, replicas)
	}
	return int32(v.Count)
}

func parsePDBValue(s string) (IntOrPercent, error) {
	count, pct, isPct, err := parseIntOrPercent(s)
	return IntOrPercent{Count: count, Percent: pct, IsPercent: isPct}, err
}

// MaxUnavailable is a PDB's maxUnavailable.
type MaxUnavailable struct{ IntOrPercent }

// ParseMaxUnavailable parses "1", "20%", or "0" / "0%" (a PDB that allows no disruption).
func ParseMaxUnavailable(s string) (MaxUnavailable, error) {
	v, err := parsePDBValue(s)
	return MaxUnavailable{v}, err
}

// Floor is the number of replicas the PDB keeps available: replicas − maxUnavailable (a
// percentage rounded up: more replicas may be unavailable), never below 0.
func (m MaxUnavailable) Floor(replicas int32) int32 {
	return max(0, replicas-m.scaled(replicas))
}

// MinAvailable is a PDB's minAvailable.
type MinAvailable struct{ IntOrPercent }

// ParseMinAvailable parses "2", "80%"; "100%" (or a count equal to the replicas) allows no
// disruption, "0" allows every disruption.
func ParseMinAvailable(s string) (MinAvailable, error) {
	v, err := parsePDBValue(s)
	return MinAvailable{v}, err
}

// Floor is the number of replicas the PDB keeps available: minAvailable (a percentage rounded
// up: more replicas must stay available), never more than the replicas.
func (m MinAvailable) Floor(replicas int32) int32 {
	return max(0, min(m.scaled(replicas), replicas))
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

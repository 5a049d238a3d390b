package scenario

import (
	"fmt"
	"math"
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

// ParseMaxUnavailable parses "1" or "20%".
func ParseMaxUnavailable(s string) (MaxUnavailable, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 100 {
			return MaxUnavailable{}, fmt.Errorf("want a percentage in 1%%..100%%, got %q", s)
		}
		return MaxUnavailable{Percent: n, IsPercent: true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return MaxUnavailable{}, fmt.Errorf("want a count ≥ 1 or a percentage such as \"20%%\", got %q", s)
	}
	return MaxUnavailable{Count: n}, nil
}

// Floor is the number of replicas the PDB keeps available: replicas − maxUnavailable, where a
// percentage is rounded up as the disruption controller does.
func (m MaxUnavailable) Floor(replicas int32) int32 {
	unavailable := int32(m.Count)
	if m.IsPercent {
		unavailable = int32(math.Ceil(float64(replicas) * float64(m.Percent) / 100))
	}
	if f := replicas - unavailable; f > 0 {
		return f
	}
	return 0
}

// Package cyclestate reads the plugins' state from a scheduling cycle's CycleState.
package cyclestate

import (
	"fmt"

	fwk "k8s.io/kube-scheduler/framework"
)

// Read returns the state plugin wrote under key, as its type T. The status is an error when
// nothing is stored under key or what is stored is not a T; its messages are those the Score
// extension points have always returned for a missing or mistyped preScoreState. Callers for
// which a missing state is normal just test the status for nil.
func Read[T fwk.StateData](cs fwk.CycleState, key fwk.StateKey, plugin string) (T, *fwk.Status) {
	var zero T
	c, err := cs.Read(key)
	if err != nil {
		return zero, fwk.AsStatus(fmt.Errorf("reading %q from cycleState: %w", key, err))
	}
	s, ok := c.(T)
	if !ok {
		return zero, fwk.AsStatus(fmt.Errorf("%+v is not a %s preScoreState", c, plugin))
	}
	return s, nil
}

// Package validation validates Lifeboat's scheduler plugin args. The plugins' factories call it
// before building anything, so a bad configuration stops the scheduler at start with the
// offending field named.
package validation

import (
	"fmt"
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
)

// MaxHotPoolPenalty bounds HotPoolPenalty: beyond it one interruption would outweigh any
// realistic replica count and simply blacklist the pool.
const MaxHotPoolPenalty = 100

// MaxReclaimedPoolWait bounds ReclaimedPoolWait: a Pod should never wait longer for a lifeboat
// than the 120 s notice.
const MaxReclaimedPoolWait = 2 * time.Minute

// MaxSeatReleaseWait bounds SeatReleaseWait: the Pod waiting is down (its predecessor is gone),
// and a seat the controller has not released within seconds will not be released soon.
const MaxSeatReleaseWait = 30 * time.Second

// ValidateLifeboatTaintsArgs validates LifeboatTaints args; path prefixes field names.
func ValidateLifeboatTaintsArgs(path *field.Path, args *config.LifeboatTaintsArgs) error {
	var errs field.ErrorList
	protected := path.Child("protectedPodTaintKeys")
	errs = append(errs, validateTaintKeys(protected, args.ProtectedPodTaintKeys)...)
	for i, key := range args.ProtectedPodTaintKeys {
		if key == v1alpha1.TaintStandby {
			errs = append(errs, field.Invalid(protected.Index(i), key,
				"hibernated (standby) nodes host no Pods; remove this key"))
		}
	}
	errs = append(errs, validateTaintKeys(path.Child("reservedTaintKeys"), args.ReservedTaintKeys)...)
	return errs.ToAggregate()
}

// ValidateLifeboatPlacementArgs validates LifeboatPlacement args; path prefixes field names.
func ValidateLifeboatPlacementArgs(path *field.Path, args *config.LifeboatPlacementArgs) error {
	keys := path.Child("interruptionTaintKeys")
	if len(args.InterruptionTaintKeys) == 0 {
		return field.ErrorList{field.Required(keys,
			fmt.Sprintf("name at least one taint, e.g. %s", v1alpha1.TaintKarpenterDisrupted))}.ToAggregate()
	}
	errs := validateTaintKeys(keys, args.InterruptionTaintKeys)
	if w := args.ReclaimedPoolWait.Duration; w < 0 || w > MaxReclaimedPoolWait {
		errs = append(errs, field.Invalid(path.Child("reclaimedPoolWait"), args.ReclaimedPoolWait.String(),
			fmt.Sprintf("must be between 0s (off) and %s; a lifeboat resumes in about 20 s", MaxReclaimedPoolWait)))
	}
	if w := args.SeatReleaseWait.Duration; w < 0 || w > MaxSeatReleaseWait {
		errs = append(errs, field.Invalid(path.Child("seatReleaseWait"), args.SeatReleaseWait.String(),
			fmt.Sprintf("must be between 0s (off) and %s; the Pod waiting is down, and a seat is normally released within a second", MaxSeatReleaseWait)))
	}
	return errs.ToAggregate()
}

// ValidateCapacityPoolSpreadArgs validates CapacityPoolSpread args; path prefixes field names.
func ValidateCapacityPoolSpreadArgs(path *field.Path, args *config.CapacityPoolSpreadArgs) error {
	var errs field.ErrorList
	if args.HotPoolPenalty < 0 || args.HotPoolPenalty > MaxHotPoolPenalty {
		errs = append(errs, field.Invalid(path.Child("hotPoolPenalty"), args.HotPoolPenalty,
			fmt.Sprintf("must be between 0 (ignore telemetry) and %d", MaxHotPoolPenalty)))
	}
	if args.HotPoolPenalty > 0 && args.HotPoolHalfLife.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("hotPoolHalfLife"), args.HotPoolHalfLife.Duration.String(),
			"must be a positive duration such as 10m"))
	}
	for _, msg := range utilvalidation.IsDNS1123Label(args.TelemetryNamespace) {
		errs = append(errs, field.Invalid(path.Child("telemetryNamespace"), args.TelemetryNamespace, msg))
	}
	for _, msg := range utilvalidation.IsDNS1123Subdomain(args.TelemetryConfigMapName) {
		errs = append(errs, field.Invalid(path.Child("telemetryConfigMapName"), args.TelemetryConfigMapName, msg))
	}
	return errs.ToAggregate()
}

// validateTaintKeys checks keys are valid taint keys (label-key syntax) and not repeated.
func validateTaintKeys(path *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, key := range keys {
		errs = append(errs, metav1validation.ValidateLabelName(key, path.Index(i))...)
		if seen.Has(key) {
			errs = append(errs, field.Duplicate(path.Index(i), key))
		}
		seen.Insert(key)
	}
	return errs
}

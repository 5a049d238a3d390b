// Package policy holds Lifeboat's admission decisions as pure functions: whether a workload or
// Pod is protected (docs/ARCHITECTURE.md "Policy"), which tier it gets, what a protected Pod must look like
// (docs/ARCHITECTURE.md "Tiers") and what a protected workload is missing. Nothing here talks to the API;
// the webhooks fetch state from informer caches, call these functions and write the answer.
package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// DefaultNoticeBudget is the Spot interruption notice (AWS EC2 docs,
// spot-instance-termination-notices): a Pod that needs longer to stop is killed mid-shutdown.
const DefaultNoticeBudget = 120 * time.Second

// Tiers lists every placement tier in a stable order.
var Tiers = []v1alpha1.Tier{
	v1alpha1.TierCritical, v1alpha1.TierStateless, v1alpha1.TierCheckpointed, v1alpha1.TierBestEffort,
}

// DefaultPriorityClasses are the PriorityClasses of the four tiers (shipped in
// manifests/webhook/priorityclasses.yaml).
func DefaultPriorityClasses() map[v1alpha1.Tier]string {
	return map[v1alpha1.Tier]string{
		v1alpha1.TierCritical:     v1alpha1.PriorityClassCritical,
		v1alpha1.TierStateless:    v1alpha1.PriorityClassStateless,
		v1alpha1.TierCheckpointed: v1alpha1.PriorityClassCheckpointed,
		v1alpha1.TierBestEffort:   v1alpha1.PriorityClassBestEffort,
	}
}

// Config is what an operator can tune. The zero value is not valid; start from DefaultConfig.
type Config struct {
	// PriorityClasses maps each tier to the class the webhook assigns. These classes are the
	// allowlist: the webhook never assigns any other class.
	PriorityClasses map[v1alpha1.Tier]string
	// SchedulerName is written into protected Pods that use the default scheduler (when
	// SchedulerRouting says so); empty leaves schedulerName alone.
	SchedulerName string
	// SchedulerRouting says which protected Pods get SchedulerName.
	SchedulerRouting SchedulerRouting
	// SpotTaintKey is the key of the taint on Spot nodes that protected Pods of Spot tiers tolerate.
	SpotTaintKey string
	// NoticeBudget is how long a Pod may take to stop before the warning about a long shutdown.
	NoticeBudget time.Duration
	// OwnNamespace is Lifeboat's namespace; like the system namespaces it is never touched.
	OwnNamespace string
	// PendingHold bounds the eviction hold of a protected Pod on a draining Spot node that
	// Lifeboat has not decided about yet (EvictionHold).
	PendingHold time.Duration
}

// DefaultConfig is the configuration docs/ARCHITECTURE.md describes.
func DefaultConfig() Config {
	return Config{
		PriorityClasses:  DefaultPriorityClasses(),
		SchedulerName:    v1alpha1.SchedulerName,
		SchedulerRouting: RouteWhileLifeboatActive,
		SpotTaintKey:     v1alpha1.TaintSpot,
		NoticeBudget:     DefaultNoticeBudget,
		OwnNamespace:     v1alpha1.DefaultNamespace,
		PendingHold:      DefaultPendingHold,
	}
}

// Validate rejects configurations that would let the webhook escalate Pods into system classes
// or leave a tier without a class.
func (c Config) Validate() error {
	var errs []string
	for _, t := range Tiers {
		name := c.PriorityClasses[t]
		switch {
		case name == "":
			errs = append(errs, fmt.Sprintf("tier %s has no PriorityClass", t))
		case strings.HasPrefix(name, "system-"):
			errs = append(errs, fmt.Sprintf("tier %s maps to %q: classes with the system- prefix are reserved for cluster components and never assigned by Lifeboat", t, name))
		}
	}
	for t := range c.PriorityClasses {
		if !IsTier(string(t)) {
			errs = append(errs, fmt.Sprintf("%q is not a tier (use one of %s)", t, tierList()))
		}
	}
	if !slices.Contains(SchedulerRoutings, c.SchedulerRouting) {
		errs = append(errs, fmt.Sprintf("scheduler routing %q is not one of %s", c.SchedulerRouting, strings.Join(routingNames(), ", ")))
	}
	if c.SpotTaintKey == "" {
		errs = append(errs, "spot taint key is empty")
	}
	if c.NoticeBudget <= 0 {
		errs = append(errs, "notice budget must be positive")
	}
	if c.PendingHold < 0 || c.PendingHold > time.Minute {
		errs = append(errs, fmt.Sprintf("pending eviction hold %s must be between 0 and 1m (0 disables it: a drain that starts before Lifeboat decided is not held)", c.PendingHold))
	}
	if c.OwnNamespace == "" {
		errs = append(errs, "own namespace is empty")
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("invalid lifeboat policy configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Allowed reports whether name is one of the classes the webhook may assign.
func (c Config) Allowed(name string) bool {
	for _, n := range c.PriorityClasses {
		if n == name {
			return true
		}
	}
	return false
}

// IsTier reports whether s names a tier.
func IsTier(s string) bool {
	for _, t := range Tiers {
		if string(t) == s {
			return true
		}
	}
	return false
}

func tierList() string {
	names := make([]string, len(Tiers))
	for i, t := range Tiers {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// SchedulerRouting says which protected Pods the webhook hands to the lifeboat scheduler.
type SchedulerRouting string

const (
	// RouteWhileLifeboatActive hands a protected Pod to the lifeboat scheduler only when it is
	// created while a lifeboat node is active (claimed for an interruption, until its handoff):
	// the Pods that may be seated on a lifeboat — a bridge's surge, a moved StatefulSet Pod, the
	// replacement of an evicted Pod. Every other Pod keeps the default scheduler, so the two
	// schedulers do not bind into the same free room of ordinary nodes in steady state (each
	// sees the other's Pods only once they are bound, and a kubelet rejects the overflow with
	// OutOfcpu; docs/SCHEDULER.md "Which Pods it schedules").
	RouteWhileLifeboatActive SchedulerRouting = "WhileLifeboatActive"
	// RouteAlways hands every protected Pod to the lifeboat scheduler: CapacityPoolSpread then
	// spreads them in steady state too, at the cost of the two-scheduler race.
	RouteAlways SchedulerRouting = "Always"
)

// SchedulerRoutings lists the valid routings.
var SchedulerRoutings = []SchedulerRouting{RouteWhileLifeboatActive, RouteAlways}

func routingNames() []string {
	out := make([]string, len(SchedulerRoutings))
	for i, r := range SchedulerRoutings {
		out[i] = string(r)
	}
	return out
}

// NeedsLifeboatState reports whether ApplyPlacement reads Placement.LifeboatActive: the webhook
// looks the pool's nodes up only then.
func (c Config) NeedsLifeboatState() bool {
	return c.SchedulerName != "" && c.SchedulerRouting == RouteWhileLifeboatActive
}

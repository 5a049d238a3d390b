package policy

import (
	"fmt"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// SystemNamespaces are never touched, whatever their labels say. They are matched by name here
// and by kubernetes.io/metadata.name in the webhook configurations, which users cannot change.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Exempt reports whether the namespace is one Lifeboat never touches.
func (c Config) Exempt(namespace string) bool {
	if namespace == c.OwnNamespace {
		return true
	}
	for _, n := range SystemNamespaces {
		if n == namespace {
			return true
		}
	}
	return false
}

// Protection is the answer to "is this workload protected", with the reason in words.
type Protection struct {
	Protected bool
	// Reason says which label decided, e.g. "workload label lifeboat.dev/spot=off".
	Reason string
	// Warnings are label values Lifeboat did not understand (treated as unset).
	Warnings []string
}

// ResolveProtection applies docs/ARCHITECTURE.md "Policy": the workload's lifeboat.dev/spot label wins,
// "off" always opts out, else the namespace's label decides. Unknown values count as unset and
// produce a warning, because a typo ("true") must not silently change protection.
func (c Config) ResolveProtection(namespace string, namespaceLabels, workloadLabels map[string]string) Protection {
	if c.Exempt(namespace) {
		return Protection{Reason: fmt.Sprintf("namespace %s is never touched by Lifeboat", namespace)}
	}
	var p Protection
	if p.decideBy("workload", workloadLabels) || p.decideBy("namespace", namespaceLabels) {
		return p
	}
	p.Reason = "no " + v1alpha1.LabelSpot + " label on the workload or its namespace"
	return p
}

// decideBy applies the lifeboat.dev/spot label of labels, those of the workload or namespace
// (where): "off" and "protected" decide, with the reason, and it reports true; an unknown
// value adds a warning, and it reports false, as without the label.
func (p *Protection) decideBy(where string, labels map[string]string) bool {
	v, ok := labels[v1alpha1.LabelSpot]
	if !ok {
		return false
	}
	switch v {
	case v1alpha1.SpotOff:
		p.Reason = where + " label " + v1alpha1.LabelSpot + "=off"
		return true
	case v1alpha1.SpotProtected:
		p.Protected = true
		p.Reason = where + " label " + v1alpha1.LabelSpot + "=protected"
		return true
	default:
		p.Warnings = append(p.Warnings, unknownSpotValue(where, v))
		return false
	}
}

func unknownSpotValue(where, v string) string {
	return fmt.Sprintf("%s label %s=%q is not understood and is ignored; set it to %q or %q",
		where, v1alpha1.LabelSpot, v, v1alpha1.SpotProtected, v1alpha1.SpotOff)
}

// PDBMode reads the namespace's lifeboat.dev/pdb-mode: enforce unless it says warn. An unknown
// value is enforce (the safe default) with a warning.
func PDBMode(namespaceLabels map[string]string) (mode string, warning string) {
	switch v, ok := namespaceLabels[v1alpha1.LabelPDBMode]; {
	case !ok || v == v1alpha1.PDBModeEnforce:
		return v1alpha1.PDBModeEnforce, ""
	case v == v1alpha1.PDBModeWarn:
		return v1alpha1.PDBModeWarn, ""
	default:
		return v1alpha1.PDBModeEnforce, fmt.Sprintf("namespace label %s=%q is not understood; using %q (set it to %q or %q)",
			v1alpha1.LabelPDBMode, v, v1alpha1.PDBModeEnforce, v1alpha1.PDBModeEnforce, v1alpha1.PDBModeWarn)
	}
}

// ResolveTier picks the tier: the Pod template's lifeboat.dev/tier label (closest to the Pod),
// else the workload's, else the default of the workload's kind. An unknown value is skipped
// with a warning.
func ResolveTier(kind Kind, workloadLabels, podLabels map[string]string) (v1alpha1.Tier, []string) {
	var warnings []string
	for _, src := range []struct {
		where  string
		labels map[string]string
	}{{"Pod template", podLabels}, {"workload", workloadLabels}} {
		v, ok := src.labels[v1alpha1.LabelTier]
		if !ok {
			continue
		}
		if IsTier(v) {
			return v1alpha1.Tier(v), warnings
		}
		warnings = append(warnings, fmt.Sprintf("%s label %s=%q is not a tier; use one of %s",
			src.where, v1alpha1.LabelTier, v, tierList()))
	}
	return DefaultTier(kind), warnings
}

// DefaultTier is the tier of a workload kind without a tier label (docs/ARCHITECTURE.md "Policy").
func DefaultTier(kind Kind) v1alpha1.Tier {
	switch kind {
	case KindStatefulSet:
		return v1alpha1.TierCheckpointed
	case KindJob, KindCronJob:
		return v1alpha1.TierBestEffort
	default:
		return v1alpha1.TierStateless
	}
}

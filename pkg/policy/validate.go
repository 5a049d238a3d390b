package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// SuggestedMaxUnavailable is the disruption budget Lifeboat suggests for a workload without one.
const SuggestedMaxUnavailable = "20%"

// NeedsPDB reports whether Lifeboat requires a PodDisruptionBudget for the kind. Jobs and CronJobs
// are exempt: a percentage or maxUnavailable PDB cannot be computed for Pods whose controller has
// no scale subresource.
func NeedsPDB(kind Kind) bool {
	return kind == KindDeployment || kind == KindStatefulSet
}

// SelectingPDBs returns the PDBs whose selector matches the Pod labels. In policy/v1 a nil
// selector matches nothing and an empty one matches every Pod of the namespace.
func SelectingPDBs(pdbs []*policyv1.PodDisruptionBudget, podLabels map[string]string) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	set := labels.Set(podLabels)
	for _, pdb := range pdbs {
		if pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(set) {
			out = append(out, pdb)
		}
	}
	return out
}

// PodInput is what DecidePod needs to know about a Pod being created.
type PodInput struct {
	Namespace       string
	NamespaceLabels map[string]string
	Workload        Workload
	PodLabels       map[string]string
	// PDBs are the PodDisruptionBudgets of the Pod's namespace.
	PDBs []*policyv1.PodDisruptionBudget
}

// PodDecision says whether to protect a Pod, and with which tier.
type PodDecision struct {
	Protect  bool
	Tier     v1alpha1.Tier
	Reason   string
	Warnings []string
}

// DecidePod decides whether a new Pod is protected: its namespace is not exempt, its controller
// is a supported workload that is protected, and — for Deployments and StatefulSets — a PDB
// selects it. The last rule is what makes warn mode and GitOps ordering work: a workload admitted
// before its PDB stays unprotected, and its Pods created after the PDB appears are protected.
func (c Config) DecidePod(in PodInput) PodDecision {
	if c.Exempt(in.Namespace) {
		return PodDecision{Reason: fmt.Sprintf("namespace %s is never touched by Lifeboat", in.Namespace)}
	}
	if !in.Workload.Supported() {
		return PodDecision{Reason: "the Pod has no Deployment, StatefulSet, Job or CronJob controller"}
	}
	prot := c.ResolveProtection(in.Namespace, in.NamespaceLabels, in.Workload.Labels)
	d := PodDecision{Reason: prot.Reason, Warnings: prot.Warnings}
	if !prot.Protected {
		return d
	}
	if NeedsPDB(in.Workload.Kind) && len(SelectingPDBs(in.PDBs, in.PodLabels)) == 0 {
		d.Reason = fmt.Sprintf("%s is protected but no PodDisruptionBudget selects its Pods yet; its Pods stay unprotected until one exists", in.Workload)
		return d
	}
	tier, warnings := ResolveTier(in.Workload.Kind, in.Workload.Labels, in.PodLabels)
	d.Protect = true
	d.Tier = tier
	d.Warnings = append(d.Warnings, warnings...)
	return d
}

// WorkloadInput is what ValidateWorkload needs to know about a Deployment, StatefulSet, Job or
// CronJob being created or updated.
type WorkloadInput struct {
	Kind            Kind
	Namespace       string
	Name            string
	Labels          map[string]string
	NamespaceLabels map[string]string
	// Selector is the workload's Pod selector (nil for CronJobs, whose Jobs get generated ones).
	Selector *metav1.LabelSelector
	// Replicas is nil for kinds without replicas.
	Replicas *int32
	Template corev1.PodTemplateSpec
	// PDBs are the PodDisruptionBudgets of the namespace.
	PDBs []*policyv1.PodDisruptionBudget
}

// Verdict is the validating webhook's answer.
type Verdict struct {
	Allowed   bool
	Protected bool
	// MissingPDB is set when the workload is protected, needs a PDB, and none selects its Pods.
	MissingPDB bool
	// MissingPDBWarning says the same as a missing-PDB denial on one line, for admitting instead.
	MissingPDBWarning string
	Message           string
	Warnings          []string
}

// ValidateWorkload applies the validation rules of docs/ARCHITECTURE.md "Policy". In enforce mode a protected Deployment
// or StatefulSet without a PDB is denied with a ready-to-apply PDB in the message; in warn mode
// it is admitted with the same PDB in a warning. Everything else only warns.
func (c Config) ValidateWorkload(in WorkloadInput) Verdict {
	v := Verdict{Allowed: true}
	if c.Exempt(in.Namespace) {
		return v
	}
	prot := c.ResolveProtection(in.Namespace, in.NamespaceLabels, in.Labels)
	v.Warnings = append(v.Warnings, prot.Warnings...)
	_, tierWarnings := ResolveTier(in.Kind, in.Labels, in.Template.Labels)
	if !prot.Protected {
		// An unprotected workload is left alone; a malformed tier label is still worth pointing out.
		v.Warnings = append(v.Warnings, tierWarnings...)
		return v
	}
	v.Protected = true
	v.Warnings = append(v.Warnings, tierWarnings...)
	mode, modeWarning := PDBMode(in.NamespaceLabels)
	if modeWarning != "" {
		v.Warnings = append(v.Warnings, modeWarning)
	}

	selecting := SelectingPDBs(in.PDBs, in.Template.Labels)
	if NeedsPDB(in.Kind) && len(selecting) == 0 {
		v.MissingPDB = true
		// Warnings travel in an HTTP Warning header, which cannot carry newlines: the PDB goes as
		// one-line JSON, which is also valid YAML for kubectl apply -f -.
		v.MissingPDBWarning = fmt.Sprintf("%s %s/%s is protected by Lifeboat (%s) but no PodDisruptionBudget selects its Pods, "+
			"so its Pods stay unprotected until one exists. Apply this PodDisruptionBudget, then roll the workload out: %s",
			in.Kind, in.Namespace, in.Name, prot.Reason, SuggestedPDBJSON(in.Namespace, in.Name, in.Selector))
		if mode == v1alpha1.PDBModeEnforce {
			v.Allowed = false
			v.Message = fmt.Sprintf("%s %s/%s is protected by Lifeboat (%s) but no PodDisruptionBudget selects its Pods: "+
				"without one an interruption can evict every replica at once. "+
				"Apply this PodDisruptionBudget and retry "+
				"(or opt the workload out with label %s=off, or set %s=warn on the namespace to admit it unprotected until a PDB exists):\n---\n%s",
				in.Kind, in.Namespace, in.Name, prot.Reason, v1alpha1.LabelSpot, v1alpha1.LabelPDBMode, SuggestedPDBYAML(in.Namespace, in.Name, in.Selector))
			return v
		}
		v.Warnings = append(v.Warnings, v.MissingPDBWarning)
	}
	if len(selecting) > 1 {
		names := make([]string, len(selecting))
		for i, p := range selecting {
			names[i] = p.Name
		}
		v.Warnings = append(v.Warnings, fmt.Sprintf("%s %s/%s: its Pods are selected by %d PodDisruptionBudgets (%s); the eviction API refuses to evict such Pods, so drains stall. Keep exactly one.",
			in.Kind, in.Namespace, in.Name, len(selecting), strings.Join(names, ", ")))
	}
	for _, pdb := range selecting {
		if AllowsNoDisruption(pdb, in.Replicas) {
			v.Warnings = append(v.Warnings, fmt.Sprintf("PodDisruptionBudget %s/%s allows zero disruptions for %s %s: drains of interrupted nodes stall until the Spot node is reclaimed and the Pods die anyway. Use maxUnavailable (e.g. %s) instead.",
				pdb.Namespace, pdb.Name, in.Kind, in.Name, SuggestedMaxUnavailable))
		}
	}
	if d := ShutdownDuration(in.Template.Spec); d > c.NoticeBudget {
		v.Warnings = append(v.Warnings, fmt.Sprintf("%s %s/%s: its Pods may take %s to stop (terminationGracePeriodSeconds / preStop sleep), longer than the %s Spot interruption notice: they will be killed mid-shutdown. Lower terminationGracePeriodSeconds to at most %d.",
			in.Kind, in.Namespace, in.Name, d, c.NoticeBudget, int64(c.NoticeBudget/time.Second)))
	}
	return v
}

// AllowsNoDisruption reports whether the PDB can never allow an eviction for a workload of the
// given replica count (nil: unknown, only the literal cases are detected). Such PDBs stall drains
// (kubernetes-sigs/karpenter #1776, #2802). Percentages round up, as the disruption controller does.
func AllowsNoDisruption(pdb *policyv1.PodDisruptionBudget, replicas *int32) bool {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		mu := pdb.Spec.MaxUnavailable
		if mu.Type == intstr.Int {
			return mu.IntVal <= 0
		}
		p, ok := percent(mu.StrVal)
		return ok && p <= 0
	case pdb.Spec.MinAvailable != nil:
		ma := pdb.Spec.MinAvailable
		if ma.Type == intstr.String {
			p, ok := percent(ma.StrVal)
			if !ok {
				return false
			}
			if p >= 100 {
				return true
			}
			if replicas == nil {
				return false
			}
			n, err := intstr.GetScaledValueFromIntOrPercent(ma, int(*replicas), true)
			return err == nil && n >= int(*replicas)
		}
		return replicas != nil && ma.IntVal >= *replicas
	}
	return false
}

func percent(s string) (int, bool) {
	v, ok := strings.CutSuffix(s, "%")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

var shellSleep = regexp.MustCompile(`(?:^|[\s;&|(])sleep\s+(\d+)`)

// ShutdownDuration is how long a Pod may take to stop: the longer of its termination grace period
// (default 30 s) and its longest preStop sleep. The grace period already includes the preStop
// hook (the kubelet starts the countdown before running it), so the two do not add up; a preStop
// longer than the grace period still holds the Pod that long.
func ShutdownDuration(spec corev1.PodSpec) time.Duration {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	longest := grace
	for _, c := range spec.Containers {
		if s := preStopSleepSeconds(c.Lifecycle); s > longest {
			longest = s
		}
	}
	return time.Duration(longest) * time.Second
}

func preStopSleepSeconds(l *corev1.Lifecycle) int64 {
	if l == nil || l.PreStop == nil {
		return 0
	}
	if l.PreStop.Sleep != nil {
		return l.PreStop.Sleep.Seconds
	}
	if l.PreStop.Exec == nil {
		return 0
	}
	var longest int64
	for _, m := range shellSleep.FindAllStringSubmatch(strings.Join(l.PreStop.Exec.Command, " "), -1) {
		if n, err := strconv.ParseInt(m[1], 10, 64); err == nil && n > longest {
			longest = n
		}
	}
	return longest
}

// SuggestedPDBName is the name of the PDB Lifeboat suggests for a workload.
func SuggestedPDBName(workload string) string {
	name := workload + "-lifeboat"
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// suggestedPDB is a policy/v1 PodDisruptionBudget without the empty status and creationTimestamp
// that marshalling the API type would print.
type suggestedPDB struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		MaxUnavailable intstr.IntOrString    `json:"maxUnavailable"`
		Selector       *metav1.LabelSelector `json:"selector"`
	} `json:"spec"`
}

// SuggestedPDBYAML renders a ready-to-apply policy/v1 PDB for exactly the workload's Pods.
func SuggestedPDBYAML(namespace, workload string, selector *metav1.LabelSelector) string {
	b, err := yaml.Marshal(suggest(namespace, workload, selector))
	if err != nil {
		// A struct of strings and a LabelSelector always marshals.
		panic(fmt.Sprintf("render PodDisruptionBudget: %v", err))
	}
	return string(b)
}

// SuggestedPDBJSON is SuggestedPDBYAML on one line, for admission warnings.
func SuggestedPDBJSON(namespace, workload string, selector *metav1.LabelSelector) string {
	b, err := json.Marshal(suggest(namespace, workload, selector))
	if err != nil {
		panic(fmt.Sprintf("render PodDisruptionBudget: %v", err))
	}
	return string(b)
}

func suggest(namespace, workload string, selector *metav1.LabelSelector) suggestedPDB {
	var p suggestedPDB
	p.APIVersion = policyv1.SchemeGroupVersion.String()
	p.Kind = "PodDisruptionBudget"
	p.Metadata.Name = SuggestedPDBName(workload)
	p.Metadata.Namespace = namespace
	p.Spec.MaxUnavailable = intstr.FromString(SuggestedMaxUnavailable)
	p.Spec.Selector = selector
	if p.Spec.Selector == nil {
		p.Spec.Selector = &metav1.LabelSelector{}
	}
	return p
}

package assess

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// ReasonCode names a reason; docs/ASSESS.md lists every one with its class and fix.
type ReasonCode string

const (
	ReasonNoController        ReasonCode = "no-controller"
	ReasonOrphanReplicaSet    ReasonCode = "orphan-replicaset"
	ReasonMissingPDB          ReasonCode = "missing-pdb"
	ReasonPDBNoDisruption     ReasonCode = "pdb-allows-no-disruption"
	ReasonMultiplePDBs        ReasonCode = "multiple-pdbs"
	ReasonSingleReplica       ReasonCode = "single-replica"
	ReasonShutdownOverNotice  ReasonCode = "shutdown-over-notice"
	ReasonMissingRequests     ReasonCode = "missing-requests"
	ReasonEmptyDir            ReasonCode = "emptydir"
	ReasonHostPath            ReasonCode = "hostpath"
	ReasonLocalVolume         ReasonCode = "local-volume"
	ReasonDoNotDisrupt        ReasonCode = "do-not-disrupt"
	ReasonPinnedOnDemand      ReasonCode = "pinned-on-demand"
	ReasonQuorumLike          ReasonCode = "quorum-like"
	ReasonDatabase            ReasonCode = "database"
	ReasonStatefulVolumes     ReasonCode = "stateful-volumes"
	ReasonLongJobNoCheckpoint ReasonCode = "long-running-job"
	ReasonUnsupportedKind     ReasonCode = "lifeboat-unsupported-kind"
)

// Well-known annotations and labels read by the classifier.
const (
	// AnnotationDoNotDisrupt is Karpenter's Pod annotation that blocks voluntary disruption.
	AnnotationDoNotDisrupt = "karpenter.sh/do-not-disrupt"
	// AnnotationSafeToEvictLocalVolumes is the cluster autoscaler's list of scratch volumes: the
	// emptyDirs it names hold nothing that must survive the node.
	AnnotationSafeToEvictLocalVolumes = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
	// LabelEKSCapacityType is the capacity-type label of EKS managed node groups.
	LabelEKSCapacityType = "eks.amazonaws.com/capacityType"
)

// LongJob is how long a Job may run before losing it to a reclaim costs more than a restart:
// beyond it, a Job without a checkpoint hint is checkpoint-needed.
const LongJob = 10 * time.Minute

// Spec is what the classifier knows about one workload: its object, its namespace and the
// PDBs and volumes around it. Builders in snapshot.go fill it from one List per kind.
type Spec struct {
	Kind            string // Deployment, StatefulSet, Job, CronJob, Rollout, Pod, ReplicaSet
	Namespace, Name string
	Labels          map[string]string
	NamespaceLabels map[string]string
	Template        corev1.PodTemplateSpec
	// Replicas is the desired count (nil: the kind's default, 1).
	Replicas *int32
	// Selector is the workload's Pod selector (the PDB the fix suggests uses it).
	Selector *metav1.LabelSelector
	// VolumeClaimTemplates of a StatefulSet.
	VolumeClaimTemplates int
	// ActiveDeadline of a Job (or a CronJob's job template); 0 when unset.
	ActiveDeadline time.Duration
	// LongestRun is how long the workload's oldest running Pod of a Job has been running.
	LongestRun time.Duration
	// PDBs of the namespace.
	PDBs []*policyv1.PodDisruptionBudget
	// LocalVolumes names the Pod volumes whose data lives on the node: PVCs bound to local or
	// hostPath PersistentVolumes, or whose StorageClass has no provisioner.
	LocalVolumes []string
}

// Verdict is the classifier's answer for one workload.
type Verdict struct {
	Class     Class
	Reasons   []Reason
	Tier      string
	Protected bool
}

// Classify decides a workload's Spot fit. Each reason carries the class it implies; the
// workload gets its hardest reason's class (ready when there are none). budget is the Spot
// notice (policy.DefaultNoticeBudget).
func Classify(s Spec, budget time.Duration) Verdict {
	var v Verdict
	kind := policy.Kind(s.Kind)
	if protectableKind(kind) {
		tier, _ := policy.ResolveTier(kind, s.Labels, s.Template.Labels)
		v.Tier = string(tier)
		v.Protected = policy.DefaultConfig().ResolveProtection(s.Namespace, s.NamespaceLabels, s.Labels).Protected
	}
	// The families in the order the reasons are listed (a stable sort by class follows).
	for _, family := range [][]Reason{
		kindReasons(s),
		disruptionReasons(s),
		podSpecReasons(s.Template.Spec, budget),
		volumeReasons(s),
		placementReasons(s),
		statefulReasons(s),
		jobReasons(s),
	} {
		v.Reasons = append(v.Reasons, family...)
	}
	v.Class = hardestClass(v.Reasons)
	sort.SliceStable(v.Reasons, func(i, j int) bool { return v.Reasons[i].Class.rank() > v.Reasons[j].Class.rank() })
	return v
}

// newReason builds a reason; format and args make its message.
func newReason(code ReasonCode, class Class, fix, format string, args ...any) Reason {
	return Reason{Code: code, Class: class, Message: fmt.Sprintf(format, args...), Fix: fix}
}

// protectableKind: the kinds Lifeboat's webhook protects.
func protectableKind(k policy.Kind) bool {
	return k == policy.KindDeployment || k == policy.KindStatefulSet || isJobKind(k)
}

// isJobKind: Jobs and CronJobs, which run to completion.
func isJobKind(k policy.Kind) bool { return k == policy.KindJob || k == policy.KindCronJob }

// desiredReplicas is the desired count, 1 when unset.
func (s Spec) desiredReplicas() int32 {
	if s.Replicas != nil {
		return *s.Replicas
	}
	return 1
}

// hardestClass is the class of the hardest reason, ready when there are none.
func hardestClass(reasons []Reason) Class {
	c := ClassReady
	for _, r := range reasons {
		if r.Class.rank() > c.rank() {
			c = r.Class
		}
	}
	return c
}

// kindReasons: kinds Lifeboat does not protect (bare Pods, orphan ReplicaSets, Argo Rollouts).
func kindReasons(s Spec) []Reason {
	switch s.Kind {
	case KindPod:
		return []Reason{newReason(ReasonNoController, ClassReadyWithChanges,
			"Run it under a Deployment (or a Job if it runs to completion); Lifeboat protects only Pods with a controller.",
			"bare Pod: nothing recreates it when its Spot node is reclaimed")}
	case KindReplicaSet:
		return []Reason{newReason(ReasonOrphanReplicaSet, ClassReadyWithChanges,
			"Manage it with a Deployment (kubectl create deployment, or adopt it with a Deployment of the same selector).",
			"ReplicaSet without a Deployment: Lifeboat does not protect it, and a rollout cannot surge it")}
	case KindRollout:
		return []Reason{newReason(ReasonUnsupportedKind, ClassReady,
			"Nothing to change for Spot; to have Lifeboat protect it, run it as a Deployment (Lifeboat protects Deployments, StatefulSets, Jobs and CronJobs).",
			"Argo Rollout: Spot-fit as a Deployment would be, but Lifeboat's webhook does not protect Rollouts")}
	}
	return nil
}

// disruptionReasons: the PodDisruptionBudgets and replica count of scaled kind (Deployments,
// StatefulSets, Rollouts), which decide whether a drain can move the Pods one by one.
func disruptionReasons(s Spec) []Reason {
	kind := policy.Kind(s.Kind)
	if kind != policy.KindDeployment && kind != policy.KindStatefulSet && s.Kind != KindRollout {
		return nil
	}
	var out []Reason
	replicas := s.desiredReplicas()
	selecting := policy.SelectingPDBs(s.PDBs, s.Template.Labels)
	switch {
	case len(selecting) == 0:
		out = append(out, newReason(ReasonMissingPDB, ClassReadyWithChanges,
			"Apply this PodDisruptionBudget (lifeboat pdb "+lower(s.Kind)+"/"+s.Name+" -n "+s.Namespace+" prints it):\n"+
				policy.SuggestedPDBYAML(s.Namespace, s.Name, s.Selector),
			"no PodDisruptionBudget selects its Pods: a drain may evict every replica at once, and Lifeboat rejects it while protected"))
	case len(selecting) > 1:
		names := make([]string, len(selecting))
		for i, p := range selecting {
			names[i] = p.Name
		}
		out = append(out, newReason(ReasonMultiplePDBs, ClassReadyWithChanges,
			"Keep exactly one PodDisruptionBudget for its Pods.",
			"%d PodDisruptionBudgets select its Pods (%s): the eviction API refuses to evict them, so drains stall", len(selecting), strings.Join(names, ", ")))
	}
	for _, p := range selecting {
		if policy.AllowsNoDisruption(p, &replicas) {
			out = append(out, newReason(ReasonPDBNoDisruption, ClassReadyWithChanges,
				fmt.Sprintf("Set maxUnavailable: %s (or a minAvailable below the replica count) on PodDisruptionBudget %s.", policy.SuggestedMaxUnavailable, p.Name),
				"PodDisruptionBudget %s allows zero disruptions: the drain of a reclaimed node stalls until the reclaim kills the Pods anyway", p.Name))
		}
	}
	if replicas < 2 {
		out = append(out, newReason(ReasonSingleReplica, ClassReadyWithChanges,
			"Run at least 2 replicas (spread over nodes) so one reclaimed node never takes the only copy.",
			"%d replica: a reclaim takes the service down until a new Pod is Ready", replicas))
	}
	return out
}

// podSpecReasons: a shutdown longer than the Spot notice, and containers without requests.
func podSpecReasons(spec corev1.PodSpec, budget time.Duration) []Reason {
	var out []Reason
	if d := policy.ShutdownDuration(spec); d > budget {
		out = append(out, newReason(ReasonShutdownOverNotice, ClassReadyWithChanges,
			fmt.Sprintf("Lower terminationGracePeriodSeconds (and any preStop sleep) to at most %d, and make the app drain in-flight work within it.", int64(budget/time.Second)),
			"its Pods may take %s to stop, longer than the %s Spot notice: they are killed mid-shutdown", d, budget))
	}
	if missing := containersWithoutRequests(spec); len(missing) > 0 {
		out = append(out, newReason(ReasonMissingRequests, ClassReadyWithChanges,
			"Set resources.requests.cpu and .memory on every container: Karpenter and the warm pool size capacity from requests.",
			"containers without CPU or memory requests (%s): replacement capacity cannot be sized and its cost is unknown", strings.Join(missing, ", ")))
	}
	return out
}

// volumeReasons: data that dies with the node (emptyDirs not declared scratch, hostPaths,
// node-local PersistentVolumes).
func volumeReasons(s Spec) []Reason {
	var out []Reason
	emptyDirs, hostPaths := nodeVolumes(s.Template)
	if len(emptyDirs) > 0 {
		out = append(out, newReason(ReasonEmptyDir, ClassReadyWithChanges,
			fmt.Sprintf("If the data is scratch, say so: annotate the Pod template %s: %q. If it must survive, keep it on a PersistentVolumeClaim or in object storage.",
				AnnotationSafeToEvictLocalVolumes, strings.Join(emptyDirs, ",")),
			"emptyDir volumes (%s) are lost with the node at reclaim", strings.Join(emptyDirs, ", ")))
	}
	if len(hostPaths) > 0 {
		out = append(out, newReason(ReasonHostPath, ClassReadyWithChanges,
			"Do not depend on node-local files: use a ConfigMap, a PersistentVolumeClaim or an emptyDir scratch volume.",
			"hostPath volumes (%s): the replacement node does not have the reclaimed node's files", strings.Join(hostPaths, ", ")))
	}
	if len(s.LocalVolumes) > 0 {
		out = append(out, newReason(ReasonLocalVolume, ClassPoorFit,
			"Move the data to network-attached volumes (EBS CSI, a StorageClass with a provisioner) before running it on Spot, or keep it On-Demand (label lifeboat.dev/tier=critical).",
			"node-local PersistentVolumes (%s): the data dies with the Spot node", strings.Join(s.LocalVolumes, ", ")))
	}
	return out
}

// nodeVolumes names the template's emptyDir volumes that its
// safe-to-evict-local-volumes annotation does not declare scratch, and its hostPath volumes.
func nodeVolumes(tmpl corev1.PodTemplateSpec) (emptyDirs, hostPaths []string) {
	scratch := map[string]bool{}
	for _, n := range strings.Split(tmpl.Annotations[AnnotationSafeToEvictLocalVolumes], ",") {
		scratch[strings.TrimSpace(n)] = true
	}
	for _, vol := range tmpl.Spec.Volumes {
		switch {
		case vol.EmptyDir != nil && !scratch[vol.Name]:
			emptyDirs = append(emptyDirs, vol.Name)
		case vol.HostPath != nil:
			hostPaths = append(hostPaths, vol.Name)
		}
	}
	return emptyDirs, hostPaths
}

// placementReasons: a do-not-disrupt annotation, and Pods pinned to On-Demand capacity.
func placementReasons(s Spec) []Reason {
	var out []Reason
	if s.Template.Annotations[AnnotationDoNotDisrupt] == "true" {
		out = append(out, newReason(ReasonDoNotDisrupt, ClassReadyWithChanges,
			"Remove "+AnnotationDoNotDisrupt+" for Spot: a reclaim ignores it, while it blocks Karpenter's consolidation and graceful drains. If the Pod truly must not be interrupted, keep it On-Demand (lifeboat.dev/tier=critical).",
			"annotated %s=true, but a Spot reclaim does not wait", AnnotationDoNotDisrupt))
	}
	if pinnedOnDemand(s.Template.Spec) {
		out = append(out, newReason(ReasonPinnedOnDemand, ClassReadyWithChanges,
			"If it can run on Spot, drop the On-Demand requirement and let the tier place it (lifeboat.dev/tier=stateless prefers Spot and allows On-Demand); if it must not be interrupted, label it lifeboat.dev/tier=critical and leave it out of the Spot plan.",
			"its Pods require On-Demand capacity (karpenter.sh/capacity-type): no Spot savings today"))
	}
	return out
}

// statefulReasons: state a reclaim cannot hand over — a quorum-like StatefulSet, a database,
// or per-member volumes. At most one of them, the hardest.
func statefulReasons(s Spec) []Reason {
	kind := policy.Kind(s.Kind)
	replicas := s.desiredReplicas()
	// Jobs that use a database image are clients (migrations, dumps), not servers.
	db := ""
	if !isJobKind(kind) {
		db = databaseHint(s.Labels, s.Template, kind == policy.KindStatefulSet)
	}
	withVolumes := kind == policy.KindStatefulSet && s.VolumeClaimTemplates > 0
	switch {
	case withVolumes && isQuorumSize(replicas):
		r := newReason(ReasonQuorumLike, ClassPoorFit,
			"Keep it On-Demand: label it lifeboat.dev/tier=critical. A correlated reclaim can take a majority of its members at once.",
			"StatefulSet with volume claim templates and %d replicas looks like a quorum system", replicas)
		if db != "" {
			r.Message += " (" + db + ")"
		}
		return []Reason{r}
	case db != "":
		return []Reason{newReason(ReasonDatabase, ClassPoorFit,
			"Keep the primary On-Demand (lifeboat.dev/tier=critical); only read replicas that can be rebuilt belong on Spot.",
			"looks like a database (%s): a reclaim fails over or loses the primary", db)}
	case withVolumes:
		return []Reason{newReason(ReasonStatefulVolumes, ClassCheckpointNeeded,
			"Make each member restartable from its volume (EBS reattaches in the same zone in about a minute) and keep its PDB at maxUnavailable: 1; label it lifeboat.dev/tier=checkpointed.",
			"StatefulSet with volume claim templates: each Pod's state must survive a restart on another node")}
	}
	return nil
}

// isQuorumSize: an odd member count from 3 to 7, the sizes of consensus systems.
func isQuorumSize(replicas int32) bool { return replicas%2 == 1 && replicas >= 3 && replicas <= 7 }

// jobReasons: a Job (or CronJob) that runs longer than LongJob without a checkpoint hint.
func jobReasons(s Spec) []Reason {
	if !isJobKind(policy.Kind(s.Kind)) {
		return nil
	}
	long := max(s.ActiveDeadline, s.LongestRun)
	if long <= LongJob || checkpointHint(s.Labels, s.Template) {
		return nil
	}
	return []Reason{newReason(ReasonLongJobNoCheckpoint, ClassCheckpointNeeded,
		"Save progress to durable storage at least every 2 minutes and resume from it on restart, then label it lifeboat.dev/tier=checkpointed (or keep it On-Demand).",
		"runs up to %s with no checkpoint hint: a reclaim restarts it from the beginning", long.Round(time.Second))}
}

func containersWithoutRequests(spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		_, cpu := c.Resources.Requests[corev1.ResourceCPU]
		_, mem := c.Resources.Requests[corev1.ResourceMemory]
		if !cpu || !mem {
			out = append(out, c.Name)
		}
	}
	return out
}

// pinnedOnDemand reports a nodeSelector or required node affinity that admits only On-Demand.
func pinnedOnDemand(spec corev1.PodSpec) bool {
	if v := spec.NodeSelector[v1alpha1.LabelCapacityType]; v == "on-demand" {
		return true
	}
	if v := spec.NodeSelector[LabelEKSCapacityType]; v == "ON_DEMAND" {
		return true
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms { // terms are ORed: pinned only if every term excludes Spot
		excludesSpot := false
		for _, e := range t.MatchExpressions {
			if e.Key != v1alpha1.LabelCapacityType && e.Key != LabelEKSCapacityType {
				continue
			}
			hasSpot := false
			for _, val := range e.Values {
				if val == "spot" || val == "SPOT" {
					hasSpot = true
				}
			}
			if (e.Operator == corev1.NodeSelectorOpIn && !hasSpot) || (e.Operator == corev1.NodeSelectorOpNotIn && hasSpot) {
				excludesSpot = true
			}
		}
		if !excludesSpot {
			return false
		}
	}
	return true
}

// databaseImages are images of systems whose members hold state a reclaim cannot hand over.
var databaseImages = []string{
	"postgres", "postgis", "timescale", "mysql", "mariadb", "percona", "mongo", "cassandra", "scylla",
	"etcd", "zookeeper", "kafka", "elasticsearch", "opensearch", "cockroach", "clickhouse", "consul",
	"vault", "rabbitmq", "yugabyte", "tidb", "neo4j", "couchdb", "couchbase", "influxdb", "redis", "valkey",
}

// databaseHint returns what makes the workload look like a database: a well-known image, or an
// app.kubernetes.io/name or app.kubernetes.io/component label.
func databaseHint(labels map[string]string, tmpl corev1.PodTemplateSpec, stateful bool) string {
	isDB := func(n string) bool { return isDatabaseName(n) && (stateful || !isCacheName(n)) }
	for _, src := range []map[string]string{labels, tmpl.Labels} {
		if c := src["app.kubernetes.io/component"]; c == "database" || c == "db" || c == "primary" {
			return "label app.kubernetes.io/component=" + c
		}
		if n := src["app.kubernetes.io/name"]; n != "" && isDB(n) {
			return "label app.kubernetes.io/name=" + n
		}
	}
	for _, c := range tmpl.Spec.Containers {
		if isDB(imageName(c.Image)) {
			return "image " + c.Image
		}
	}
	return ""
}

// isCacheName: Redis and Valkey are databases in a StatefulSet, caches in a Deployment.
func isCacheName(n string) bool {
	n = strings.ToLower(n)
	return strings.HasPrefix(n, "redis") || strings.HasPrefix(n, "valkey")
}

// notDatabase marks the companions of databases that hold no data themselves.
var notDatabase = []string{"exporter", "operator", "proxy", "-ui", "admin", "client", "commander", "insight"}

func isDatabaseName(n string) bool {
	n = strings.ToLower(n)
	for _, x := range notDatabase {
		if strings.Contains(n, x) {
			return false
		}
	}
	for _, d := range databaseImages {
		if strings.HasPrefix(n, d) {
			return true
		}
	}
	return false
}

// imageName is the last path segment of an image reference without tag or digest:
// "docker.io/bitnami/postgresql:16" → "postgresql".
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	ref, _, _ = strings.Cut(ref, ":")
	return ref
}

// checkpointHint: the checkpointed tier, or a label, annotation, env var, argument or mount
// that mentions checkpoints.
func checkpointHint(labels map[string]string, tmpl corev1.PodTemplateSpec) bool {
	if labels[v1alpha1.LabelTier] == string(v1alpha1.TierCheckpointed) || tmpl.Labels[v1alpha1.LabelTier] == string(v1alpha1.TierCheckpointed) {
		return true
	}
	mentions := func(s string) bool { return strings.Contains(strings.ToLower(s), "checkpoint") }
	for _, m := range []map[string]string{labels, tmpl.Labels, tmpl.Annotations} {
		for k, val := range m {
			if mentions(k) || mentions(val) {
				return true
			}
		}
	}
	for _, c := range tmpl.Spec.Containers {
		for _, e := range c.Env {
			if mentions(e.Name) {
				return true
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if mentions(a) {
				return true
			}
		}
		for _, vm := range c.VolumeMounts {
			if mentions(vm.Name) || mentions(vm.MountPath) {
				return true
			}
		}
	}
	return false
}

func lower(s string) string { return strings.ToLower(s) }

// Package assess classifies a cluster's workloads for Spot (ready, ready-with-changes,
// checkpoint-needed, poor-fit, each reason with its fix), prices them from their share of their
// nodes, orders them into the savings curve, checks Karpenter NodePools and the correlated-reclaim
// exposure, recommends the warm pool, and writes a simulation scenario of the fleet.
//
// Everything here is pure: the CLI lists each kind once into a Snapshot and calls Assess.
// Bad input (unknown owner kinds, missing requests, nodes without an instance type) becomes a
// finding, never an error.
package assess

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// Kinds beyond policy's: Argo Rollouts, bare Pods and ReplicaSets without a Deployment.
const (
	KindRollout    = "Rollout"
	KindPod        = "Pod"
	KindReplicaSet = "ReplicaSet"
)

// Snapshot is the cluster as listed: one List per kind. Missing lists (forbidden, CRD not
// installed) are named in ListErrors and become findings.
type Snapshot struct {
	Namespaces     []corev1.Namespace
	Nodes          []corev1.Node
	Pods           []corev1.Pod
	Deployments    []appsv1.Deployment
	ReplicaSets    []appsv1.ReplicaSet
	StatefulSets   []appsv1.StatefulSet
	Jobs           []batchv1.Job
	CronJobs       []batchv1.CronJob
	PDBs           []policyv1.PodDisruptionBudget
	PVCs           []corev1.PersistentVolumeClaim
	PVs            []corev1.PersistentVolume
	StorageClasses []storagev1.StorageClass
	// NodePools are karpenter.sh/v1 NodePools; Rollouts are argoproj.io/v1alpha1 Rollouts.
	NodePools []unstructured.Unstructured
	Rollouts  []unstructured.Unstructured
	// ListErrors: kind → why it could not be listed.
	ListErrors map[string]string
}

// Options are the assumptions of an assessment.
type Options struct {
	Now    time.Time
	Prices *PriceTable
	// Scope is how the namespaces were chosen, for the report ("all namespaces", "shop").
	Scope string
	// NoticeBudget is the Spot notice (default 120 s).
	NoticeBudget time.Duration
	// WarmPoolType is the warm pool's instance type (default: the most common Spot node type).
	WarmPoolType string
	// EBSGiBPerNode, RunsPerMonth and ActiveDuration price the warm pool as the simulation does
	// (defaults 40 GiB, 4 reclaims a month, 5 min active each).
	EBSGiBPerNode  int
	RunsPerMonth   float64
	ActiveDuration time.Duration
}

func (o *Options) defaults() {
	if o.NoticeBudget == 0 {
		o.NoticeBudget = policy.DefaultNoticeBudget
	}
	if o.EBSGiBPerNode == 0 {
		o.EBSGiBPerNode = 40
	}
	if o.RunsPerMonth == 0 {
		o.RunsPerMonth = 4
	}
	if o.ActiveDuration == 0 {
		o.ActiveDuration = 5 * time.Minute
	}
	if o.Scope == "" {
		o.Scope = "all namespaces"
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
}

// group is one workload being assembled: its spec, its Pods and, after classification, its
// verdict.
type group struct {
	spec    Spec
	pods    []*corev1.Pod
	verdict Verdict
	out     Workload
}

func (g *group) key() string { return g.spec.Namespace + "/" + g.spec.Kind + "/" + g.spec.Name }

// index holds the snapshot's objects by namespace/name for the owner walk.
type index struct {
	nsLabels   map[string]map[string]string
	rs         map[string]*appsv1.ReplicaSet
	jobs       map[string]*batchv1.Job
	pdbs       map[string][]*policyv1.PodDisruptionBudget
	pvcs       map[string]*corev1.PersistentVolumeClaim
	pvs        map[string]*corev1.PersistentVolume
	noProvisSC map[string]bool
}

func nn(ns, name string) string { return ns + "/" + name }

func buildIndex(s *Snapshot) *index {
	ix := &index{
		nsLabels: map[string]map[string]string{}, rs: map[string]*appsv1.ReplicaSet{}, jobs: map[string]*batchv1.Job{},
		pdbs: map[string][]*policyv1.PodDisruptionBudget{}, pvcs: map[string]*corev1.PersistentVolumeClaim{},
		pvs: map[string]*corev1.PersistentVolume{}, noProvisSC: map[string]bool{},
	}
	for i := range s.Namespaces {
		ix.nsLabels[s.Namespaces[i].Name] = s.Namespaces[i].Labels
	}
	for i := range s.ReplicaSets {
		r := &s.ReplicaSets[i]
		ix.rs[nn(r.Namespace, r.Name)] = r
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		ix.jobs[nn(j.Namespace, j.Name)] = j
	}
	for i := range s.PDBs {
		p := &s.PDBs[i]
		ix.pdbs[p.Namespace] = append(ix.pdbs[p.Namespace], p)
	}
	for i := range s.PVCs {
		p := &s.PVCs[i]
		ix.pvcs[nn(p.Namespace, p.Name)] = p
	}
	for i := range s.PVs {
		ix.pvs[s.PVs[i].Name] = &s.PVs[i]
	}
	for _, sc := range s.StorageClasses {
		if sc.Provisioner == "kubernetes.io/no-provisioner" {
			ix.noProvisSC[sc.Name] = true
		}
	}
	return ix
}

func controllerRef(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

func group0(ix *index, kind, ns, name string, labels map[string]string, tmpl corev1.PodTemplateSpec, replicas *int32, sel *metav1.LabelSelector) *group {
	return &group{spec: Spec{Kind: kind, Namespace: ns, Name: name, Labels: labels, NamespaceLabels: ix.nsLabels[ns],
		Template: tmpl, Replicas: replicas, Selector: sel, PDBs: ix.pdbs[ns]}}
}

// workloads builds one group per workload object and assigns every running Pod to its workload
// by walking controller references through the snapshot (never the API).
func workloads(s *Snapshot, ix *index, cfg policy.Config, now time.Time, findings *[]Finding) (map[string]*group, []Unclassified) {
	b := &groupBuilder{ix: ix, cfg: cfg, now: now, groups: map[string]*group{}, unclassified: map[string]*Unclassified{}}
	b.addDeployments(s.Deployments)
	b.addStatefulSets(s.StatefulSets)
	b.addCronJobs(s.CronJobs)
	b.addJobs(s.Jobs)
	*findings = append(*findings, b.addRollouts(s.Rollouts)...)
	for i := range s.Pods {
		b.addPod(&s.Pods[i])
	}
	if b.daemonPods > 0 {
		*findings = append(*findings, Finding{Code: "daemon-pods", Severity: "info",
			Message: fmt.Sprintf("%d DaemonSet and static Pods are not assessed: they run on every node and leave with it", b.daemonPods)})
	}
	return b.groups, sortedUnclassified(b.unclassified)
}

// groupBuilder assembles the groups of one snapshot: the workload objects first, then their
// Pods.
type groupBuilder struct {
	ix     *index
	cfg    policy.Config
	now    time.Time
	groups map[string]*group
	// unclassified collects the Pods of owners assess does not know, by owner.
	unclassified map[string]*Unclassified
	// daemonPods counts the node-bound Pods (DaemonSets, static Pods), which are not assessed.
	daemonPods int
}

// put adds g unless a group of its key exists, and returns the group of the key.
func (b *groupBuilder) put(g *group) *group {
	if old, ok := b.groups[g.key()]; ok {
		return old
	}
	b.groups[g.key()] = g
	return g
}

// skip: namespaces the policy exempts are not assessed.
func (b *groupBuilder) skip(ns string) bool { return b.cfg.Exempt(ns) }

func (b *groupBuilder) addDeployments(list []appsv1.Deployment) {
	for i := range list {
		d := &list[i]
		if !b.skip(d.Namespace) {
			b.put(group0(b.ix, string(policy.KindDeployment), d.Namespace, d.Name, d.Labels, d.Spec.Template, d.Spec.Replicas, d.Spec.Selector))
		}
	}
}

// addStatefulSets adds the StatefulSets with their volume claim templates; a template of a
// StorageClass without a provisioner is a node-local volume.
func (b *groupBuilder) addStatefulSets(list []appsv1.StatefulSet) {
	for i := range list {
		st := &list[i]
		if b.skip(st.Namespace) {
			continue
		}
		g := b.put(group0(b.ix, string(policy.KindStatefulSet), st.Namespace, st.Name, st.Labels, st.Spec.Template, st.Spec.Replicas, st.Spec.Selector))
		g.spec.VolumeClaimTemplates = len(st.Spec.VolumeClaimTemplates)
		for _, t := range st.Spec.VolumeClaimTemplates {
			if t.Spec.StorageClassName != nil && b.ix.noProvisSC[*t.Spec.StorageClassName] {
				g.spec.LocalVolumes = appendUnique(g.spec.LocalVolumes, t.Name)
			}
		}
	}
}

// addCronJobs adds the CronJobs from their job templates.
func (b *groupBuilder) addCronJobs(list []batchv1.CronJob) {
	for i := range list {
		c := &list[i]
		if b.skip(c.Namespace) {
			continue
		}
		js := c.Spec.JobTemplate.Spec
		g := b.put(group0(b.ix, string(policy.KindCronJob), c.Namespace, c.Name, c.Labels, js.Template, js.Parallelism, nil))
		if js.ActiveDeadlineSeconds != nil {
			g.spec.ActiveDeadline = time.Duration(*js.ActiveDeadlineSeconds) * time.Second
		}
	}
}

// addJobs adds the Jobs that no CronJob owns (those count under their CronJob).
func (b *groupBuilder) addJobs(list []batchv1.Job) {
	for i := range list {
		j := &list[i]
		if b.skip(j.Namespace) {
			continue
		}
		if ref := controllerRef(j.OwnerReferences); ref != nil && ref.Kind == string(policy.KindCronJob) {
			continue
		}
		g := b.put(group0(b.ix, string(policy.KindJob), j.Namespace, j.Name, j.Labels, j.Spec.Template, j.Spec.Parallelism, j.Spec.Selector))
		if j.Spec.ActiveDeadlineSeconds != nil {
			g.spec.ActiveDeadline = time.Duration(*j.Spec.ActiveDeadlineSeconds) * time.Second
		}
	}
}

// addRollouts adds the Argo Rollouts; one whose spec cannot be read is left out with a finding.
func (b *groupBuilder) addRollouts(list []unstructured.Unstructured) []Finding {
	var findings []Finding
	for i := range list {
		r := &list[i]
		if b.skip(r.GetNamespace()) {
			continue
		}
		var spec struct {
			Replicas *int32                 `json:"replicas"`
			Selector *metav1.LabelSelector  `json:"selector"`
			Template corev1.PodTemplateSpec `json:"template"`
		}
		if m, ok := r.Object["spec"].(map[string]any); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
				findings = append(findings, Finding{Code: "bad-object", Severity: "warning",
					Message: fmt.Sprintf("Rollout %s/%s: cannot read its spec (%v); it is left out", r.GetNamespace(), r.GetName(), err)})
				continue
			}
		}
		b.put(group0(b.ix, KindRollout, r.GetNamespace(), r.GetName(), r.GetLabels(), spec.Template, spec.Replicas, spec.Selector))
	}
	return findings
}

// addPod assigns a running Pod to its workload, with its run time (Jobs) and its node-local
// volumes. Terminated Pods, node-bound ones and those of unknown owners are not assigned.
func (b *groupBuilder) addPod(p *corev1.Pod) {
	if b.skip(p.Namespace) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	g := b.podGroup(p)
	if g == nil {
		return
	}
	g.pods = append(g.pods, p)
	if isJobKind(policy.Kind(g.spec.Kind)) && p.Status.StartTime != nil && p.Status.Phase == corev1.PodRunning {
		g.spec.LongestRun = max(g.spec.LongestRun, b.now.Sub(p.Status.StartTime.Time))
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && b.ix.localClaim(p.Namespace, v.PersistentVolumeClaim.ClaimName) {
			g.spec.LocalVolumes = appendUnique(g.spec.LocalVolumes, v.Name)
		}
	}
}

// podGroup finds the group of a Pod by its controller reference, making one when the owner is
// not listed (deleted meanwhile, or its list failed): a bare Pod is its own workload. It returns
// nil for node-bound Pods (counted in daemonPods) and Pods of owners assess does not know
// (recorded as unclassified).
func (b *groupBuilder) podGroup(p *corev1.Pod) *group {
	fromPod := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations}, Spec: p.Spec}
	ref := controllerRef(p.OwnerReferences)
	var g *group
	switch {
	case ref == nil:
		one := int32(1)
		return b.put(group0(b.ix, KindPod, p.Namespace, p.Name, p.Labels, fromPod, &one, nil))
	case ref.Kind == KindReplicaSet:
		var known bool
		if g, known = b.replicaSetGroup(p.Namespace, ref.Name); !known {
			return nil
		}
	case ref.Kind == string(policy.KindStatefulSet):
		g = b.groups[p.Namespace+"/StatefulSet/"+ref.Name]
	case ref.Kind == string(policy.KindJob):
		g = b.jobGroup(p.Namespace, ref.Name)
	case ref.Kind == "DaemonSet" || ref.Kind == "Node":
		b.daemonPods++ // node-bound: they come and go with their node
		return nil
	default:
		unclassifiedPod(b.unclassified, p.Namespace, ref.Kind, ref.Name)
		return nil
	}
	if g == nil { // the owner was not listed: a group of the owner reference, shaped by the Pod
		g = b.put(group0(b.ix, ref.Kind, p.Namespace, ref.Name, nil, fromPod, nil, nil))
	}
	return g
}

// replicaSetGroup is the group of a ReplicaSet's Pods: its Deployment's or Rollout's, or the
// ReplicaSet's own when nothing controls it. nil when the ReplicaSet or its owner is not listed;
// known is false when an owner of another kind controls it (the Pod is then unclassified).
func (b *groupBuilder) replicaSetGroup(ns, name string) (g *group, known bool) {
	rs := b.ix.rs[nn(ns, name)]
	if rs == nil {
		return nil, true
	}
	up := controllerRef(rs.OwnerReferences)
	switch {
	case up == nil:
		return b.put(group0(b.ix, KindReplicaSet, ns, rs.Name, rs.Labels, rs.Spec.Template, rs.Spec.Replicas, rs.Spec.Selector)), true
	case up.Kind == string(policy.KindDeployment) || up.Kind == KindRollout:
		return b.groups[ns+"/"+up.Kind+"/"+up.Name], true
	default:
		unclassifiedPod(b.unclassified, ns, up.Kind, up.Name)
		return nil, false
	}
}

// jobGroup is the group of a Job's Pods: its CronJob's when one owns it, else the Job's; nil
// when the Job or its CronJob is not listed.
func (b *groupBuilder) jobGroup(ns, name string) *group {
	job := b.ix.jobs[nn(ns, name)]
	if job == nil {
		return nil
	}
	if up := controllerRef(job.OwnerReferences); up != nil && up.Kind == string(policy.KindCronJob) {
		return b.groups[ns+"/CronJob/"+up.Name]
	}
	return b.groups[ns+"/Job/"+job.Name]
}

// sortedUnclassified lists the unclassified owners by namespace, kind and name.
func sortedUnclassified(m map[string]*Unclassified) []Unclassified {
	var out []Unclassified
	for _, u := range m {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].OwnerKind+"/"+out[i].OwnerName < out[j].Namespace+"/"+out[j].OwnerKind+"/"+out[j].OwnerName
	})
	return out
}

func unclassifiedPod(m map[string]*Unclassified, ns, kind, name string) {
	k := ns + "/" + kind + "/" + name
	if m[k] == nil {
		m[k] = &Unclassified{Namespace: ns, OwnerKind: kind, OwnerName: name,
			Reason: "owned by a " + kind + ", a controller assess does not know: judge its Spot fit by hand"}
	}
	m[k].Pods++
}

// localClaim reports whether a claim's data lives on one node.
func (ix *index) localClaim(ns, claim string) bool {
	pvc := ix.pvcs[nn(ns, claim)]
	if pvc == nil {
		return false
	}
	if pvc.Spec.StorageClassName != nil && ix.noProvisSC[*pvc.Spec.StorageClassName] {
		return true
	}
	pv := ix.pvs[pvc.Spec.VolumeName]
	return pv != nil && (pv.Spec.Local != nil || pv.Spec.HostPath != nil)
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// isProtectedPod: the webhook labels every Pod it protects.
func isProtectedPod(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelProtected] == "true" }

func joinSorted(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

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
	groups := map[string]*group{}
	put := func(g *group) *group {
		if old, ok := groups[g.key()]; ok {
			return old
		}
		groups[g.key()] = g
		return g
	}
	skip := func(ns string) bool { return cfg.Exempt(ns) }
	for i := range s.Deployments {
		d := &s.Deployments[i]
		if !skip(d.Namespace) {
			put(group0(ix, string(policy.KindDeployment), d.Namespace, d.Name, d.Labels, d.Spec.Template, d.Spec.Replicas, d.Spec.Selector))
		}
	}
	for i := range s.StatefulSets {
		st := &s.StatefulSets[i]
		if skip(st.Namespace) {
			continue
		}
		g := put(group0(ix, string(policy.KindStatefulSet), st.Namespace, st.Name, st.Labels, st.Spec.Template, st.Spec.Replicas, st.Spec.Selector))
		g.spec.VolumeClaimTemplates = len(st.Spec.VolumeClaimTemplates)
		for _, t := range st.Spec.VolumeClaimTemplates {
			if t.Spec.StorageClassName != nil && ix.noProvisSC[*t.Spec.StorageClassName] {
				g.spec.LocalVolumes = appendUnique(g.spec.LocalVolumes, t.Name)
			}
		}
	}
	for i := range s.CronJobs {
		c := &s.CronJobs[i]
		if skip(c.Namespace) {
			continue
		}
		js := c.Spec.JobTemplate.Spec
		g := put(group0(ix, string(policy.KindCronJob), c.Namespace, c.Name, c.Labels, js.Template, js.Parallelism, nil))
		if js.ActiveDeadlineSeconds != nil {
			g.spec.ActiveDeadline = time.Duration(*js.ActiveDeadlineSeconds) * time.Second
		}
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if skip(j.Namespace) {
			continue
		}
		if ref := controllerRef(j.OwnerReferences); ref != nil && ref.Kind == string(policy.KindCronJob) {
			continue // its Pods count under the CronJob
		}
		g := put(group0(ix, string(policy.KindJob), j.Namespace, j.Name, j.Labels, j.Spec.Template, j.Spec.Parallelism, j.Spec.Selector))
		if j.Spec.ActiveDeadlineSeconds != nil {
			g.spec.ActiveDeadline = time.Duration(*j.Spec.ActiveDeadlineSeconds) * time.Second
		}
	}
	for i := range s.Rollouts {
		r := &s.Rollouts[i]
		if skip(r.GetNamespace()) {
			continue
		}
		var spec struct {
			Replicas *int32                 `json:"replicas"`
			Selector *metav1.LabelSelector  `json:"selector"`
			Template corev1.PodTemplateSpec `json:"template"`
		}
		if m, ok := r.Object["spec"].(map[string]any); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
				*findings = append(*findings, Finding{Code: "bad-object", Severity: "warning",
					Message: fmt.Sprintf("Rollout %s/%s: cannot read its spec (%v); it is left out", r.GetNamespace(), r.GetName(), err)})
				continue
			}
		}
		put(group0(ix, KindRollout, r.GetNamespace(), r.GetName(), r.GetLabels(), spec.Template, spec.Replicas, spec.Selector))
	}

	unclassified := map[string]*Unclassified{}
	daemonPods := 0
	for i := range s.Pods {
		p := &s.Pods[i]
		if skip(p.Namespace) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		fromPod := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations}, Spec: p.Spec}
		var g *group
		ref := controllerRef(p.OwnerReferences)
		switch {
		case ref == nil:
			one := int32(1)
			g = put(group0(ix, KindPod, p.Namespace, p.Name, p.Labels, fromPod, &one, nil))
		case ref.Kind == "ReplicaSet":
			rs := ix.rs[nn(p.Namespace, ref.Name)]
			var up *metav1.OwnerReference
			if rs != nil {
				up = controllerRef(rs.OwnerReferences)
			}
			switch {
			case up != nil && (up.Kind == string(policy.KindDeployment) || up.Kind == KindRollout):
				g = groups[p.Namespace+"/"+up.Kind+"/"+up.Name]
			case up != nil:
				unclassifiedPod(unclassified, p.Namespace, up.Kind, up.Name)
				continue
			case rs != nil:
				g = put(group0(ix, KindReplicaSet, p.Namespace, rs.Name, rs.Labels, rs.Spec.Template, rs.Spec.Replicas, rs.Spec.Selector))
			default:
				g = put(group0(ix, KindReplicaSet, p.Namespace, ref.Name, nil, fromPod, nil, nil))
			}
		case ref.Kind == string(policy.KindStatefulSet):
			g = groups[p.Namespace+"/StatefulSet/"+ref.Name]
		case ref.Kind == string(policy.KindJob):
			job := ix.jobs[nn(p.Namespace, ref.Name)]
			if job != nil {
				if up := controllerRef(job.OwnerReferences); up != nil && up.Kind == string(policy.KindCronJob) {
					g = groups[p.Namespace+"/CronJob/"+up.Name]
				} else {
					g = groups[p.Namespace+"/Job/"+job.Name]
				}
			} else {
				g = put(group0(ix, string(policy.KindJob), p.Namespace, ref.Name, nil, fromPod, nil, nil))
			}
		case ref.Kind == "DaemonSet" || ref.Kind == "Node":
			daemonPods++ // node-bound: they come and go with their node
			continue
		default:
			unclassifiedPod(unclassified, p.Namespace, ref.Kind, ref.Name)
			continue
		}
		if g == nil { // the owner was not listed (deleted meanwhile, or its list failed)
			g = put(group0(ix, ref.Kind, p.Namespace, ref.Name, nil, fromPod, nil, nil))
		}
		g.pods = append(g.pods, p)
		if g.spec.Kind == string(policy.KindJob) || g.spec.Kind == string(policy.KindCronJob) {
			if p.Status.StartTime != nil && p.Status.Phase == corev1.PodRunning {
				g.spec.LongestRun = max(g.spec.LongestRun, now.Sub(p.Status.StartTime.Time))
			}
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			if ix.localClaim(p.Namespace, v.PersistentVolumeClaim.ClaimName) {
				g.spec.LocalVolumes = appendUnique(g.spec.LocalVolumes, v.Name)
			}
		}
	}
	var out []Unclassified
	for _, u := range unclassified {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].OwnerKind+"/"+out[i].OwnerName < out[j].Namespace+"/"+out[j].OwnerKind+"/"+out[j].OwnerName
	})
	if daemonPods > 0 {
		*findings = append(*findings, Finding{Code: "daemon-pods", Severity: "info",
			Message: fmt.Sprintf("%d DaemonSet and static Pods are not assessed: they run on every node and leave with it", daemonPods)})
	}
	return groups, out
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

// Package assesstest holds the fixture fleet of `lifeboat assess` tests: one workload per
// class and per reason, Karpenter-labelled nodes of one NodePool (3 instance types × 1 zone)
// and the bad input assess must survive. Unit tests turn it into a Snapshot; the integration
// test creates it on the real local control plane. Test-only: no shipped binary imports it.
package assesstest

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// Zone is the NodePool's only zone.
const Zone = "us-east-1a"

// NodePoolYAML is a Karpenter NodePool that allows Spot in 3 instance types × 1 zone and
// consolidates only empty nodes.
var NodePoolYAML = localcluster.NodePool{Name: "spot-3x1",
	InstanceTypes: []string{"c5.large", "m5.large", "r5.large"}, Zones: []string{Zone}}.YAML()

// Fleet is every object of the fixture, in creation order within each kind. Owners come before
// their dependents; OwnerRef fills UIDs from what was created (the API server assigns them).
type Fleet struct {
	Namespaces     []*corev1.Namespace
	Nodes          []*corev1.Node
	StorageClasses []*storagev1.StorageClass
	PVs            []*corev1.PersistentVolume
	PVCs           []*corev1.PersistentVolumeClaim
	PDBs           []*policyv1.PodDisruptionBudget
	Deployments    []*appsv1.Deployment
	StatefulSets   []*appsv1.StatefulSet
	CronJobs       []*batchv1.CronJob
	Jobs           []*batchv1.Job
	ReplicaSets    []*appsv1.ReplicaSet
	Pods           []*corev1.Pod
	NodePool       *unstructured.Unstructured
}

// Owner names a Pod's or ReplicaSet's controller; UIDs are resolved at creation.
type Owner struct {
	APIVersion, Kind, Name string
}

// OwnerAnnotation records the intended owner on a fixture object until its UID is known.
const OwnerAnnotation = "assesstest/owner"

func ptr[T any](v T) *T { return &v }

func requests(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

func node(name, typ, capacity string, cpu, mem string) *corev1.Node {
	labels := map[string]string{"kubernetes.io/os": "linux"}
	if typ != "" {
		labels["node.kubernetes.io/instance-type"] = typ
	}
	labels["topology.kubernetes.io/zone"] = Zone
	if capacity != "" {
		labels["karpenter.sh/capacity-type"] = capacity
		labels["karpenter.sh/nodepool"] = "spot-3x1"
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse("29")}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res}}
}

type podOpts struct {
	image   string
	req     *corev1.ResourceRequirements
	grace   *int64
	volumes []corev1.Volume
	annot   map[string]string
	nodeSel map[string]string
	env     []corev1.EnvVar
	labels  map[string]string
	restart corev1.RestartPolicy
}

func template(app string, o podOpts) corev1.PodTemplateSpec {
	img := o.image
	if img == "" {
		img = "registry.example/" + app + ":1"
	}
	req := requests("500m", "512Mi")
	if o.req != nil {
		req = *o.req
	}
	labels := map[string]string{"app": app}
	for k, v := range o.labels {
		labels[k] = v
	}
	restart := o.restart
	if restart == "" {
		restart = corev1.RestartPolicyAlways
	}
	c := corev1.Container{Name: "main", Image: img, Resources: req, Env: o.env}
	for _, v := range o.volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/data/" + v.Name})
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: o.annot},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: o.grace,
			Volumes: o.volumes, NodeSelector: o.nodeSel, RestartPolicy: restart},
	}
}

func pdb(ns, name, app string, maxUnavailable intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
}

// NewFleet builds the fixture. docs/ASSESS.md's example output and the golden JSON of the
// integration test are this fleet's assessment.
func NewFleet() *Fleet {
	f := &Fleet{Namespaces: fleetNamespaces(), Nodes: fleetNodes()}
	f.addLocalStorage()
	f.addDeployments()
	f.addStatefulSets()
	f.addCronJob()
	f.addJobs()
	f.addStrays()
	f.NodePool = &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(NodePoolYAML), &f.NodePool.Object); err != nil {
		panic(err)
	}
	return f
}

// fleetNamespaces: shop is protected, batch is not.
func fleetNamespaces() []*corev1.Namespace {
	return []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"lifeboat.dev/spot": "protected"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "batch"}},
	}
}

// fleetNodes: Spot and On-Demand nodes of the NodePool, and two that cannot be priced.
func fleetNodes() []*corev1.Node {
	return []*corev1.Node{
		node("spot-m5-1", "m5.large", "spot", "2", "8Gi"),
		node("spot-m5-2", "m5.large", "spot", "2", "8Gi"),
		node("spot-m5-3", "m5.large", "spot", "2", "8Gi"),
		node("spot-c5-1", "c5.large", "spot", "2", "4Gi"),
		node("od-m5-1", "m5.large", "on-demand", "2", "8Gi"),
		node("od-r5-1", "r5.large", "on-demand", "2", "16Gi"),
		node("no-type", "", "", "2", "8Gi"),              // bad input: no instance-type label
		node("odd-type", "x9.weird", "spot", "2", "8Gi"), // bad input: not in the price table
	}
}

// addLocalStorage adds a StorageClass without a provisioner and a local PersistentVolume bound
// to the claim shop/local-data.
func (f *Fleet) addLocalStorage() {
	f.StorageClasses = []*storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: "local-storage"}, Provisioner: "kubernetes.io/no-provisioner"}}
	f.PVs = []*corev1.PersistentVolume{{
		ObjectMeta: metav1.ObjectMeta{Name: "local-pv-1"},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: "local-storage",
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/ssd1"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"od-m5-1"}}}}}}}},
	}}
	f.PVCs = []*corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "local-data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr("local-storage"), VolumeName: "local-pv-1",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}},
	}}
}

// addDeployments adds the shop Deployments, one per reason, each with its PDB (when it has
// one), its ReplicaSet and its Pods on the given nodes; then a second PDB over double-pdb.
func (f *Fleet) addDeployments() {
	pct20, zero, one := intstr.FromString("20%"), intstr.FromInt32(0), intstr.FromInt32(1)
	type dep struct {
		name     string
		replicas int32
		pdb      *intstr.IntOrString
		o        podOpts
		nodes    []string
	}
	deps := []dep{
		{"web", 3, &pct20, podOpts{}, []string{"spot-m5-1", "spot-m5-1", "spot-m5-2"}},
		{"api-nopdb", 2, nil, podOpts{}, []string{"no-type", "odd-type"}},
		{"frontend-zero", 2, &zero, podOpts{}, []string{"spot-m5-2", "spot-m5-3"}},
		{"single", 1, &one, podOpts{}, []string{"spot-m5-3"}},
		{"slow-stop", 2, &pct20, podOpts{grace: ptr(int64(200))}, []string{"od-m5-1", "od-m5-1"}},
		{"cache-scratch", 2, &pct20, podOpts{volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}, []string{"spot-c5-1", "spot-c5-1"}},
		{"tmp-declared", 2, &pct20, podOpts{volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			annot: map[string]string{assess.AnnotationSafeToEvictLocalVolumes: "tmp"}}, []string{"spot-m5-2", "spot-m5-3"}},
		{"node-logs", 2, &pct20, podOpts{volumes: []corev1.Volume{{Name: "varlog", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}}}}, []string{"od-m5-1", "od-r5-1"}},
		{"pinned", 2, &pct20, podOpts{nodeSel: map[string]string{"karpenter.sh/capacity-type": "on-demand"}}, []string{"od-m5-1", "od-r5-1"}},
		{"no-consolidate", 2, &pct20, podOpts{annot: map[string]string{assess.AnnotationDoNotDisrupt: "true"}}, []string{"spot-m5-1", "spot-m5-2"}},
		{"norequests", 2, &pct20, podOpts{req: &corev1.ResourceRequirements{}}, []string{"spot-m5-3", "spot-m5-3"}},
		{"reports-db", 2, &pct20, podOpts{image: "docker.io/library/mysql:8.4"}, []string{"od-r5-1", "od-r5-1"}},
		{"double-pdb", 2, &pct20, podOpts{}, []string{"spot-c5-1", "od-m5-1"}},
		{"local-data", 2, &pct20, podOpts{volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "local-data"}}}}}, []string{"od-m5-1"}},
	}
	for _, d := range deps {
		tmpl := template(d.name, d.o)
		f.Deployments = append(f.Deployments, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: d.name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr(d.replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": d.name}}, Template: tmpl}})
		if d.pdb != nil {
			f.PDBs = append(f.PDBs, pdb("shop", d.name, d.name, *d.pdb))
		}
		rs := d.name + "-5d9f8"
		f.ReplicaSets = append(f.ReplicaSets, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: rs, Annotations: map[string]string{OwnerAnnotation: "apps/v1/Deployment/" + d.name}},
			Spec:       appsv1.ReplicaSetSpec{Replicas: ptr(d.replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": d.name}}, Template: tmpl}})
		for i, n := range d.nodes {
			f.Pods = append(f.Pods, pod("shop", fmt.Sprintf("%s-%d", rs, i), n, tmpl, "apps/v1/ReplicaSet/"+rs))
		}
	}
	f.PDBs = append(f.PDBs, pdb("shop", "double-pdb-extra", "double-pdb", one)) // a second PDB over the same Pods
}

// addStatefulSets adds the shop StatefulSets with volume claim templates (a quorum-sized
// database and a worker), their PDBs and Pods.
func (f *Fleet) addStatefulSets() {
	type sts struct {
		name     string
		replicas int32
		o        podOpts
		nodes    []string
	}
	for _, s := range []sts{
		{"orders-db", 3, podOpts{image: "postgres:16"}, []string{"od-r5-1", "od-m5-1", "od-r5-1"}},
		{"queue-worker", 2, podOpts{}, []string{"spot-m5-1", "spot-m5-2"}},
	} {
		tmpl := template(s.name, s.o)
		f.StatefulSets = append(f.StatefulSets, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: s.name},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr(s.replicas), ServiceName: s.name, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s.name}}, Template: tmpl,
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}}}}}})
		f.PDBs = append(f.PDBs, pdb("shop", s.name, s.name, intstr.FromInt32(1)))
		for i, n := range s.nodes {
			f.Pods = append(f.Pods, pod("shop", fmt.Sprintf("%s-%d", s.name, i), n, tmpl, "apps/v1/StatefulSet/"+s.name))
		}
	}
}

// addCronJob adds the batch CronJob with one Job it created and that Job's Pod. batch is not
// protected; it holds the Jobs, the CronJob, a bare Pod, an orphan ReplicaSet, a custom owner.
func (f *Fleet) addCronJob() {
	nightly := template("nightly-report", podOpts{restart: corev1.RestartPolicyNever})
	f.CronJobs = []*batchv1.CronJob{{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "nightly-report"},
		Spec: batchv1.CronJobSpec{Schedule: "0 2 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: nightly}}}}}
	f.Jobs = append(f.Jobs, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "nightly-report-29012345",
		Annotations: map[string]string{OwnerAnnotation: "batch/v1/CronJob/nightly-report"}},
		Spec: batchv1.JobSpec{Template: nightly}})
	f.Pods = append(f.Pods, pod("batch", "nightly-report-29012345-x1", "spot-c5-1", nightly, "batch/v1/Job/nightly-report-29012345"))
}

// addJobs adds the batch Jobs: a long one without checkpoints, a long resumable one, a short
// one; each with one Pod.
func (f *Fleet) addJobs() {
	for _, j := range []struct {
		name     string
		deadline *int64
		o        podOpts
		node     string
	}{
		{"train-model", ptr(int64(7200)), podOpts{restart: corev1.RestartPolicyNever}, "spot-m5-1"},
		{"resumable-train", ptr(int64(7200)), podOpts{restart: corev1.RestartPolicyNever, env: []corev1.EnvVar{{Name: "CHECKPOINT_DIR", Value: "s3://bucket/ckpt"}}}, "spot-m5-2"},
		{"ci-runner", nil, podOpts{restart: corev1.RestartPolicyNever}, "spot-c5-1"},
	} {
		tmpl := template(j.name, j.o)
		f.Jobs = append(f.Jobs, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: j.name},
			Spec: batchv1.JobSpec{ActiveDeadlineSeconds: j.deadline, Template: tmpl}})
		f.Pods = append(f.Pods, pod("batch", j.name+"-a1", j.node, tmpl, "batch/v1/Job/"+j.name))
	}
}

// addStrays adds what has no assessable workload object: an orphan ReplicaSet, a bare Pod, a
// Pod of a custom owner, a DaemonSet Pod and a Pod of an exempt namespace.
func (f *Fleet) addStrays() {
	orphan := template("legacy-rs", podOpts{})
	f.ReplicaSets = append(f.ReplicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "legacy-rs"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "legacy-rs"}}, Template: orphan}})
	f.Pods = append(f.Pods, pod("batch", "legacy-rs-q7", "spot-m5-3", orphan, "apps/v1/ReplicaSet/legacy-rs"))
	f.Pods = append(f.Pods, pod("batch", "debug-shell", "spot-m5-2", template("debug-shell", podOpts{}), ""))
	f.Pods = append(f.Pods, pod("batch", "wf-step-1", "spot-c5-1", template("wf", podOpts{restart: corev1.RestartPolicyNever}), "argoproj.io/v1alpha1/Workflow/etl"))
	f.Pods = append(f.Pods, pod("batch", "node-exporter-abc", "spot-m5-1", template("node-exporter", podOpts{}), "apps/v1/DaemonSet/node-exporter"))
	f.Pods = append(f.Pods, pod("kube-system", "coredns-1", "od-m5-1", template("coredns", podOpts{}), ""))
}

func pod(ns, name, nodeName string, tmpl corev1.PodTemplateSpec, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: tmpl.Labels, Annotations: map[string]string{}},
		Spec: *tmpl.Spec.DeepCopy()}
	for k, v := range tmpl.Annotations {
		p.Annotations[k] = v
	}
	p.Spec.NodeName = nodeName
	if owner != "" {
		p.Annotations[OwnerAnnotation] = owner
	}
	return p
}

// ParseOwner splits an OwnerAnnotation value "group/version/Kind/name" (core: "v1/Kind/name").
func ParseOwner(v string) (apiVersion, kind, name string, ok bool) {
	var parts []string
	start := 0
	for i := 0; i < len(v); i++ {
		if v[i] == '/' {
			parts = append(parts, v[start:i])
			start = i + 1
		}
	}
	parts = append(parts, v[start:])
	switch len(parts) {
	case 3:
		return parts[0], parts[1], parts[2], true
	case 4:
		return parts[0] + "/" + parts[1], parts[2], parts[3], true
	}
	return "", "", "", false
}

// SetOwner replaces the owner annotation with a controller reference of the given UID.
func SetOwner(m *metav1.ObjectMeta, uid types.UID) {
	v, ok := m.Annotations[OwnerAnnotation]
	if !ok {
		return
	}
	delete(m.Annotations, OwnerAnnotation)
	av, kind, name, ok := ParseOwner(v)
	if !ok {
		return
	}
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: av, Kind: kind, Name: name, UID: uid, Controller: ptr(true)}}
}

// Snapshot is the fleet as assess's Lists would return it, with made-up UIDs.
func (f *Fleet) Snapshot() *assess.Snapshot {
	uid := func(kind, ns, name string) types.UID { return types.UID(kind + "-" + ns + "-" + name) }
	own := func(m *metav1.ObjectMeta) {
		if v, ok := m.Annotations[OwnerAnnotation]; ok {
			_, kind, name, _ := ParseOwner(v)
			SetOwner(m, uid(kind, m.Namespace, name))
		}
	}
	return &assess.Snapshot{
		ListErrors:     map[string]string{},
		Namespaces:     copies(f.Namespaces, (*corev1.Namespace).DeepCopy, nil),
		Nodes:          copies(f.Nodes, (*corev1.Node).DeepCopy, nil),
		StorageClasses: copies(f.StorageClasses, (*storagev1.StorageClass).DeepCopy, nil),
		PVs:            copies(f.PVs, (*corev1.PersistentVolume).DeepCopy, nil),
		PVCs:           copies(f.PVCs, (*corev1.PersistentVolumeClaim).DeepCopy, nil),
		PDBs:           copies(f.PDBs, (*policyv1.PodDisruptionBudget).DeepCopy, nil),
		Deployments:    copies(f.Deployments, (*appsv1.Deployment).DeepCopy, nil),
		StatefulSets:   copies(f.StatefulSets, (*appsv1.StatefulSet).DeepCopy, nil),
		CronJobs:       copies(f.CronJobs, (*batchv1.CronJob).DeepCopy, nil),
		Jobs:           copies(f.Jobs, (*batchv1.Job).DeepCopy, func(j *batchv1.Job) { own(&j.ObjectMeta) }),
		ReplicaSets:    copies(f.ReplicaSets, (*appsv1.ReplicaSet).DeepCopy, func(r *appsv1.ReplicaSet) { own(&r.ObjectMeta) }),
		Pods:           copies(f.Pods, (*corev1.Pod).DeepCopy, func(p *corev1.Pod) { own(&p.ObjectMeta) }),
		NodePools:      []unstructured.Unstructured{*f.NodePool.DeepCopy()},
	}
}

// copies deep-copies each object and applies fix (when not nil) to the copy.
func copies[T any](list []*T, deepCopy func(*T) *T, fix func(*T)) []T {
	var out []T
	for _, o := range list {
		c := deepCopy(o)
		if fix != nil {
			fix(c)
		}
		out = append(out, *c)
	}
	return out
}

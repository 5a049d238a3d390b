// Package sim is the spot-market simulation: it runs a scenario on the real local control
// plane (pkg/localcluster) once per mode — Karpenter alone, with Lifeboat, with overprovisioning —
// samples availability every second and reports the modes side by side (pkg/sim/report).
package sim

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// WarmPoolName is the WarmPool the simulation creates in lifeboat mode.
const WarmPoolName = "sim"

// LabelWorkload marks the Pods of a scenario workload with its name.
const LabelWorkload = "sim.lifeboat.dev/workload"

// podWorkloadKey is the report's key (workloadKey) of a scenario Pod's workload: "<namespace>/<name>".
func podWorkloadKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Labels[LabelWorkload] }

// instanceTypes converts the scenario's catalog: every type in every zone, Spot and On-Demand.
func instanceTypes(s *scenario.Scenario) []localcluster.InstanceType {
	var out []localcluster.InstanceType
	for _, it := range s.Cluster.InstanceTypes {
		if it.PoolOnly {
			continue
		}
		pods := it.Pods
		if pods == 0 {
			pods = 29
		}
		t := localcluster.InstanceType{Name: it.Name, CPU: it.CPU, Memory: it.Memory, Pods: fmt.Sprint(pods)}
		for _, z := range s.Cluster.Zones {
			t.Offerings = append(t.Offerings,
				localcluster.Offering{Zone: z, CapacityType: "spot", Price: it.OnDemandUSD * s.Cluster.SpotDiscount * zoneFactor(s, z), Available: true},
				localcluster.Offering{Zone: z, CapacityType: "on-demand", Price: it.OnDemandUSD, Available: true})
		}
		out = append(out, t)
	}
	return out
}

func zoneFactor(s *scenario.Scenario, zone string) float64 {
	if f, ok := s.Cluster.ZoneSpotFactor[zone]; ok {
		return f
	}
	return 1
}

// onDemandPrice is the hourly On-Demand price of an instance type (0 when unknown).
func onDemandPrice(s *scenario.Scenario, instanceType string) float64 {
	for _, it := range s.Cluster.InstanceTypes {
		if it.Name == instanceType {
			return it.OnDemandUSD
		}
	}
	return 0
}

// nodePrice is a running node's hourly price and its On-Demand price: Karpenter's Spot nodes
// at the scenario's Spot price in their zone, On-Demand nodes and running lifeboat nodes
// (warming, active, draining) at On-Demand. Hibernated standby nodes bill only EBS and are
// left out (ok false), as are nodes of unknown types.
func nodePrice(s *scenario.Scenario) func(n *corev1.Node) (now, onDemand float64, ok bool) {
	return func(n *corev1.Node) (float64, float64, bool) {
		od := onDemandPrice(s, n.Labels[v1alpha1.LabelInstanceType])
		if od == 0 {
			return 0, 0, false
		}
		if n.Labels[v1alpha1.LabelPool] != "" {
			if n.Labels[v1alpha1.LabelState] == string(v1alpha1.NodeStateStandby) {
				return 0, 0, false
			}
			return od, od, true
		}
		if n.Labels[v1alpha1.LabelCapacityType] == "spot" {
			return od * s.Cluster.SpotDiscount * zoneFactor(s, n.Labels[v1alpha1.LabelZone]), od, true
		}
		return od, od, true
	}
}

// clusterOptions derives the local control plane's timing model from the scenario: Karpenter
// nodes boot in karpenterBoot; pool nodes resume in lifeboatResume (the AWS emulator applies
// that delay). Pods start from cached images on pool nodes and on any node an earlier Pod
// brought their images to, and pull them cold elsewhere; a seat takes the pull only.
func clusterOptions(s *scenario.Scenario) localcluster.Options {
	t := s.Timing
	return localcluster.Options{
		Karpenter:     true,
		InstanceTypes: instanceTypes(s),
		// Lifeboat mode installs the chart: the apiserver reaches the local webhook process
		// through the chart's Service (pkg/localcluster/release). Set in both modes alike.
		ExtraAPIServerFlags: []string{"--enable-aggregator-routing=true"},
		DelaySeed:           s.Seed,
		NodeBootDelays: []localcluster.DelayRule{
			{Selector: map[string]string{karpenterNodePoolLabel: "default"}, Delay: t.KarpenterBoot.Mean.Duration, Jitter: t.KarpenterBoot.Jitter.Duration},
		},
		PodStartDelays: []localcluster.DelayRule{
			// A handoff seat is a placeholder: Ready once its node has the images it keeps
			// room for (its image volumes); it has no application to start.
			{PodSelector: map[string]string{v1alpha1.LabelSeat: "true"}, ImagesCached: true,
				Delay: t.ImagePullCached.Mean.Duration, Jitter: t.ImagePullCached.Jitter.Duration},
			{PodSelector: map[string]string{v1alpha1.LabelSeat: "true"},
				Delay: t.ImagePullCold.Mean.Duration, Jitter: t.ImagePullCold.Jitter.Duration},
			{Selector: map[string]string{v1alpha1.LabelPool: WarmPoolName}, Delay: t.ImagePullCached.Mean.Duration + t.AppStart.Mean.Duration,
				Jitter: t.ImagePullCached.Jitter.Duration + t.AppStart.Jitter.Duration},
			// Any node that has the Pod's images: an earlier replica (or a handoff seat) pulled them.
			{ImagesCached: true, Delay: t.ImagePullCached.Mean.Duration + t.AppStart.Mean.Duration,
				Jitter: t.ImagePullCached.Jitter.Duration + t.AppStart.Jitter.Duration},
			{Selector: map[string]string{}, Delay: t.ImagePullCold.Mean.Duration + t.AppStart.Mean.Duration,
				Jitter: t.ImagePullCold.Jitter.Duration + t.AppStart.Jitter.Duration},
		},
	}
}

// objects renders a workload as the Kubernetes objects to create: the workload and its PDB.
// In lifeboat mode protection comes from the namespace/workload labels the webhook reads.
func objects(w scenario.Workload, protect bool) (workload any, pdb *policyv1.PodDisruptionBudget) {
	labels := map[string]string{LabelWorkload: w.Name}
	wlLabels := map[string]string{LabelWorkload: w.Name, v1alpha1.LabelTier: w.Tier}
	if protect && w.Protected {
		wlLabels[v1alpha1.LabelSpot] = v1alpha1.SpotProtected
	}
	podLabels := map[string]string{LabelWorkload: w.Name, v1alpha1.LabelTier: w.Tier}
	spec := corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To(int64(w.GracePeriod.Seconds())),
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.example/" + w.Name + ":1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(w.CPU),
				corev1.ResourceMemory: resource.MustParse(w.Memory),
			}},
		}},
	}
	// capacityType pins the workload the way its owner would without Lifeboat. A workload that
	// Lifeboat protects gets its placement from its tier instead (the webhook writes capacity-type
	// affinity that also admits pool nodes); a nodeSelector would be ANDed with it and keep the
	// Pods off the lifeboat nodes, which carry no karpenter.sh/ labels.
	if w.CapacityType != "" && !(protect && w.Protected) {
		spec.NodeSelector = map[string]string{v1alpha1.LabelCapacityType: w.CapacityType}
	}
	// Spread replicas over nodes as production manifests do, so one reclaim takes a fraction.
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 2, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: spec}
	meta := metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: wlLabels}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	switch w.Kind {
	case "StatefulSet":
		workload = &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(w.Replicas), Selector: sel, Template: tmpl, ServiceName: w.Name,
			PodManagementPolicy: appsv1.ParallelPodManagement}}
	case "Job":
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		if w.RunFor.Duration > 0 {
			tmpl.Annotations = map[string]string{localcluster.AnnotationRunFor: w.RunFor.String()}
		}
		// A Job on Spot ignores disruptions (evictions, reclaims) in its failure count, so they
		// do not use up backoffLimit. They still delay its replacement Pods: the Job controller
		// counts every failed Pod in its re-creation back-off (10 s, doubling per failure since
		// the last success, to 10 min; kubernetes#119434, #130881) — which is why a lifeboat's
		// handoff leaves Job Pods to finish instead of evicting them a second time.
		workload = &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
			Parallelism: ptr.To(w.Replicas), Completions: ptr.To(w.Replicas), Template: tmpl,
			BackoffLimit: ptr.To[int32](6),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}}}}
	default:
		workload = &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.Replicas), Selector: sel, Template: tmpl}}
	}
	if w.HasPDB() {
		// The value as written: intstr.Parse makes "2" an int and "80%" a percentage, as the
		// API server reads them from a manifest. Validation allows only one of the two.
		spec := policyv1.PodDisruptionBudgetSpec{Selector: sel}
		if w.PDBMaxUnavailable != "" {
			spec.MaxUnavailable = ptr.To(intstr.Parse(w.PDBMaxUnavailable))
		} else {
			spec.MinAvailable = ptr.To(intstr.Parse(w.PDBMinAvailable))
		}
		pdb = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace}, Spec: spec}
	}
	return workload, pdb
}

// pdbFloor is the ready count the workload's PDB guarantees (0 without PDB): see
// scenario.Workload.PDBFloor.
func pdbFloor(w scenario.Workload) int32 { return w.PDBFloor() }

func workloadKey(w scenario.Workload) string { return w.Namespace + "/" + w.Name }

// workloadKeys are the keys of the scenario's workloads, in scenario order.
func workloadKeys(s *scenario.Scenario) []string {
	keys := make([]string, 0, len(s.Workloads))
	for _, w := range s.Workloads {
		keys = append(keys, workloadKey(w))
	}
	return keys
}

// poolKey names a Node's capacity pool (instance type/zone/capacity type).
func poolKey(n *corev1.Node) string {
	return strings.Join([]string{n.Labels[v1alpha1.LabelInstanceType], n.Labels[v1alpha1.LabelZone], n.Labels[v1alpha1.LabelCapacityType]}, "/")
}

// nodeShare is where one workload's Pods run: on how many nodes, and on how many of those
// beside another scenario workload's Pods.
type nodeShare struct{ nodes, shared int }

// layoutOf is the cluster's layout: for each scenario workload (podWorkloadKey) with a Pod bound
// and not terminating, its nodeShare. At t0 it describes the modes' starting states: an
// unprotected workload whose Pods share no node with the protected ones finds the free room the
// protected Pods leave without its image (scenario.RampByPriority). Pure.
func layoutOf(pods []*corev1.Pod) map[string]nodeShare {
	onNode := map[string]map[string]bool{} // node → workloads
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Labels[LabelWorkload] == "" || nodeutil.IsTerminal(p) {
			continue
		}
		if onNode[p.Spec.NodeName] == nil {
			onNode[p.Spec.NodeName] = map[string]bool{}
		}
		onNode[p.Spec.NodeName][podWorkloadKey(p)] = true
	}
	out := map[string]nodeShare{}
	for _, ws := range onNode {
		for w := range ws {
			s := out[w]
			s.nodes++
			if len(ws) > 1 {
				s.shared++
			}
			out[w] = s
		}
	}
	return out
}

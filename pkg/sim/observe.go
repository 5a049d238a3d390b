package sim

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// karpenterNodePoolLabel is on every Node Karpenter created (its NodePool's name).
const karpenterNodePoolLabel = "karpenter.sh/nodepool"

// observer samples the cluster from informer caches once a second: ready Pods per workload,
// Pending Pods, nodes by kind; and it counts NodeClaims Karpenter created and the node-seconds
// lifeboat nodes spent active.
type observer struct {
	pods, nodes cache.Indexer
	workloads   []string // "<ns>/<name>"

	mu             sync.Mutex
	samples        []report.Sample
	claimsSeen     map[string]bool
	claimsAtStart  int
	activeNodeSecs float64
	activeByType   map[string]float64 // instance type → active node-seconds
	billedByType   map[string]float64 // instance type → running (warming, active, draining) node-seconds
	resumedNodes   map[string]bool
	start          time.Time
	// Resume timings, from Node annotations as the controller writes them.
	// price gives a running node's hourly price and its On-Demand price (ok false for nodes
	// that do not bill compute, e.g. hibernated pool nodes).
	price      func(n *corev1.Node) (now, onDemand float64, ok bool)
	poolTimes  map[string]*poolTimes // pool Node → its resume timestamps
	resumedFor map[string]string     // pool Node → interrupted Node it was resumed for
	// boots: Karpenter's Nodes created since t0 → creation to Ready (the simulated boot).
	boots map[string]time.Duration
}

// poolTimes are a resumed pool Node's timestamps (zero when not seen).
type poolTimes struct {
	interruptedAt, startRequestedAt, readyAt time.Time
}

func newObserver(ctx context.Context, cl Clients, workloads []string, price func(*corev1.Node) (float64, float64, bool)) (*observer, error) {
	o := &observer{workloads: workloads, claimsSeen: map[string]bool{}, resumedNodes: map[string]bool{}, activeByType: map[string]float64{}, billedByType: map[string]float64{},
		poolTimes: map[string]*poolTimes{}, resumedFor: map[string]string{}, boots: map[string]time.Duration{}, price: price}
	f := informers.NewSharedInformerFactory(cl.Kube, 0)
	podInf, nodeInf := f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer()
	o.pods, o.nodes = podInf.GetIndexer(), nodeInf.GetIndexer()
	_, _ = nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.recordResume(obj); o.recordBoot(obj) },
		UpdateFunc: func(_, obj any) { o.recordResume(obj); o.recordBoot(obj) },
	})
	df := dynamicinformer.NewDynamicSharedInformerFactory(cl.Dynamic, 0)
	claimInf := df.ForResource(localcluster.NodeClaimGVR).Informer()
	_, _ = claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			o.mu.Lock()
			o.claimsSeen[u.GetName()] = true
			o.mu.Unlock()
		}
	}})
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInf.HasSynced, nodeInf.HasSynced, claimInf.HasSynced) {
		return nil, ctx.Err()
	}
	return o, nil
}

// begin marks t0: samples and counts are relative to it.
func (o *observer) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.start = time.Now()
	o.claimsAtStart = len(o.claimsSeen)
}

func (o *observer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.sample(interval)
		}
	}
}

func (o *observer) sample(interval time.Duration) {
	s := report.Sample{Workloads: map[string]int32{}, Nodes: map[string]int{}}
	podObjs, nodeObjs := o.pods.List(), o.nodes.List()
	pods, nodes := make([]*corev1.Pod, 0, len(podObjs)), make([]*corev1.Node, 0, len(nodeObjs))
	for _, obj := range podObjs {
		pods = append(pods, obj.(*corev1.Pod))
	}
	for _, obj := range nodeObjs {
		nodes = append(nodes, obj.(*corev1.Node))
	}
	s.Overcommitted = overcommitted(nodes, pods)
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			// A terminating Pod still serves until it is gone, but it is leaving: do not count it
			// toward readiness (the PDB does not either).
			continue
		}
		if p.Status.Phase == corev1.PodPending {
			s.Pending++
		}
		if name := p.Labels[LabelWorkload]; name != "" && podReady(p) {
			s.Workloads[p.Namespace+"/"+name]++
		}
	}
	var activeTypes, runningTypes []string
	var paid, onDemand float64
	for _, n := range nodes {
		kind := nodeKind(n)
		s.Nodes[kind]++
		if o.price != nil {
			if now, od, ok := o.price(n); ok {
				paid, onDemand = paid+now, onDemand+od
				if kind == "karpenter-on-demand" {
					s.OnDemandHourly += now
				}
			}
		}
		if n.Labels[v1alpha1.LabelPool] != "" && n.Labels[v1alpha1.LabelState] != string(v1alpha1.NodeStateStandby) {
			// Running instances bill: warming (a refill pre-pulling), active, draining.
			runningTypes = append(runningTypes, n.Labels[v1alpha1.LabelInstanceType])
		}
		if kind == "lifeboat-active" || kind == "lifeboat-draining" {
			activeTypes = append(activeTypes, n.Labels[v1alpha1.LabelInstanceType])
			o.mu.Lock()
			o.resumedNodes[n.Name] = true
			o.mu.Unlock()
		}
	}
	if onDemand > 0 {
		s.Savings = 1 - paid/onDemand
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.start.IsZero() {
		return
	}
	s.At = time.Since(o.start).Round(100 * time.Millisecond)
	o.samples = append(o.samples, s)
	for _, t := range activeTypes {
		o.activeNodeSecs += interval.Seconds()
		o.activeByType[t] += interval.Seconds()
	}
	for _, t := range runningTypes {
		o.billedByType[t] += interval.Seconds()
	}
}

// overcommitted counts the nodes whose bound Pods request more than the node can hold: CPU,
// memory or Pod count beyond its allocatable. A real kubelet's admission rejects the Pod that
// overflows (OutOfcpu, OutOfpods); a KWOK node runs it, so the simulation has to look. Two
// schedulers binding into the same free room at the same moment cause it — each sees the other's
// Pods only once they are bound. Pods that finished (Succeeded, Failed) hold nothing. Pure.
func overcommitted(nodes []*corev1.Node, pods []*corev1.Pod) int {
	onNode := map[string]sizing.Resources{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		onNode[p.Spec.NodeName] = onNode[p.Spec.NodeName].Add(sizing.PodResources(nodeutil.PodRequests(p)))
	}
	n := 0
	for _, node := range nodes {
		load, bound := onNode[node.Name]
		if bound && len(node.Status.Allocatable) > 0 && !sizing.FromList(node.Status.Allocatable).Fits(load) {
			n++
		}
	}
	return n
}

// recordResume keeps the resume timestamps the controller writes: on a claimed pool Node
// (interrupted-at copied from the notice it answers, start-requested-at, resumed-ready-at) and on
// an interrupted Node (resume-decision: the pool Nodes resumed for it).
func (o *observer) recordResume(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d := n.Annotations[v1alpha1.AnnotationResumeDecision]; d != "" && d != "none" {
		for _, p := range strings.Split(d, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.resumedFor[p] = n.Name
			}
		}
	}
	if n.Labels[v1alpha1.LabelPool] == "" || n.Annotations[v1alpha1.AnnotationStartRequestedAt] == "" {
		return
	}
	pt := o.poolTimes[n.Name]
	if pt == nil {
		pt = &poolTimes{}
		o.poolTimes[n.Name] = pt
	}
	set := func(dst *time.Time, key string) {
		if t, err := time.Parse(time.RFC3339Nano, n.Annotations[key]); err == nil {
			*dst = t
		}
	}
	set(&pt.interruptedAt, v1alpha1.AnnotationInterruptedAt)
	set(&pt.startRequestedAt, v1alpha1.AnnotationStartRequestedAt)
	set(&pt.readyAt, v1alpha1.AnnotationResumedReadyAt)
}

// recordBoot keeps, for each of Karpenter's Nodes created since t0, the time from its creation
// to its Ready condition: the boot the harness simulates (scenario timing.karpenterBoot). When
// the machine is short of CPU, KWOK flips Nodes Ready late, and more so in a busier mode.
func (o *observer) recordBoot(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Labels[v1alpha1.LabelPool] != "" || n.Labels[karpenterNodePoolLabel] == "" {
		return
	}
	var readyAt time.Time
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			readyAt = c.LastTransitionTime.Time
		}
	}
	if readyAt.IsZero() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// Seconds: creationTimestamp has no finer precision.
	if _, seen := o.boots[n.Name]; seen || o.start.IsZero() || n.CreationTimestamp.Time.Before(o.start.Truncate(time.Second)) {
		return
	}
	o.boots[n.Name] = readyAt.Sub(n.CreationTimestamp.Time)
}

// nodeBoots are the simulated boots recordBoot kept.
func (o *observer) nodeBoots() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]time.Duration, 0, len(o.boots))
	for _, d := range o.boots {
		out = append(out, d)
	}
	return out
}

// resumes times every resume seen since t0 from the notice the market sent for the node it
// answered (noticeAt), or from the controller's interrupted-at when that node is unknown.
func (o *observer) resumes(noticeAt func(node string) (time.Time, bool)) []report.Resume {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []report.Resume
	for name, pt := range o.poolTimes {
		if pt.startRequestedAt.Before(o.start) {
			continue // resumed before t0 (not part of the run)
		}
		from := pt.interruptedAt
		if at, ok := noticeAt(o.resumedFor[name]); ok {
			from = at
		}
		r := report.Resume{Node: name, ToStartRequested: -1, ToReady: -1}
		if !from.IsZero() {
			r.ToStartRequested = pt.startRequestedAt.Sub(from)
			if !pt.readyAt.IsZero() {
				r.ToReady = pt.readyAt.Sub(from)
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func nodeKind(n *corev1.Node) string {
	if n.Labels[v1alpha1.LabelPool] != "" {
		switch v1alpha1.NodeState(n.Labels[v1alpha1.LabelState]) {
		case v1alpha1.NodeStateActive:
			return "lifeboat-active"
		case v1alpha1.NodeStateDraining:
			return "lifeboat-draining"
		default:
			return "lifeboat-standby"
		}
	}
	if n.Labels[karpenterNodePoolLabel] != "" {
		if n.Labels[v1alpha1.LabelCapacityType] == "on-demand" {
			return "karpenter-on-demand"
		}
		return "karpenter-spot"
	}
	return "other"
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsOnNode lists the scenario Pods bound to a node that are still running.
func (o *observer) podsOnNode(node string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range o.pods.List() {
		p := obj.(*corev1.Pod)
		if p.Spec.NodeName == node && p.Labels[LabelWorkload] != "" && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// podList lists every Pod the observer's cache holds.
func (o *observer) podList() []*corev1.Pod {
	objs := o.pods.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.Pod))
	}
	return out
}

func (o *observer) launchedClaims() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.claimsSeen) - o.claimsAtStart
}

// snapshot returns the samples, the active lifeboat node-seconds, the billed (running) pool
// node-seconds per instance type and the number of resumed nodes.
func (o *observer) snapshot() ([]report.Sample, float64, map[string]float64, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	byType := map[string]float64{}
	for k, v := range o.billedByType {
		byType[k] = v
	}
	return append([]report.Sample(nil), o.samples...), o.activeNodeSecs, byType, len(o.resumedNodes)
}

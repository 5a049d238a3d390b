package sim

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/test/cluster"
)

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
	resumedNodes   map[string]bool
	start          time.Time
}

func newObserver(ctx context.Context, cl Clients, workloads []string) (*observer, error) {
	o := &observer{workloads: workloads, claimsSeen: map[string]bool{}, resumedNodes: map[string]bool{}, activeByType: map[string]float64{}}
	f := informers.NewSharedInformerFactory(cl.Kube, 0)
	podInf, nodeInf := f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer()
	o.pods, o.nodes = podInf.GetIndexer(), nodeInf.GetIndexer()
	df := dynamicinformer.NewDynamicSharedInformerFactory(cl.Dynamic, 0)
	claimInf := df.ForResource(cluster.NodeClaimGVR).Informer()
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
	for _, obj := range o.pods.List() {
		p := obj.(*corev1.Pod)
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
	var activeTypes []string
	for _, obj := range o.nodes.List() {
		n := obj.(*corev1.Node)
		kind := nodeKind(n)
		s.Nodes[kind]++
		if kind == "lifeboat-active" || kind == "lifeboat-draining" {
			activeTypes = append(activeTypes, n.Labels[v1alpha1.LabelInstanceType])
			o.mu.Lock()
			o.resumedNodes[n.Name] = true
			o.mu.Unlock()
		}
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
	if n.Labels["karpenter.sh/nodepool"] != "" {
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

func (o *observer) launchedClaims() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.claimsSeen) - o.claimsAtStart
}

func (o *observer) snapshot() ([]report.Sample, float64, map[string]float64, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	byType := map[string]float64{}
	for k, v := range o.activeByType {
		byType[k] = v
	}
	return append([]report.Sample(nil), o.samples...), o.activeNodeSecs, byType, len(o.resumedNodes)
}

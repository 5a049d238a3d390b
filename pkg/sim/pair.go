package sim

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// Paired victims. Each mode runs on its own control plane, and the Pods land differently in
// each, so a market that picks its victims per mode ("the busiest pool, the fullest nodes")
// interrupts nodes of different workloads in each mode, and the per-workload comparison of the
// report would compare a workload that was hit with one that was not. A pairing, shared by the
// modes of one run, makes them face the same interruption as far as placement allows: for each
// notice or burst event, the first mode to reach it picks its victims with the market's rule and
// records the pick's exposure (workload → its Pods on the victim nodes); every later mode picks,
// within the event's pool filter, the nodes whose exposure comes closest to it (matchExposure).
// In a parallel run the modes also start their markets together (waitT0), so that the first pick
// exists when the other mode reaches the event; in a sequential run the first mode's picks are
// simply there.

// candidate is a Spot node the market may interrupt, with its scenario Pods per workload.
type candidate struct {
	node  *corev1.Node
	name  string
	pods  map[string]int // workload key ("<ns>/<name>") → Pods on the node
	total int
}

// exposure is workload key → Pods of that workload on the chosen nodes.
type exposure map[string]int

func exposureOf(cs []candidate) exposure {
	e := exposure{}
	for _, c := range cs {
		for k, n := range c.pods {
			e[k] += n
		}
	}
	return e
}

// l1 is the L1 distance between two exposures.
func l1(a, b exposure) int {
	d := 0
	for k, n := range a {
		d += abs(n - b[k])
	}
	for k, n := range b {
		if _, ok := a[k]; !ok {
			d += abs(n)
		}
	}
	return d
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// sortCandidates puts a pool's nodes in the market's order: most scenario Pods first, then by
// name.
func sortCandidates(cs []candidate) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].total != cs[j].total {
			return cs[i].total > cs[j].total
		}
		return cs[i].name < cs[j].name
	})
}

// poolOrder lists the pools in the market's order: most scenario Pods first, then by key.
func poolOrder(pools map[string][]candidate) []string {
	total := map[string]int{}
	keys := make([]string, 0, len(pools))
	for k, cs := range pools {
		keys = append(keys, k)
		for _, c := range cs {
			total[k] += c.total
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if total[keys[i]] != total[keys[j]] {
			return total[keys[i]] > total[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// busiest is the market's own rule: the pool with the most scenario Pods, in it the count
// nodes with the most.
func busiest(pools map[string][]candidate, count int) (string, []candidate) {
	order := poolOrder(pools)
	if len(order) == 0 || count <= 0 {
		return "", nil
	}
	nodes := append([]candidate(nil), pools[order[0]]...)
	sortCandidates(nodes)
	if len(nodes) > count {
		nodes = nodes[:count]
	}
	return order[0], nodes
}

// matchExposure picks up to count nodes of one pool whose exposure comes closest (L1 distance)
// to target. Per pool it adds, one at a time, the node that leaves the smallest distance
// between target and the exposure picked so far (ties: the market's order), as long as that
// node does not increase the distance: a node without scenario Pods is still taken (the mode
// loses as many nodes as the first one did), a node that would only hit workloads the first
// mode's pick did not is not (fewer nodes rather than a different interruption). It stops at
// count nodes. It chooses the pool with the smallest final distance; ties go to leadPool (the
// first mode's pool), then to the market's pool order. It returns the pool, the nodes and the
// distance (0: an exact match).
func matchExposure(pools map[string][]candidate, target exposure, count int, leadPool string) (string, []candidate, int) {
	if count <= 0 {
		return "", nil, l1(target, exposure{})
	}
	bestPool, bestDist := "", -1
	var bestPick []candidate
	for _, k := range poolOrder(pools) {
		rest := append([]candidate(nil), pools[k]...)
		sortCandidates(rest)
		acc, dist := exposure{}, l1(target, exposure{})
		var picked []candidate
		for len(picked) < count && len(rest) > 0 {
			bi, bd := -1, 0
			for i, c := range rest {
				d := dist
				for w, n := range c.pods {
					d += abs(target[w]-acc[w]-n) - abs(target[w]-acc[w])
				}
				if bi < 0 || d < bd {
					bi, bd = i, d
				}
			}
			if bd > dist {
				break // every node left would move the exposure away from the target
			}
			c := rest[bi]
			for w, n := range c.pods {
				acc[w] += n
			}
			dist = bd
			picked = append(picked, c)
			rest = append(rest[:bi:bi], rest[bi+1:]...)
		}
		if bestDist < 0 || dist < bestDist || (dist == bestDist && k == leadPool && bestPool != leadPool) {
			bestPool, bestDist, bestPick = k, dist, picked
		}
	}
	if bestDist < 0 {
		return "", nil, l1(target, exposure{})
	}
	return bestPool, bestPick, bestDist
}

// pairing is shared by the modes of one run (nil for a single mode: every method then does
// what one mode alone does).
type pairing struct {
	modes int
	// barrier: the modes start their markets together (parallel runs); timeout bounds the wait.
	barrier bool
	timeout time.Duration

	mu       sync.Mutex
	atT0     map[string]bool // modes at t0, or ended before it
	released chan struct{}
	picks    map[int]*pairedPick // event index (in the sorted event list) → first mode's pick
}

// pairedPick is what the first mode to reach an event interrupted.
type pairedPick struct {
	mode     string
	pool     string
	nodes    int
	exposure exposure
}

// newPairing returns the pairing of a run of these modes: nil unless there are two or more.
func newPairing(modes []scenario.Mode, barrier bool, timeout time.Duration) *pairing {
	if len(modes) < 2 {
		return nil
	}
	return &pairing{modes: len(modes), barrier: barrier, timeout: timeout, atT0: map[string]bool{},
		released: make(chan struct{}), picks: map[int]*pairedPick{}}
}

// leave records that a mode will not (or no longer) wait at t0: it reached it, or it ended.
// The barrier opens once every mode has.
func (p *pairing) leave(mode string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.atT0[mode] {
		return
	}
	p.atT0[mode] = true
	if len(p.atT0) == p.modes {
		close(p.released)
	}
}

// waitT0 holds a mode at t0 until every other mode is there too (or has ended), at most the
// pairing's timeout: in a parallel run both markets then reach each event together. It
// returns ctx's error when ctx ends first; on timeout it logs and returns nil (the picks still
// pair, only later).
func (p *pairing) waitT0(ctx context.Context, mode string) error {
	if p == nil || !p.barrier {
		p.leave(mode)
		return nil
	}
	p.leave(mode)
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	select {
	case <-p.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		klog.FromContext(ctx).Info("t0 barrier timed out: starting the market without the other modes", "mode", mode, "timeout", p.timeout)
		return nil
	}
}

// choose picks the victims of event idx for mode among pools (this mode's candidates within
// the event's pool filter). The first mode to reach the event uses the market's rule (busiest)
// and records its pick; a later mode matches that pick's exposure with the same number of
// nodes (matchExposure). lead is the first mode's pick when this one followed it (nil when
// this mode led, or without a pairing); dist is the L1 distance of the match.
func (p *pairing) choose(idx int, mode string, pools map[string][]candidate, count int) (victims []candidate, lead *pairedPick, dist int) {
	if p == nil {
		_, v := busiest(pools, count)
		return v, nil, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if lead := p.picks[idx]; lead != nil {
		_, v, d := matchExposure(pools, lead.exposure, lead.nodes, lead.pool)
		return v, lead, d
	}
	pool, v := busiest(pools, count)
	p.picks[idx] = &pairedPick{mode: mode, pool: pool, nodes: len(v), exposure: exposureOf(v)}
	return v, nil, 0
}

// candidates are this mode's Spot nodes within the pool filter, by capacity pool, each with its
// scenario Pods per workload; nodes already noticed or leaving are not candidates.
func (m *market) candidates(p scenario.Pool) map[string][]candidate {
	pools := map[string][]candidate{}
	for _, obj := range m.obs.nodes.List() {
		n := obj.(*corev1.Node)
		if nodeKind(n) != "karpenter-spot" || n.DeletionTimestamp != nil || m.wasNoticed(n.Name) {
			continue
		}
		if p.InstanceType != "" && p.InstanceType != "*" && n.Labels[corev1.LabelInstanceTypeStable] != p.InstanceType {
			continue
		}
		if p.Zone != "" && n.Labels[corev1.LabelTopologyZone] != p.Zone {
			continue
		}
		c := candidate{node: n, name: n.Name, pods: map[string]int{}}
		for _, pod := range m.obs.podsOnNode(n.Name) {
			c.pods[podWorkloadKey(pod)]++
			c.total++
		}
		k := poolKey(n)
		pools[k] = append(pools[k], c)
	}
	return pools
}

// victims chooses the nodes event idx interrupts in this mode (paired with the other modes when
// the run has several).
func (m *market) victims(ctx context.Context, idx int, p scenario.Pool, count int) []*corev1.Node {
	picked, lead, dist := m.pair.choose(idx, m.mode, m.candidates(p), count)
	nodes := make([]*corev1.Node, 0, len(picked))
	for _, c := range picked {
		nodes = append(nodes, c.node)
	}
	if lead != nil {
		got := exposureOf(picked)
		klog.FromContext(ctx).Info("paired victims", "event", idx, "mode", m.mode, "leader", lead.mode,
			"target", lead.exposure, "got", got, "distance", dist)
		if dist > 0 || len(picked) < lead.nodes {
			m.mark(time.Now(), "note", fmt.Sprintf("victims match %s's pick only partly: %d Pod(s) apart, %d of %d nodes", lead.mode, dist, len(picked), lead.nodes))
		}
	}
	return nodes
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// node is a candidate with Pods per workload ("web:2,api:1" style, as a map).
func node(name string, pods map[string]int) candidate {
	c := candidate{name: name, pods: map[string]int{}}
	for k, n := range pods {
		c.pods[k] = n
		c.total += n
	}
	return c
}

func names(cs []candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

const (
	poolA = "m5.large/us-east-1a/spot"
	poolB = "m5.large/us-east-1b/spot"
)

// TestPairedVictims: the first mode to reach an event picks with the market's rule (busiest
// pool, fullest nodes); the second picks the nodes whose exposure is closest to it, with as
// many nodes.
func TestPairedVictims(t *testing.T) {
	web, api, batch, front := "shop/web", "shop/api", "batch/train", "shop/frontend-zero"
	tests := []struct {
		name       string
		modes      []scenario.Mode
		lead       map[string][]candidate // the first mode's candidates
		count      int
		follow     map[string][]candidate // the second mode's candidates
		wantLead   []string
		wantFollow []string
		wantDist   int
	}{
		{
			name:  "exact match possible in another pool and on other nodes",
			modes: []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead: map[string][]candidate{
				poolA: {node("a1", map[string]int{web: 3, api: 1}), node("a2", map[string]int{web: 2}), node("a3", map[string]int{batch: 1})},
				poolB: {node("b1", map[string]int{front: 1})},
			},
			count: 2,
			// The market's rule in the second mode would take f1 and f2 (the fullest nodes of the
			// busiest pool), which hit the frontend and the Jobs instead.
			follow: map[string][]candidate{
				poolA: {node("f1", map[string]int{front: 1, batch: 3, web: 1}), node("f2", map[string]int{batch: 4}), node("f3", map[string]int{web: 1})},
				poolB: {node("g1", map[string]int{web: 4}), node("g2", map[string]int{web: 1, api: 1}), node("g3", map[string]int{front: 1})},
			},
			wantLead:   []string{"a1", "a2"},
			wantFollow: []string{"g1", "g2"},
			wantDist:   0,
		},
		{
			name:  "only a partial match: the closest nodes, up to as many as the first mode's",
			modes: []scenario.Mode{scenario.ModeLifeboat, scenario.ModeBaseline},
			lead: map[string][]candidate{
				poolA: {node("a1", map[string]int{web: 2}), node("a2", map[string]int{api: 2})},
			},
			count: 2,
			// Target web 2, api 2. Best: f3 (web 2) then f4 (api 1): distance 1. f1 would add
			// the frontend for its api Pod, f2 an empty node changes nothing.
			follow: map[string][]candidate{
				poolA: {node("f1", map[string]int{front: 1, api: 1}), node("f2", map[string]int{}), node("f3", map[string]int{web: 2}), node("f4", map[string]int{api: 1})},
			},
			wantLead:   []string{"a1", "a2"},
			wantFollow: []string{"f3", "f4"},
			wantDist:   1,
		},
		{
			name:  "a node without scenario Pods beats one with the wrong workload's",
			modes: []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead: map[string][]candidate{
				poolA: {node("a1", map[string]int{web: 1}), node("a2", map[string]int{})},
			},
			count: 2,
			follow: map[string][]candidate{
				poolA: {node("f1", map[string]int{front: 2}), node("f2", map[string]int{web: 1}), node("f3", map[string]int{})},
			},
			wantLead:   []string{"a1", "a2"},
			wantFollow: []string{"f2", "f3"},
			wantDist:   0,
		},
		{
			name:  "fewer nodes rather than a workload the first mode's pick did not hit",
			modes: []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead: map[string][]candidate{
				poolA: {node("a1", map[string]int{web: 2}), node("a2", map[string]int{web: 1})},
			},
			count: 2,
			follow: map[string][]candidate{
				poolA: {node("f1", map[string]int{web: 3}), node("f2", map[string]int{front: 1}), node("f3", map[string]int{batch: 2})},
			},
			wantLead:   []string{"a1", "a2"},
			wantFollow: []string{"f1"},
			wantDist:   0,
		},
		{
			name:       "no candidates in the second mode",
			modes:      []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead:       map[string][]candidate{poolA: {node("a1", map[string]int{web: 2})}},
			count:      3,
			follow:     map[string][]candidate{},
			wantLead:   []string{"a1"},
			wantFollow: []string{},
			wantDist:   2,
		},
		{
			name:       "no candidates in the first mode: the second interrupts none either",
			modes:      []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead:       map[string][]candidate{},
			count:      2,
			follow:     map[string][]candidate{poolA: {node("f1", map[string]int{web: 2})}},
			wantLead:   []string{},
			wantFollow: []string{},
			wantDist:   0,
		},
		{
			name:  "same distance in two pools: the first mode's pool",
			modes: []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat},
			lead: map[string][]candidate{
				poolB: {node("b1", map[string]int{web: 1})},
			},
			count: 1,
			follow: map[string][]candidate{
				poolA: {node("f1", map[string]int{web: 1})},
				poolB: {node("g1", map[string]int{web: 1})},
			},
			wantLead:   []string{"b1"},
			wantFollow: []string{"g1"},
			wantDist:   0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPairing(tt.modes, false, 0)
			lead, leader, _ := p.choose(0, string(tt.modes[0]), tt.lead, tt.count)
			if leader != nil {
				t.Errorf("the first mode followed %s", leader.mode)
			}
			if got := names(lead); !reflect.DeepEqual(got, tt.wantLead) {
				t.Errorf("first mode's victims = %v, want %v", got, tt.wantLead)
			}
			follow, leader, dist := p.choose(0, string(tt.modes[1]), tt.follow, tt.count)
			if leader == nil || leader.mode != string(tt.modes[0]) {
				t.Fatalf("second mode followed %+v, want %s", leader, tt.modes[0])
			}
			got := names(follow)
			sort.Strings(got)
			if !reflect.DeepEqual(got, tt.wantFollow) || dist != tt.wantDist {
				t.Errorf("second mode's victims = %v (distance %d), want %v (distance %d)", got, dist, tt.wantFollow, tt.wantDist)
			}
			// Another event is paired on its own.
			if _, leader, _ := p.choose(1, string(tt.modes[1]), tt.follow, tt.count); leader != nil {
				t.Errorf("event 1 followed event 0's pick")
			}
		})
	}
}

// TestSingleModeKeepsTheMarketRule: one mode, no pairing: the busiest pool's fullest nodes, as
// the market always picked.
func TestSingleModeKeepsTheMarketRule(t *testing.T) {
	p := newPairing([]scenario.Mode{scenario.ModeLifeboat}, true, time.Minute)
	if p != nil {
		t.Fatalf("a single-mode run has a pairing")
	}
	pools := map[string][]candidate{
		poolA: {node("a1", map[string]int{"shop/web": 1}), node("a2", map[string]int{"shop/web": 2})},
		poolB: {node("b2", map[string]int{"shop/api": 2}), node("b1", map[string]int{"shop/api": 2}), node("b3", map[string]int{})},
	}
	for range 2 { // every event picks afresh
		v, lead, dist := p.choose(0, "lifeboat", pools, 2)
		if got := names(v); !reflect.DeepEqual(got, []string{"b1", "b2"}) || lead != nil || dist != 0 {
			t.Errorf("victims = %v (lead %v, distance %d), want [b1 b2] of the busiest pool", got, lead, dist)
		}
	}
	if err := p.waitT0(context.Background(), "lifeboat"); err != nil {
		t.Errorf("waitT0 without a pairing: %v", err)
	}
	p.leave("lifeboat")
}

// TestT0Barrier: a parallel run's modes start their markets together; a mode that ended
// releases the others, the timeout and ctx bound the wait.
func TestT0Barrier(t *testing.T) {
	modes := []scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat}
	p := newPairing(modes, true, time.Minute)
	done := make(chan error)
	go func() { done <- p.waitT0(context.Background(), "baseline") }()
	select {
	case err := <-done:
		t.Fatalf("baseline started alone: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.waitT0(context.Background(), "lifeboat"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.leave("baseline") // the run's own leave after the mode ends: no second close

	p = newPairing(modes, true, time.Minute)
	go func() { done <- p.waitT0(context.Background(), "lifeboat") }()
	p.leave("baseline") // failed before t0
	if err := <-done; err != nil {
		t.Errorf("after the other mode failed: %v", err)
	}

	p = newPairing(modes, true, 20*time.Millisecond)
	if err := p.waitT0(context.Background(), "baseline"); err != nil {
		t.Errorf("timeout: %v, want nil (the market starts)", err)
	}

	p = newPairing(modes, true, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.waitT0(ctx, "baseline"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	// Sequential runs do not wait.
	p = newPairing(modes, false, time.Minute)
	if err := p.waitT0(context.Background(), "baseline"); err != nil {
		t.Error(err)
	}
}

// fakeMarket is a market over informer-like caches holding these nodes (name → pool key
// "type/zone") and Pods (node → workload keys), no cluster.
func fakeMarket(t *testing.T, mode string, pair *pairing, nodes map[string]string, pods map[string][]string) *market {
	t.Helper()
	ni := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pi := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, pool := range nodes {
		typ, zone, _ := strings.Cut(pool, "/")
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"karpenter.sh/nodepool": "default", v1alpha1.LabelCapacityType: "spot",
			v1alpha1.LabelInstanceType: typ, v1alpha1.LabelZone: zone}}}
		if err := ni.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	for node, ws := range pods {
		for _, w := range ws {
			ns, name, _ := strings.Cut(w, "/")
			i++
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{LabelWorkload: name}},
				Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			if err := pi.Add(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &market{obs: &observer{nodes: ni, pods: pi}, mode: mode, pair: pair, killed: map[string]int{}, noticed: map[string]time.Time{}}
}

// TestMarketVictimsPaired: the markets of two modes, each on its own nodes, interrupt the nodes
// of the same workloads; the second mode's own rule would have hit others.
func TestMarketVictimsPaired(t *testing.T) {
	pair := newPairing([]scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat}, false, 0)
	ev := scenario.Pool{CapacityType: "spot"}
	base := fakeMarket(t, "baseline", pair, map[string]string{"b1": "m5.large/us-east-1a", "b2": "m5.large/us-east-1a", "b3": "m5.large/us-east-1b"},
		map[string][]string{"b1": {"shop/web", "shop/web"}, "b2": {"shop/api"}, "b3": {"batch/ci"}})
	lb := fakeMarket(t, "lifeboat", pair, map[string]string{"l1": "m5.large/us-east-1a", "l2": "m5.large/us-east-1a", "l3": "m5.large/us-east-1b"},
		map[string][]string{"l1": {"shop/frontend-zero", "batch/ci", "batch/ci"}, "l2": {"shop/web", "shop/web", "shop/api"}, "l3": {"batch/ci"}})
	if got := nodeNames(lb.victims(context.Background(), 0, ev, 2)); !reflect.DeepEqual(got, []string{"l1", "l2"}) {
		t.Fatalf("lifeboat alone would pick %v", got) // sanity check of the market's rule (it leads event 0 here)
	}
	pair = newPairing([]scenario.Mode{scenario.ModeBaseline, scenario.ModeLifeboat}, false, 0)
	base.pair, lb.pair = pair, pair
	if got := nodeNames(base.victims(context.Background(), 0, ev, 2)); !reflect.DeepEqual(got, []string{"b1", "b2"}) {
		t.Errorf("baseline victims = %v, want [b1 b2]", got)
	}
	// l2 holds what b1 and b2 hold; a second node would hit the frontend or the Jobs, which the
	// baseline's pick did not.
	if got := nodeNames(lb.victims(context.Background(), 0, ev, 2)); !reflect.DeepEqual(got, []string{"l2"}) {
		t.Errorf("lifeboat victims = %v, want [l2] (web 2, api 1), no node of the frontend or the Jobs", got)
	}
	if len(lb.markers) != 1 || !strings.Contains(lb.markers[0].Label, "0 Pod(s) apart, 1 of 2 nodes") {
		t.Errorf("markers = %+v, want a note that one node fewer was interrupted", lb.markers)
	}
}

func nodeNames(ns []*corev1.Node) []string {
	out := []string{}
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

package capacitypoolspread

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// replicaIndex counts Pods per controller owner and capacity pool across the scheduler's
// snapshot. Recounting every Pod in every cycle costs O(Pods) (≈10 ms p99 at 1000 nodes and
// 5000 Pods in the benchmark); instead each cycle compares node generations and recounts only
// the nodes that changed since the previous cycle (usually the one that got the last Pod).
// Owner UIDs are unique cluster-wide, so counts need no namespace.
type replicaIndex struct {
	mu     sync.Mutex
	nodes  map[string]*indexedNode
	totals map[types.UID]map[pool]int
	cycle  uint64
}

type indexedNode struct {
	generation int64
	pool       pool
	owners     map[types.UID]int
	seen       uint64
}

func newReplicaIndex() *replicaIndex {
	return &replicaIndex{nodes: map[string]*indexedNode{}, totals: map[types.UID]map[pool]int{}}
}

// sync brings the index in step with the snapshot's nodes and returns the replicas of owner
// per pool (a copy).
func (x *replicaIndex) sync(nodes []fwk.NodeInfo, owner types.UID) map[pool]float64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cycle++
	for _, ni := range nodes {
		node := ni.Node()
		if node == nil {
			continue
		}
		entry, ok := x.nodes[node.Name]
		if !ok {
			entry = &indexedNode{generation: -1}
			x.nodes[node.Name] = entry
		}
		entry.seen = x.cycle
		if entry.generation == ni.GetGeneration() {
			continue
		}
		x.remove(entry)
		entry.generation = ni.GetGeneration()
		entry.pool = poolOf(node)
		entry.owners = countOwners(ni.GetPods())
		x.add(entry)
	}
	for name, entry := range x.nodes {
		if entry.seen != x.cycle { // node left the cluster
			x.remove(entry)
			delete(x.nodes, name)
		}
	}
	out := make(map[pool]float64, len(x.totals[owner]))
	for p, n := range x.totals[owner] {
		out[p] = float64(n)
	}
	return out
}

func (x *replicaIndex) add(e *indexedNode) {
	for owner, n := range e.owners {
		byPool := x.totals[owner]
		if byPool == nil {
			byPool = map[pool]int{}
			x.totals[owner] = byPool
		}
		byPool[e.pool] += n
	}
}

func (x *replicaIndex) remove(e *indexedNode) {
	for owner, n := range e.owners {
		byPool := x.totals[owner]
		if byPool[e.pool] -= n; byPool[e.pool] <= 0 {
			delete(byPool, e.pool)
		}
		if len(byPool) == 0 {
			delete(x.totals, owner)
		}
	}
}

// countOwners counts the node's Pods by controller owner UID.
func countOwners(pods []fwk.PodInfo) map[types.UID]int {
	var out map[types.UID]int
	for _, pi := range pods {
		if ref := metav1.GetControllerOfNoCopy(pi.GetPod()); ref != nil {
			if out == nil {
				out = map[types.UID]int{}
			}
			out[ref.UID]++
		}
	}
	return out
}

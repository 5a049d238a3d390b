// Package sizing holds the pure decisions about capacity: which standby nodes to resume so that
// the protected Pods of interrupted nodes fit (first-fit decreasing), and how many standby nodes
// size "auto" needs. No API calls: the controllers fetch the inputs and write the results.
package sizing

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Resources is the part of a resource list that decides fit: CPU in millicores, memory in
// bytes, and one Pod slot.
type Resources struct {
	MilliCPU int64
	Memory   int64
	Pods     int64
}

// FromList converts a ResourceList; Pods is taken from the list (allocatable) when present.
func FromList(l corev1.ResourceList) Resources {
	r := Resources{}
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.Memory = q.Value()
	}
	if q, ok := l[corev1.ResourcePods]; ok {
		r.Pods = q.Value()
	}
	return r
}

// PodResources are a Pod's requests (one Pod slot).
func PodResources(l corev1.ResourceList) Resources {
	r := FromList(l)
	r.Pods = 1
	return r
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU + o.MilliCPU, Memory: r.Memory + o.Memory, Pods: r.Pods + o.Pods}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU - o.MilliCPU, Memory: r.Memory - o.Memory, Pods: r.Pods - o.Pods}
}

// Fits reports whether o fits into r.
func (r Resources) Fits(o Resources) bool {
	return o.MilliCPU <= r.MilliCPU && o.Memory <= r.Memory && o.Pods <= r.Pods
}

// IsZero reports whether nothing is requested.
func (r Resources) IsZero() bool { return r.MilliCPU == 0 && r.Memory == 0 }

// String is for logs and events.
func (r Resources) String() string {
	return resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI).String() + " CPU, " +
		resource.NewQuantity(r.Memory, resource.BinarySI).String() + " memory, " +
		resource.NewQuantity(r.Pods, resource.DecimalSI).String() + " pods"
}

// Item is something to place (a Pod's requests).
type Item struct {
	Name      string
	Resources Resources
}

// Bin is a node that can hold items: its free capacity.
type Bin struct {
	Name string
	Free Resources
}

// size orders items and bins: the dominant dimension first (CPU, then memory), as Karpenter and
// the cluster autoscaler's FFD estimators do.
func less(a, b Resources) bool {
	if a.MilliCPU != b.MilliCPU {
		return a.MilliCPU < b.MilliCPU
	}
	return a.Memory < b.Memory
}

// ResumePlan is the outcome of PlanResume.
type ResumePlan struct {
	// Resume are the candidate bins to open (resume), in the order they were opened.
	Resume []string
	// Placement maps item name → bin name (claimed or resumed).
	Placement map[string]string
	// Unplaced are the items that fit nowhere: not enough standby capacity (or an item larger
	// than any standby node).
	Unplaced []string
}

// PlanResume decides which standby nodes to resume so that items (the protected Pods of an
// interrupted node) fit, by first-fit decreasing: items largest first; each goes into the first
// open bin with room, else opens the first candidate that can hold it. Bins already claimed for
// the same interruption (a decision interrupted by a restart) are open from the start, so a
// repeated plan never resumes more than one plan would. Candidates are opened largest first so
// few nodes are resumed (equal sizes in the given order); the function is deterministic.
func PlanResume(items []Item, claimed, candidates []Bin) ResumePlan {
	plan := ResumePlan{Placement: map[string]string{}}
	sorted := append([]Item(nil), items...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if less(sorted[j].Resources, sorted[i].Resources) != less(sorted[i].Resources, sorted[j].Resources) {
			return less(sorted[j].Resources, sorted[i].Resources)
		}
		return sorted[i].Name < sorted[j].Name
	})
	open := make([]Bin, 0, len(claimed)+len(candidates))
	open = append(open, claimed...)
	closed := append([]Bin(nil), candidates...)
	// Largest first; equal sizes keep the caller's order, which the caller uses to spread
	// concurrent decisions over different candidates (see interruption.candidateOrder).
	sort.SliceStable(closed, func(i, j int) bool { return less(closed[j].Free, closed[i].Free) })
	for _, it := range sorted {
		if i := firstFit(open, it.Resources); i >= 0 {
			open[i].Free = open[i].Free.Sub(it.Resources)
			plan.Placement[it.Name] = open[i].Name
			continue
		}
		if i := firstFit(closed, it.Resources); i >= 0 {
			b := closed[i]
			closed = append(closed[:i], closed[i+1:]...)
			b.Free = b.Free.Sub(it.Resources)
			open = append(open, b)
			plan.Resume = append(plan.Resume, b.Name)
			plan.Placement[it.Name] = b.Name
			continue
		}
		plan.Unplaced = append(plan.Unplaced, it.Name)
	}
	return plan
}

// firstFit is the index of the first bin with room for r, or -1.
func firstFit(bins []Bin, r Resources) int {
	for i := range bins {
		if bins[i].Free.Fits(r) {
			return i
		}
	}
	return -1
}

// NodesFor counts the nodes of one shape that FFD needs for items. Items larger than the shape
// are counted as one node each (they would not fit any pool node; sizing still reserves one so
// the shortfall is visible in the pool's events rather than silently ignored).
func NodesFor(items []Item, shape Resources) int {
	if len(items) == 0 {
		return 0
	}
	var bins []Bin
	sorted := append([]Item(nil), items...)
	sort.SliceStable(sorted, func(i, j int) bool { return less(sorted[j].Resources, sorted[i].Resources) })
	for _, it := range sorted {
		if i := firstFit(bins, it.Resources); i >= 0 {
			bins[i].Free = bins[i].Free.Sub(it.Resources)
			continue
		}
		free := shape
		if free.Fits(it.Resources) {
			free = free.Sub(it.Resources)
		} else {
			free = Resources{}
		}
		bins = append(bins, Bin{Free: free})
	}
	return len(bins)
}

// AutoSize is size "auto": enough nodes of the pool's shape to hold the protected Pods of the
// largest capacity pool (instance type × zone × capacity type) — EC2 reclaims a capacity pool
// together (docs/FACTS.md: co-interruptions within 3 minutes in >92% of events). podsByCapacityPool
// holds only Spot capacity pools (On-Demand is not interrupted). The result is capped by max.
// It returns the size and the capacity pool it covers.
func AutoSize(podsByCapacityPool map[string][]Item, shape Resources, max int) (int, string) {
	best, bestPool := 0, ""
	keys := make([]string, 0, len(podsByCapacityPool))
	for k := range podsByCapacityPool {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := NodesFor(podsByCapacityPool[k], shape); n > best {
			best, bestPool = n, k
		}
	}
	if best > max {
		best = max
	}
	return best, bestPool
}

package sizing

import (
	"reflect"
	"testing"
)

func res(milliCPU int64, memGiB int64) Resources {
	return Resources{MilliCPU: milliCPU, Memory: memGiB << 30, Pods: 1}
}

func node(name string, milliCPU, memGiB int64) Bin {
	return Bin{Name: name, Free: Resources{MilliCPU: milliCPU, Memory: memGiB << 30, Pods: 110}}
}

func items(sizes ...Resources) []Item {
	out := make([]Item, len(sizes))
	for i, s := range sizes {
		out[i] = Item{Name: string(rune('a' + i)), Resources: s}
	}
	return out
}

func TestPlanResume(t *testing.T) {
	tests := []struct {
		name       string
		items      []Item
		claimed    []Bin
		candidates []Bin
		resume     []string
		unplaced   []string
	}{
		{
			name:       "no protected pods: nothing to resume",
			candidates: []Bin{node("s1", 4000, 16)},
		},
		{
			name:       "everything fits one node",
			items:      items(res(1000, 2), res(1000, 2), res(500, 1)),
			candidates: []Bin{node("s1", 4000, 16), node("s2", 4000, 16)},
			resume:     []string{"s1"},
		},
		{
			name:       "needs two nodes; decreasing order packs 3+1, 2+2",
			items:      items(res(1000, 1), res(2000, 1), res(3000, 1), res(2000, 1)),
			candidates: []Bin{node("s1", 4000, 16), node("s2", 4000, 16), node("s3", 4000, 16)},
			resume:     []string{"s1", "s2"},
		},
		{
			name:       "memory is a dimension too",
			items:      items(res(100, 10), res(100, 10)),
			candidates: []Bin{node("s1", 4000, 16), node("s2", 4000, 16)},
			resume:     []string{"s1", "s2"},
		},
		{
			name:       "largest candidate first so fewer nodes resume",
			items:      items(res(3000, 4), res(3000, 4)),
			candidates: []Bin{node("small", 4000, 16), node("big", 8000, 32)},
			resume:     []string{"big"},
		},
		{
			name:       "a pod larger than every node is unplaced, the rest still planned",
			items:      items(res(16000, 4), res(1000, 1)),
			candidates: []Bin{node("s1", 4000, 16)},
			resume:     []string{"s1"},
			unplaced:   []string{"a"},
		},
		{
			name:       "not enough standby: resume all, report the rest",
			items:      items(res(3000, 1), res(3000, 1), res(3000, 1)),
			candidates: []Bin{node("s1", 4000, 16), node("s2", 4000, 16)},
			resume:     []string{"s1", "s2"},
			unplaced:   []string{"c"},
		},
		{
			name:       "restart mid-decision: a node already claimed is used first, no extra resume",
			items:      items(res(1000, 1), res(1000, 1)),
			claimed:    []Bin{node("s2", 4000, 16)},
			candidates: []Bin{node("s1", 4000, 16), node("s3", 4000, 16)},
		},
		{
			name:       "claimed node too small: one more",
			items:      items(res(3000, 1), res(3000, 1)),
			claimed:    []Bin{node("s2", 4000, 16)},
			candidates: []Bin{node("s1", 4000, 16)},
			resume:     []string{"s1"},
		},
		{
			name:       "pod slots count",
			items:      items(res(1, 0), res(1, 0), res(1, 0)),
			candidates: []Bin{{Name: "tiny", Free: Resources{MilliCPU: 4000, Memory: 1 << 30, Pods: 2}}, {Name: "tiny2", Free: Resources{MilliCPU: 4000, Memory: 1 << 30, Pods: 2}}},
			resume:     []string{"tiny", "tiny2"},
		},
		{
			name:     "no candidates",
			items:    items(res(1000, 1)),
			resume:   nil,
			unplaced: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanResume(tt.items, tt.claimed, tt.candidates)
			if !reflect.DeepEqual(got.Resume, tt.resume) {
				t.Errorf("Resume = %v, want %v", got.Resume, tt.resume)
			}
			if !reflect.DeepEqual(got.Unplaced, tt.unplaced) {
				t.Errorf("Unplaced = %v, want %v", got.Unplaced, tt.unplaced)
			}
			if len(got.Placement)+len(got.Unplaced) != len(tt.items) {
				t.Errorf("placed %d + unplaced %d != %d items", len(got.Placement), len(got.Unplaced), len(tt.items))
			}
		})
	}
}

func TestPlanResumeIsDeterministic(t *testing.T) {
	in := items(res(500, 1), res(1500, 2), res(1500, 2), res(700, 3), res(2500, 1))
	cands := []Bin{node("c", 4000, 16), node("a", 4000, 16), node("b", 4000, 16)}
	first := PlanResume(in, nil, cands)
	for i := 0; i < 20; i++ {
		rev := append([]Item(nil), in...)
		for l, r := 0, len(rev)-1; l < r; l, r = l+1, r-1 {
			rev[l], rev[r] = rev[r], rev[l]
		}
		if got := PlanResume(rev, nil, cands); !reflect.DeepEqual(got.Resume, first.Resume) {
			t.Fatalf("plan depends on input order: %v vs %v", got.Resume, first.Resume)
		}
	}
}

func TestAutoSize(t *testing.T) {
	shape := Resources{MilliCPU: 4000, Memory: 16 << 30, Pods: 110}
	tests := []struct {
		name     string
		pools    map[string][]Item
		max      int
		want     int
		wantPool string
	}{
		{name: "no protected pods", pools: nil, max: 10, want: 0},
		{
			name: "largest capacity pool wins",
			pools: map[string][]Item{
				"m5.large/us-east-1a/spot":  items(res(1000, 1), res(1000, 1)),
				"m5.large/us-east-1b/spot":  items(res(3000, 1), res(3000, 1), res(3000, 1)),
				"c5.xlarge/us-east-1a/spot": items(res(100, 1)),
			},
			max: 10, want: 3, wantPool: "m5.large/us-east-1b/spot",
		},
		{
			name:  "capped by max",
			pools: map[string][]Item{"p": items(res(4000, 1), res(4000, 1), res(4000, 1))},
			max:   2, want: 2, wantPool: "p",
		},
		{
			name:  "pod bigger than the shape still reserves a node",
			pools: map[string][]Item{"p": items(res(8000, 1))},
			max:   10, want: 1, wantPool: "p",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, pool := AutoSize(tt.pools, shape, tt.max)
			if got != tt.want || pool != tt.wantPool {
				t.Errorf("AutoSize = %d (%q), want %d (%q)", got, pool, tt.want, tt.wantPool)
			}
		})
	}
}

package cloudtest

import (
	"context"
	"slices"
	"sync"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
)

// PlacementScorer is an in-memory cloud.PlacementScorer. It validates requests like the EC2
// implementation and answers from ZoneScores: one entry per zone ID for a single-AZ request,
// else one entry for Region scored by its best zone. Fields may be set by a test while no call
// is in flight; the methods are safe while calls are.
type PlacementScorer struct {
	mu sync.Mutex
	// Region of the answers; default us-east-1. A request whose Regions omit it scores nothing.
	Region string
	// ZoneScores are the scores by zone ID (use1-az1).
	ZoneScores map[string]int
	// Err, if set, fails every call (e.g. an error matching cloud.ErrUnauthorized).
	Err error
	// Requests are the valid requests, in call order.
	Requests []cloud.PlacementRequest
}

var _ cloud.PlacementScorer = (*PlacementScorer)(nil)

// NewPlacementScorer returns a fake scoring the given zone IDs.
func NewPlacementScorer(zoneScores map[string]int) *PlacementScorer {
	return &PlacementScorer{Region: "us-east-1", ZoneScores: zoneScores}
}

// SetZoneScore changes one zone's score (safe while calls are in flight).
func (f *PlacementScorer) SetZoneScore(zoneID string, score int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ZoneScores == nil {
		f.ZoneScores = map[string]int{}
	}
	f.ZoneScores[zoneID] = score
}

// SetErr makes every later call fail with err (nil: succeed again).
func (f *PlacementScorer) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Err = err
}

// PlacementScores implements cloud.PlacementScorer.
func (f *PlacementScorer) PlacementScores(_ context.Context, req cloud.PlacementRequest) ([]cloud.PlacementScore, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	req.InstanceTypes = slices.Clone(req.InstanceTypes)
	req.Regions = slices.Clone(req.Regions)
	f.Requests = append(f.Requests, req)
	region := f.Region
	if region == "" {
		region = "us-east-1"
	}
	if len(req.Regions) > 0 && !slices.Contains(req.Regions, region) {
		return nil, nil
	}
	zones := make([]string, 0, len(f.ZoneScores))
	for z := range f.ZoneScores {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	var out []cloud.PlacementScore
	best := 0
	for _, z := range zones {
		best = max(best, f.ZoneScores[z])
		if req.SingleAZ {
			out = append(out, cloud.PlacementScore{Region: region, ZoneID: z, Score: f.ZoneScores[z]})
		}
	}
	if !req.SingleAZ && len(zones) > 0 {
		out = []cloud.PlacementScore{{Region: region, Score: best}}
	}
	return out, nil
}

// Calls is the number of valid requests so far.
func (f *PlacementScorer) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Requests)
}

package cloud

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Spot placement score bounds (EC2 GetSpotPlacementScores).
const (
	MinPlacementScore = 1
	MaxPlacementScore = 10
	// MaxPlacementTargetCapacity is the largest TargetCapacity EC2 accepts.
	MaxPlacementTargetCapacity = 2_000_000
)

// PlacementRequest asks EC2 how likely a Spot request is to succeed.
type PlacementRequest struct {
	// InstanceTypes the Spot request could use, at least one. EC2 scores them as one
	// diversified (capacity-optimized) fleet and recommends at least three: with one or two
	// types, or variants of one type, the score is always low. Duplicates are dropped.
	InstanceTypes []string
	// TargetCapacity is the number of instances, 1 to 2,000,000 (EC2's default unit, "units").
	TargetCapacity int32
	// SingleAZ asks for one score per availability zone (a request placed in a single zone);
	// otherwise EC2 scores whole regions (a request allowed to use every zone).
	SingleAZ bool
	// Regions narrows the scored regions (e.g. "us-east-1"). Empty: every region, of which EC2
	// returns only the best ten, so pass the cluster's region.
	Regions []string
}

// PlacementScore is one scored region or availability zone.
type PlacementScore struct {
	Region string
	// ZoneID is the availability-zone ID (use1-az1), not the zone name (us-east-1a): names are
	// mapped to IDs per account. Empty for a region's score.
	ZoneID string
	// Score is 1 (unlikely to succeed) to 10 (highly likely).
	Score int
}

// PlacementScorer probes Spot capacity before moving a workload to Spot (the reclaim-back
// probe).
type PlacementScorer interface {
	// PlacementScores returns EC2's Spot placement scores for req, every page. The error
	// matches ErrUnauthorized when the role lacks ec2:GetSpotPlacementScores.
	PlacementScores(ctx context.Context, req PlacementRequest) ([]PlacementScore, error)
}

// PlacementOptions tunes EC2PlacementScorer. Zero values take the defaults.
type PlacementOptions struct {
	// PageSize is GetSpotPlacementScores' MaxResults, 10–1000. Default 1000.
	PageSize int32
}

// EC2PlacementScorer implements PlacementScorer on the EC2 API. Throttling is retried by the
// SDK's retryer (awsclient: bounded attempts, backoff from 1 s); what is left after it is
// returned.
type EC2PlacementScorer struct {
	ec2  EC2API
	opts PlacementOptions
}

var _ PlacementScorer = (*EC2PlacementScorer)(nil)

// NewPlacementScorer returns the EC2 implementation of PlacementScorer.
func NewPlacementScorer(api EC2API, opts PlacementOptions) *EC2PlacementScorer {
	if opts.PageSize < 10 || opts.PageSize > 1000 {
		opts.PageSize = 1000
	}
	return &EC2PlacementScorer{ec2: api, opts: opts}
}

// Validate checks the request as PlacementScores does before calling EC2.
func (r PlacementRequest) Validate() error {
	switch {
	case len(r.InstanceTypes) == 0:
		return errors.New("placement score request: at least one instance type is required")
	case slices.Contains(r.InstanceTypes, ""):
		return errors.New("placement score request: an instance type is empty")
	case r.TargetCapacity < 1 || r.TargetCapacity > MaxPlacementTargetCapacity:
		return fmt.Errorf("placement score request: target capacity %d must be between 1 and %d instances", r.TargetCapacity, MaxPlacementTargetCapacity)
	case slices.Contains(r.Regions, ""):
		return errors.New("placement score request: a region is empty")
	}
	return nil
}

// PlacementScores implements PlacementScorer.
func (p *EC2PlacementScorer) PlacementScores(ctx context.Context, req PlacementRequest) ([]PlacementScore, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	in := &ec2.GetSpotPlacementScoresInput{
		InstanceTypes:          dedupe(req.InstanceTypes),
		TargetCapacity:         aws.Int32(req.TargetCapacity),
		SingleAvailabilityZone: aws.Bool(req.SingleAZ),
		MaxResults:             aws.Int32(p.opts.PageSize),
	}
	if len(req.Regions) > 0 {
		in.RegionNames = dedupe(req.Regions)
	}
	pager := ec2.NewGetSpotPlacementScoresPaginator(p.ec2, in)
	var scores []PlacementScore
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, placementError(err)
		}
		for _, s := range page.SpotPlacementScores {
			if s.Score == nil {
				continue
			}
			scores = append(scores, PlacementScore{Region: aws.ToString(s.Region), ZoneID: aws.ToString(s.AvailabilityZoneId), Score: int(*s.Score)})
		}
	}
	return scores, nil
}

// placementError says what to do about a failed GetSpotPlacementScores.
func placementError(err error) error {
	switch {
	case ErrorCode(err) == CodeUnauthorizedOperation:
		return fmt.Errorf("spot placement scores: %w: grant the controller's IAM role ec2:GetSpotPlacementScores (Resource \"*\"; see docs/AWS.md): %w", ErrUnauthorized, err)
	case Outcome(err) == OutcomeThrottled:
		return fmt.Errorf("spot placement scores: throttled by EC2 after the SDK's retries; probe again later: %w", err)
	}
	return fmt.Errorf("spot placement scores: %w", err)
}

// MinScore is the lowest zone score over zoneIDs: how likely the weakest zone a NodePool uses
// is to take Spot capacity. scores are single-AZ scores (PlacementRequest.SingleAZ); zoneIDs
// are availability-zone IDs (use1-az1), as EC2 scores them, not zone names (us-east-1a): the
// name-to-ID mapping differs per account (a Node's topology.k8s.aws/zone-id label, or
// DescribeAvailabilityZones, has the ID). It returns 0, below every score, when zoneIDs is
// empty or a zone has no score, so "MinScore(...) >= threshold" never passes on missing data.
func MinScore(scores []PlacementScore, zoneIDs []string) int {
	if len(zoneIDs) == 0 {
		return 0
	}
	byZone := make(map[string]int, len(scores))
	for _, s := range scores {
		if s.ZoneID == "" {
			continue
		}
		if cur, ok := byZone[s.ZoneID]; !ok || s.Score < cur {
			byZone[s.ZoneID] = s.Score
		}
	}
	lowest := MaxPlacementScore + 1
	for _, z := range zoneIDs {
		score, ok := byZone[z]
		if !ok {
			return 0
		}
		lowest = min(lowest, score)
	}
	return lowest
}

// dedupe drops repeated strings, keeping the first occurrence's order.
func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

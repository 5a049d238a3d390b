package cloud_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
)

func TestMinScore(t *testing.T) {
	scores := []cloud.PlacementScore{
		{Region: "us-east-1", Score: 9}, // a region's score is not a zone's
		{Region: "us-east-1", ZoneID: "use1-az1", Score: 8},
		{Region: "us-east-1", ZoneID: "use1-az2", Score: 3},
		{Region: "us-east-1", ZoneID: "use1-az4", Score: 10},
		{Region: "us-east-1", ZoneID: "use1-az4", Score: 6}, // repeated: the lower counts
	}
	for _, tc := range []struct {
		name  string
		zones []string
		want  int
	}{
		{"one zone", []string{"use1-az1"}, 8},
		{"the weakest zone decides", []string{"use1-az1", "use1-az2"}, 3},
		{"a repeated zone counts its lowest score", []string{"use1-az4"}, 6},
		{"a zone without a score is 0", []string{"use1-az1", "use1-az3"}, 0},
		{"zone names are not IDs", []string{"us-east-1a"}, 0},
		{"no zones is 0", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cloud.MinScore(scores, tc.zones); got != tc.want {
				t.Errorf("MinScore(%v) = %d, want %d", tc.zones, got, tc.want)
			}
		})
	}
	if got := cloud.MinScore(nil, []string{"use1-az1"}); got != 0 {
		t.Errorf("MinScore without scores = %d, want 0", got)
	}
}

func TestPlacementRequestValidate(t *testing.T) {
	ok := cloud.PlacementRequest{InstanceTypes: []string{"m5.large"}, TargetCapacity: 1}
	for _, tc := range []struct {
		name    string
		edit    func(*cloud.PlacementRequest)
		wantErr string
	}{
		{"valid", func(*cloud.PlacementRequest) {}, ""},
		{"no instance types", func(r *cloud.PlacementRequest) { r.InstanceTypes = nil }, "at least one instance type"},
		{"empty instance type", func(r *cloud.PlacementRequest) { r.InstanceTypes = []string{"m5.large", ""} }, "instance type is empty"},
		{"zero capacity", func(r *cloud.PlacementRequest) { r.TargetCapacity = 0 }, "target capacity 0"},
		{"negative capacity", func(r *cloud.PlacementRequest) { r.TargetCapacity = -3 }, "target capacity -3"},
		{"capacity above EC2's limit", func(r *cloud.PlacementRequest) { r.TargetCapacity = 2_000_001 }, "between 1 and 2000000"},
		{"largest capacity", func(r *cloud.PlacementRequest) { r.TargetCapacity = 2_000_000 }, ""},
		{"empty region", func(r *cloud.PlacementRequest) { r.Regions = []string{""} }, "region is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// placementSetup starts an emulator and the production PlacementScorer against it.
func placementSetup(t *testing.T, opts awsemu.Options, pageSize int32) (*awsemu.Server, *cloud.EC2PlacementScorer) {
	t.Helper()
	s := awsemutest.StartT(t, opts)
	o := s.ClientOptions()
	o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	c, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s, cloud.NewPlacementScorer(c.EC2, cloud.PlacementOptions{PageSize: pageSize})
}

var threeTypes = []string{"m5.large", "m6i.large", "m7i.large"}

func TestPlacementScoresThroughEmulator(t *testing.T) {
	s, p := placementSetup(t, awsemu.Options{}, 0)
	ctx := ctxT(t)
	zones := []string{"use1-az1", "use1-az2", "use1-az3"}
	score := func(req cloud.PlacementRequest) []cloud.PlacementScore {
		t.Helper()
		got, err := p.PlacementScores(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	single := cloud.PlacementRequest{InstanceTypes: threeTypes, TargetCapacity: 4, SingleAZ: true, Regions: []string{"us-east-1"}}

	// Defaults: 9 in every zone of the emulator's subnets, reported by zone ID.
	want := []cloud.PlacementScore{{Region: "us-east-1", ZoneID: "use1-az1", Score: 9}, {Region: "us-east-1", ZoneID: "use1-az2", Score: 9}, {Region: "us-east-1", ZoneID: "use1-az3", Score: 9}}
	if got := score(single); !reflect.DeepEqual(got, want) {
		t.Errorf("default single-AZ scores %v, want %v", got, want)
	}
	regional := single
	regional.SingleAZ = false
	if got := score(regional); !reflect.DeepEqual(got, []cloud.PlacementScore{{Region: "us-east-1", Score: 9}}) {
		t.Errorf("default regional scores %v, want one us-east-1 entry of 9", got)
	}

	// A lowered score: the weakest requested type decides the zone, which sorts last.
	s.SetPlacementScore("m6i.large", "us-east-1b", 3)
	got := score(single)
	if len(got) != 3 || got[2] != (cloud.PlacementScore{Region: "us-east-1", ZoneID: "use1-az2", Score: 3}) {
		t.Errorf("after lowering m6i.large in us-east-1b: %v, want use1-az2 last with 3", got)
	}
	if m := cloud.MinScore(got, zones); m != 3 {
		t.Errorf("MinScore over the three zones = %d, want 3", m)
	}
	if m := cloud.MinScore(got, []string{"use1-az1", "use1-az3"}); m != 9 {
		t.Errorf("MinScore without use1-az2 = %d, want 9", m)
	}
	if got := score(regional); len(got) != 1 || got[0].Score != 9 {
		t.Errorf("regional score %v, want 9 (the best zone)", got)
	}
	other := single
	other.InstanceTypes = []string{"c5.large", "c6i.large", "c7i.large"}
	if m := cloud.MinScore(score(other), zones); m != 9 {
		t.Errorf("types not lowered: MinScore %d, want 9", m)
	}

	// No capacity (the ICE fault on launches) scores 1.
	s.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "m7i.large", Zone: "us-east-1c", OnRun: true}}})
	if m := cloud.MinScore(score(single), []string{"use1-az3"}); m != 1 {
		t.Errorf("zone without m7i.large capacity: %d, want 1", m)
	}
	s.SetFaults(awsemu.Faults{})

	// Another region scores nothing here; MinScore turns that into 0.
	elsewhere := single
	elsewhere.Regions = []string{"eu-west-1"}
	if got := score(elsewhere); len(got) != 0 || cloud.MinScore(got, zones) != 0 {
		t.Errorf("scores for eu-west-1 from a us-east-1 emulator: %v", got)
	}

	// Invalid input fails before any call.
	before := s.TotalCalls("GetSpotPlacementScores")
	for _, bad := range []cloud.PlacementRequest{{TargetCapacity: 1}, {InstanceTypes: threeTypes}} {
		if _, err := p.PlacementScores(ctx, bad); err == nil {
			t.Errorf("request %+v accepted", bad)
		}
	}
	if n := s.TotalCalls("GetSpotPlacementScores") - before; n != 0 {
		t.Errorf("invalid requests reached EC2 %d times", n)
	}
}

func TestPlacementScoresPaging(t *testing.T) {
	subnets := map[string]string{}
	for i := range 12 {
		subnets[fmt.Sprintf("subnet-%d", i)] = fmt.Sprintf("us-east-1%c", 'a'+i)
	}
	s, p := placementSetup(t, awsemu.Options{Subnets: subnets}, 10)
	got, err := p.PlacementScores(ctxT(t), cloud.PlacementRequest{InstanceTypes: threeTypes, TargetCapacity: 1, SingleAZ: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sc := range got {
		seen[sc.ZoneID] = true
	}
	if len(got) != 12 || len(seen) != 12 || !seen["use1-az12"] {
		t.Errorf("%d scores over %d zones, want the 12 zones once each: %v", len(got), len(seen), got)
	}
	if n := s.Calls("GetSpotPlacementScores", ""); n != 2 {
		t.Errorf("%d GetSpotPlacementScores calls, want 2 pages of at most 10", n)
	}
}

// deniedEC2 answers GetSpotPlacementScores as EC2 does for a role without the permission.
type deniedEC2 struct{ cloud.EC2API }

func (deniedEC2) GetSpotPlacementScores(context.Context, *ec2.GetSpotPlacementScoresInput, ...func(*ec2.Options)) (*ec2.GetSpotPlacementScoresOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."}
}

func TestPlacementScoresErrors(t *testing.T) {
	ctx := ctxT(t)
	req := cloud.PlacementRequest{InstanceTypes: threeTypes, TargetCapacity: 1, SingleAZ: true}

	_, err := cloud.NewPlacementScorer(deniedEC2{}, cloud.PlacementOptions{}).PlacementScores(ctx, req)
	if !errors.Is(err, cloud.ErrUnauthorized) || cloud.ErrorCode(err) != "UnauthorizedOperation" || !strings.Contains(err.Error(), "ec2:GetSpotPlacementScores") {
		t.Errorf("unauthorized: %v, want ErrUnauthorized naming ec2:GetSpotPlacementScores", err)
	}

	// Throttling: the SDK's retryer rides out some throttles, and what is left says so.
	s, p := placementSetup(t, awsemu.Options{}, 0)
	s.SetFaults(awsemu.Faults{EC2Throttle: 0.5})
	if _, err := p.PlacementScores(ctx, req); err != nil {
		t.Errorf("half the calls throttled: %v, want the SDK to retry", err)
	}
	s.SetFaults(awsemu.Faults{EC2Throttle: 1})
	_, err = p.PlacementScores(ctx, req)
	if cloud.ErrorCode(err) != "RequestLimitExceeded" || !strings.Contains(err.Error(), "throttled") {
		t.Errorf("always throttled: %v", err)
	}
	if errors.Is(err, cloud.ErrUnauthorized) {
		t.Errorf("throttling matched ErrUnauthorized: %v", err)
	}
}

package awsemu_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
)

func TestZoneID(t *testing.T) {
	for zone, want := range map[string]string{
		"us-east-1a":      "use1-az1",
		"us-east-1c":      "use1-az3",
		"us-west-2d":      "usw2-az4",
		"eu-west-1b":      "euw1-az2",
		"eu-central-1a":   "euc1-az1",
		"ap-southeast-2a": "apse2-az1",
		"ap-northeast-1c": "apne1-az3",
		"us-gov-west-1a":  "usgw1-az1",
		"us-east-1":       "us-east-1", // a region, not a zone
		"use1-az1":        "use1-az1",  // already an ID
		"":                "",
	} {
		if got := awsemu.ZoneID(zone); got != want {
			t.Errorf("ZoneID(%q) = %q, want %q", zone, got, want)
		}
	}
}

func TestPlacementScoreModel(t *testing.T) {
	e := awsemu.New(awsemu.Options{})
	defer e.Close()
	if got := e.PlacementScore("m5.large", "us-east-1a"); got != awsemu.DefaultPlacementScore {
		t.Errorf("default score %d, want %d", got, awsemu.DefaultPlacementScore)
	}
	e.SetPlacementScore("", "", 7)
	e.SetPlacementScore("", "us-east-1b", 6)
	e.SetPlacementScore("m5.large", "", 5)
	e.SetPlacementScore("m5.large", "us-east-1b", 2)
	e.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "c5.large", Zone: "us-east-1a"}}})
	for _, tc := range []struct {
		instanceType, zone string
		want               int
	}{
		{"m5.large", "us-east-1b", 2}, // (type, zone)
		{"m5.large", "us-east-1a", 5}, // (type, any zone)
		{"r5.large", "us-east-1b", 6}, // (any type, zone)
		{"r5.large", "us-east-1c", 7}, // (any, any)
		{"c5.large", "us-east-1a", 1}, // no capacity
		{"c5.large", "us-east-1c", 7}, // capacity elsewhere
	} {
		if got := e.PlacementScore(tc.instanceType, tc.zone); got != tc.want {
			t.Errorf("score of %s in %s = %d, want %d", tc.instanceType, tc.zone, got, tc.want)
		}
	}
	e.ResetPlacementScores()
	if got := e.PlacementScore("m5.large", "us-east-1b"); got != awsemu.DefaultPlacementScore {
		t.Errorf("after reset: %d, want the default", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("score 11 accepted")
		}
	}()
	e.SetPlacementScore("m5.large", "us-east-1a", 11)
}

func TestGetSpotPlacementScoresThroughSDK(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{})
	api := clients(t, s).EC2
	ctx := ctxT(t)
	types := []string{"m5.large", "m6i.large", "m7i.large"}

	// Zones come back best first, as IDs, and a zone named only in SetPlacementScore counts.
	s.SetPlacementScore("m6i.large", "us-east-1a", 4)
	s.SetPlacementScore("", "us-east-1d", 10)
	out, err := api.GetSpotPlacementScores(ctx, &ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(10),
		SingleAvailabilityZone: aws.Bool(true), RegionNames: []string{"us-east-1"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range out.SpotPlacementScores {
		if aws.ToString(sc.Region) != "us-east-1" {
			t.Errorf("region %q", aws.ToString(sc.Region))
		}
		got = append(got, fmt.Sprintf("%s=%d", aws.ToString(sc.AvailabilityZoneId), aws.ToInt32(sc.Score)))
	}
	if want := "use1-az4=10 use1-az2=9 use1-az3=9 use1-az1=4"; strings.Join(got, " ") != want {
		t.Errorf("single-AZ scores %v, want %s", got, want)
	}
	if out.NextToken != nil {
		t.Errorf("one page without MaxResults, got NextToken %q", aws.ToString(out.NextToken))
	}

	// Regional: one entry without a zone, the best zone's score.
	out, err = api.GetSpotPlacementScores(ctx, &ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.SpotPlacementScores) != 1 || out.SpotPlacementScores[0].AvailabilityZoneId != nil || aws.ToInt32(out.SpotPlacementScores[0].Score) != 10 {
		t.Errorf("regional scores %+v, want one region entry of 10", out.SpotPlacementScores)
	}

	// Bad input (a missing TargetCapacity never leaves the SDK: it validates required members).
	for _, tc := range []struct {
		name string
		in   ec2.GetSpotPlacementScoresInput
		code string
	}{
		{"capacity 0", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(0)}, "InvalidParameterValue"},
		{"capacity above 2,000,000", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(2_000_001)}, "InvalidParameterValue"},
		{"no types", ec2.GetSpotPlacementScoresInput{TargetCapacity: aws.Int32(1)}, "MissingParameter"},
		{"malformed type", ec2.GetSpotPlacementScoresInput{InstanceTypes: []string{"m5large"}, TargetCapacity: aws.Int32(1)}, "InvalidParameterValue"},
		{"MaxResults below 10", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(1), MaxResults: aws.Int32(5)}, "InvalidParameterValue"},
		{"bad token", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(1), NextToken: aws.String("nope")}, "InvalidParameterValue"},
		{"bad unit", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(1), TargetCapacityUnitType: "cores"}, "InvalidParameterValue"},
		{"types and requirements", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(1), InstanceRequirementsWithMetadata: requirements()}, "InvalidParameterCombination"},
		{"requirements (not emulated)", ec2.GetSpotPlacementScoresInput{TargetCapacity: aws.Int32(1), InstanceRequirementsWithMetadata: requirements()}, "UnsupportedOperation"},
		{"dry run", ec2.GetSpotPlacementScoresInput{InstanceTypes: types, TargetCapacity: aws.Int32(1), DryRun: aws.Bool(true)}, "DryRunOperation"},
	} {
		in := tc.in
		if _, err := api.GetSpotPlacementScores(ctx, &in); apiCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
}

func TestGetSpotPlacementScoresPaginator(t *testing.T) {
	subnets := map[string]string{}
	for i := range 25 {
		subnets[fmt.Sprintf("subnet-%d", i)] = fmt.Sprintf("eu-west-1%c", 'a'+i)
	}
	s := awsemutest.StartT(t, awsemu.Options{Region: "eu-west-1", Subnets: subnets})
	api := clients(t, s).EC2
	pager := ec2.NewGetSpotPlacementScoresPaginator(api, &ec2.GetSpotPlacementScoresInput{InstanceTypes: []string{"m5.large"},
		TargetCapacity: aws.Int32(2), SingleAvailabilityZone: aws.Bool(true), MaxResults: aws.Int32(10)})
	pages, seen := 0, map[string]bool{}
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, sc := range page.SpotPlacementScores {
			seen[aws.ToString(sc.AvailabilityZoneId)] = true
		}
	}
	if pages != 3 || len(seen) != 25 || !seen["euw1-az25"] {
		t.Errorf("%d pages over %d zones, want 3 pages of the 25 zones", pages, len(seen))
	}
}

func requirements() *ec2types.InstanceRequirementsWithMetadataRequest {
	return &ec2types.InstanceRequirementsWithMetadataRequest{ArchitectureTypes: []ec2types.ArchitectureType{ec2types.ArchitectureTypeX8664}}
}

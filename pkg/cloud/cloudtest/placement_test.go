package cloudtest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/cloudtest"
)

func TestPlacementScorer(t *testing.T) {
	ctx := context.Background()
	f := cloudtest.NewPlacementScorer(map[string]int{"use1-az2": 4, "use1-az1": 8})
	req := cloud.PlacementRequest{InstanceTypes: []string{"m5.large"}, TargetCapacity: 2, SingleAZ: true}

	got, err := f.PlacementScores(ctx, req)
	want := []cloud.PlacementScore{{Region: "us-east-1", ZoneID: "use1-az1", Score: 8}, {Region: "us-east-1", ZoneID: "use1-az2", Score: 4}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("single-AZ: %v %v, want %v", got, err, want)
	}
	req.SingleAZ = false
	if got, _ := f.PlacementScores(ctx, req); !reflect.DeepEqual(got, []cloud.PlacementScore{{Region: "us-east-1", Score: 8}}) {
		t.Errorf("regional: %v", got)
	}
	req.Regions = []string{"eu-west-1"}
	if got, _ := f.PlacementScores(ctx, req); len(got) != 0 {
		t.Errorf("another region: %v", got)
	}
	if _, err := f.PlacementScores(ctx, cloud.PlacementRequest{TargetCapacity: 1}); err == nil {
		t.Error("request without instance types accepted")
	}
	denied := errors.New("denied")
	f.SetErr(denied)
	if _, err := f.PlacementScores(ctx, req); !errors.Is(err, denied) {
		t.Errorf("with Err set: %v", err)
	}
	if n := f.Calls(); n != 3 {
		t.Errorf("%d calls recorded, want the 3 valid ones that reached the fake's scores", n)
	}
}

package cloud_test

import (
	"errors"
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
)

// TestResumeAll: one StartInstances call for the whole set; when one instance has no capacity,
// EC2 fails the call for all, and each instance gets its own answer.
func TestResumeAll(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	var ids []string
	for slot := range 3 {
		req := request(slot)
		if slot == 2 {
			req.InstanceTypes = []string{"m5a.large"}
		}
		inst, err := p.Launch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	hibernateAll := func() {
		for _, id := range ids {
			waitFor(t, ctx, p, id, inState(cloud.StateRunning))
			if err := p.Hibernate(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			waitFor(t, ctx, p, id, inState(cloud.StateStopped))
		}
	}
	hibernateAll()

	before := s.Calls("StartInstances", "")
	res := p.ResumeAll(ctx, ids)
	for _, id := range ids {
		if err, ok := res[id]; !ok || err != nil {
			t.Fatalf("ResumeAll(%s) = %v (present %v), want started", id, err, ok)
		}
	}
	if got := s.Calls("StartInstances", "") - before; got != 1 {
		t.Fatalf("%d StartInstances calls for 3 instances, want 1", got)
	}

	hibernateAll()
	s.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "m5a.large", OnStart: true}}})
	res = p.ResumeAll(ctx, ids)
	for i, id := range ids {
		err := res[id]
		if i == 2 {
			if !errors.Is(err, cloud.ErrInsufficientCapacity) {
				t.Fatalf("ResumeAll(%s, the m5a.large) = %v, want insufficient capacity", id, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ResumeAll(%s) = %v, want started despite the other instance's ICE", id, err)
		}
		waitFor(t, ctx, p, id, inState(cloud.StateRunning))
	}
	if got := waitFor(t, ctx, p, ids[2], inState(cloud.StateStopped)); !got.Hibernated {
		t.Errorf("the ICE'd instance changed: %+v", got)
	}
	if res := p.ResumeAll(ctx, nil); len(res) != 0 {
		t.Fatalf("ResumeAll(nil) = %v", res)
	}
}

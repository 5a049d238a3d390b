package cloud_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
)

var fastDelays = awsemu.Delays{Launch: 5 * time.Millisecond, Stop: 5 * time.Millisecond, Start: 5 * time.Millisecond, Terminate: 5 * time.Millisecond}

// setup starts an emulator and the production Instances implementation against it.
func setup(t *testing.T, opts awsemu.Options) (*awsemu.Server, *cloud.EC2Instances) {
	t.Helper()
	if opts.Delays == (awsemu.Delays{}) {
		opts.Delays = fastDelays
	}
	s := awsemutest.StartT(t, opts)
	o := s.ClientOptions()
	o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	c, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s, cloud.NewInstances(c.EC2, cloud.InstancesOptions{NotFoundInitialBackoff: 5 * time.Millisecond, NotFoundTimeout: time.Second, PageSize: 5})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func request(slot int) cloud.LaunchRequest {
	return cloud.LaunchRequest{
		Pool: "web", Slot: slot, Generation: 1,
		InstanceTypes:    []string{"m5.large", "m5a.large"},
		SubnetIDs:        []string{"subnet-a", "subnet-b"},
		ImageID:          "ami-0123",
		InstanceProfile:  "lifeboat-node",
		SecurityGroupIDs: []string{"sg-1"},
		UserData:         "#!/bin/bash\n/etc/eks/bootstrap.sh c --kubelet-extra-args '--node-labels=lifeboat.dev/pool=web'",
		RootVolumeGiB:    40,
		Tags:             map[string]string{"team": "platform"},
	}
}

// waitFor polls the instance until cond holds.
func waitFor(t *testing.T, ctx context.Context, p *cloud.EC2Instances, id string, cond func(cloud.Instance) bool) cloud.Instance {
	t.Helper()
	for {
		inst, err := p.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if cond(*inst) {
			return *inst
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s stuck in %s (%s)", id, inst.State, inst.StateReason)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func inState(s string) func(cloud.Instance) bool {
	return func(i cloud.Instance) bool { return i.State == s }
}

func TestLifecycle(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)

	inst, err := p.Launch(ctx, request(3))
	if err != nil {
		t.Fatal(err)
	}
	if inst.Pool != "web" || inst.Slot != 3 || inst.Generation != 1 || !inst.HibernationConfigured || inst.InstanceType != "m5.large" || inst.Zone != "us-east-1a" {
		t.Errorf("launched %+v", inst)
	}
	if inst.ClientToken != cloud.ClientToken("web", 3, 1) || len(inst.ClientToken) > 64 {
		t.Errorf("client token %q", inst.ClientToken)
	}
	for k := range inst.Tags {
		if strings.HasPrefix(k, "karpenter.sh/") || strings.HasPrefix(k, "kubernetes.io/cluster/") {
			t.Errorf("pool instance carries Karpenter/cluster tag %q", k)
		}
	}
	view, _ := s.Instance(inst.ID)
	if !view.RootEncrypted || view.RootVolumeGiB != 40 || !strings.Contains(view.UserData, "bootstrap.sh") || view.Tags["team"] != "platform" {
		t.Errorf("emulator saw %+v", view)
	}
	if got := inst.ProviderID(); got != "aws:///us-east-1a/"+inst.ID {
		t.Errorf("providerID %q", got)
	}

	waitFor(t, ctx, p, inst.ID, inState(cloud.StateRunning))
	if err := p.Hibernate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	stopped := waitFor(t, ctx, p, inst.ID, inState(cloud.StateStopped))
	if !stopped.Hibernated || stopped.DegradedStop() || stopped.StateReason != cloud.ReasonUserInitiatedHibernate {
		t.Errorf("after hibernate: %+v", stopped)
	}
	if err := p.Resume(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, p, inst.ID, inState(cloud.StateRunning))

	list, err := p.List(ctx, "web")
	if err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("list: %v %+v", err, list)
	}
	if err := p.Terminate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, p, inst.ID, inState(cloud.StateTerminated))
	if list, err := p.List(ctx, "web"); err != nil || len(list) != 0 {
		t.Errorf("list after terminate: %v %+v", err, list)
	}
	// Terminating again is fine.
	if err := p.Terminate(ctx, inst.ID); err != nil {
		t.Errorf("terminate twice: %v", err)
	}
}

func TestListPaginatesAndFiltersByPool(t *testing.T) {
	_, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	for slot := range 12 {
		if _, err := p.Launch(ctx, request(slot)); err != nil {
			t.Fatal(err)
		}
	}
	other := request(0)
	other.Pool = "batch"
	if _, err := p.Launch(ctx, other); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int]bool{}
	for _, i := range list {
		if i.Pool != "web" {
			t.Errorf("pool %q listed", i.Pool)
		}
		slots[i.Slot] = true
	}
	if len(list) != 12 || len(slots) != 12 {
		t.Errorf("listed %d instances in %d slots, want 12 (over 3 pages of 5)", len(list), len(slots))
	}
}

func TestLaunchNeverDoubles(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	first, err := p.Launch(ctx, request(1))
	if err != nil {
		t.Fatal(err)
	}
	// The same launch again (a retry after a timeout, or a restarted controller).
	again, err := p.Launch(ctx, request(1))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Errorf("repeated launch got %s, first %s", again.ID, first.ID)
	}
	// The same slot and generation with other parameters: EC2 answers
	// IdempotentParameterMismatch and the provider returns the slot's instance.
	changed := request(1)
	changed.InstanceTypes = []string{"c5.large"}
	other, err := p.Launch(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	if other.ID != first.ID {
		t.Errorf("launch with other parameters got %s, want the slot's %s", other.ID, first.ID)
	}
	if got := s.Calls("RunInstances", "IdempotentParameterMismatch"); got != 1 {
		t.Errorf("IdempotentParameterMismatch answered %d times, want 1", got)
	}
	// A new generation is a new instance.
	next := request(1)
	next.Generation = 2
	second, err := p.Launch(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID {
		t.Error("a new generation reused the old instance")
	}
	if n := len(s.Instances()); n != 2 {
		t.Errorf("%d instances, want 2", n)
	}
}

func TestThrottlingHalfTheCalls(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	s.SetFaults(awsemu.Faults{EC2Throttle: 0.5})
	var ops int
	var ids []string
	for slot := range 5 {
		inst, err := p.Launch(ctx, request(slot))
		if err != nil {
			t.Fatalf("launch under throttling: %v", err)
		}
		ids = append(ids, inst.ID)
		ops += 2 // RunInstances + the visibility DescribeInstances
	}
	for _, id := range ids {
		waitFor(t, ctx, p, id, inState(cloud.StateRunning))
		if err := p.Hibernate(ctx, id); err != nil {
			t.Fatalf("hibernate under throttling: %v", err)
		}
		ops++
	}
	if list, err := p.List(ctx, "web"); err != nil || len(list) != 5 {
		t.Fatalf("list under throttling: %v, %d instances", err, len(list))
	}
	for _, id := range ids {
		if err := p.Terminate(ctx, id); err != nil {
			t.Fatalf("terminate under throttling: %v", err)
		}
		ops++
	}
	if n := len(s.Instances()); n != 5 {
		t.Errorf("%d instances after throttled launches, want 5 (retries must not double)", n)
	}
	throttled := 0
	for _, action := range []string{"RunInstances", "DescribeInstances", "StopInstances", "TerminateInstances"} {
		throttled += s.Calls(action, "RequestLimitExceeded")
	}
	if throttled < ops/2 {
		t.Errorf("only %d throttled answers for %d operations: the fault did not apply", throttled, ops)
	}
	// Every other call is throttled, so each mutating operation needs at most two attempts:
	// retries are bounded, not a busy loop.
	for _, action := range []string{"RunInstances", "StopInstances", "TerminateInstances"} {
		if ok, all := s.Calls(action, ""), s.TotalCalls(action); all > 2*ok {
			t.Errorf("%s: %d attempts for %d successes", action, all, ok)
		}
	}
}

func TestFallbackOnInsufficientCapacity(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	s.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "m5.large"}, {InstanceType: "m5a.large", Zone: "us-east-1a"}}})
	inst, err := p.Launch(ctx, request(0))
	if err != nil {
		t.Fatal(err)
	}
	if inst.InstanceType != "m5a.large" || inst.Zone != "us-east-1b" {
		t.Errorf("launched %s in %s, want the fallback m5a.large in us-east-1b", inst.InstanceType, inst.Zone)
	}
	// ICE is not retried by the SDK: the fallback is the retry.
	if got := s.Calls("RunInstances", "InsufficientInstanceCapacity"); got != 3 {
		t.Errorf("%d ICE answers, want 3 (m5.large in a and b, m5a.large in a)", got)
	}

	s.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{OnRun: true}}})
	_, err = p.Launch(ctx, request(1))
	if !errors.Is(err, cloud.ErrInsufficientCapacity) {
		t.Errorf("launch without any capacity: %v, want ErrInsufficientCapacity", err)
	}
}

func TestResumeInsufficientCapacity(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	inst, err := p.Launch(ctx, request(0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, p, inst.ID, inState(cloud.StateRunning))
	if err := p.Hibernate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, p, inst.ID, inState(cloud.StateStopped))
	s.SetFaults(awsemu.Faults{Capacity: []awsemu.CapacityFault{{InstanceType: "m5.large", Zone: "us-east-1a", OnStart: true}}})
	err = p.Resume(ctx, inst.ID)
	if !errors.Is(err, cloud.ErrInsufficientCapacity) || cloud.ErrorCode(err) != cloud.CodeInsufficientInstanceCapacity {
		t.Fatalf("resume without capacity: %v", err)
	}
	if got := waitFor(t, ctx, p, inst.ID, inState(cloud.StateStopped)); !got.Hibernated {
		t.Errorf("failed resume changed the instance: %+v", got)
	}
}

func TestNotFoundAfterLaunchTolerated(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	s.SetFaults(awsemu.Faults{NotFoundAfterLaunch: 100 * time.Millisecond})
	inst, err := p.Launch(ctx, request(0))
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls("DescribeInstances", cloud.CodeInstanceNotFound) == 0 {
		t.Error("the launch never saw InvalidInstanceID.NotFound; the fault did not apply")
	}
	if inst.State == "" || inst.Pool != "web" {
		t.Errorf("launched %+v", inst)
	}
	// An ID that never existed: Get is NotFound at once, Hibernate after the window.
	if _, err := p.Get(ctx, "i-00000000000000bad"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("get unknown: %v", err)
	}
	if err := p.Hibernate(ctx, "i-00000000000000bad"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("hibernate unknown: %v", err)
	}
}

func TestHibernationDegradedToStop(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	inst, err := p.Launch(ctx, request(0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, p, inst.ID, inState(cloud.StateRunning))
	s.SetFaults(awsemu.Faults{DegradeHibernationOf: map[string]bool{inst.ID: true}})
	if err := p.Hibernate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, ctx, p, inst.ID, inState(cloud.StateStopped))
	if got.Hibernated || !got.DegradedStop() || got.StateReason != cloud.ReasonUserInitiatedShutdown {
		t.Errorf("degraded hibernation not detected: %+v", got)
	}
}

func TestHibernateErrors(t *testing.T) {
	_, p := setup(t, awsemu.Options{Delays: awsemu.Delays{Launch: 500 * time.Millisecond}})
	ctx := ctxT(t)
	inst, err := p.Launch(ctx, request(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Hibernate(ctx, inst.ID); !errors.Is(err, cloud.ErrIncorrectState) {
		t.Errorf("hibernate a pending instance: %v, want ErrIncorrectState", err)
	}
}

func TestLaunchValidation(t *testing.T) {
	_, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	for name, mutate := range map[string]func(*cloud.LaunchRequest){
		"karpenter tag":  func(r *cloud.LaunchRequest) { r.Tags = map[string]string{"karpenter.sh/nodepool": "x"} },
		"cluster tag":    func(r *cloud.LaunchRequest) { r.Tags = map[string]string{"kubernetes.io/cluster/prod": "owned"} },
		"no pool":        func(r *cloud.LaunchRequest) { r.Pool = "" },
		"no types":       func(r *cloud.LaunchRequest) { r.InstanceTypes = nil },
		"no image":       func(r *cloud.LaunchRequest) { r.ImageID = "" },
		"no root volume": func(r *cloud.LaunchRequest) { r.RootVolumeGiB = 0 },
	} {
		r := request(0)
		mutate(&r)
		if _, err := p.Launch(ctx, r); err == nil {
			t.Errorf("%s: launch accepted", name)
		}
	}
}

func TestMetricsCountCallsAndAttempts(t *testing.T) {
	s, p := setup(t, awsemu.Options{})
	ctx := ctxT(t)
	before := testutil.ToFloat64(cloud.APICalls.WithLabelValues("ec2", "RunInstances", cloud.OutcomeSuccess))
	throttledBefore := testutil.ToFloat64(cloud.APIAttempts.WithLabelValues("ec2", "RunInstances", cloud.OutcomeThrottled))
	s.SetFaults(awsemu.Faults{EC2Throttle: 0.5})
	if _, err := p.Launch(ctx, request(0)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(cloud.APICalls.WithLabelValues("ec2", "RunInstances", cloud.OutcomeSuccess)) - before; got != 1 {
		t.Errorf("RunInstances successes counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(cloud.APIAttempts.WithLabelValues("ec2", "RunInstances", cloud.OutcomeThrottled)) - throttledBefore; got != float64(s.Calls("RunInstances", "RequestLimitExceeded")) {
		t.Errorf("throttled attempts counted %v, emulator throttled %d", got, s.Calls("RunInstances", "RequestLimitExceeded"))
	}
}

func TestClientToken(t *testing.T) {
	a := cloud.ClientToken("web", 1, 1)
	if a != cloud.ClientToken("web", 1, 1) {
		t.Error("token not deterministic")
	}
	for _, other := range []string{cloud.ClientToken("web", 1, 2), cloud.ClientToken("web", 2, 1), cloud.ClientToken("web1", 1, 1), cloud.ClientToken("web", 11, 1)} {
		if other == a {
			t.Errorf("token collision %s", a)
		}
	}
	long := cloud.ClientToken(strings.Repeat("p", 253), 1<<30, 1<<30)
	if len(long) > 64 {
		t.Errorf("token of %d characters; EC2 allows 64", len(long))
	}
}

package awsemu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
)

// fastDelays keep the state machine in milliseconds.
var fastDelays = awsemu.Delays{Launch: 5 * time.Millisecond, Stop: 5 * time.Millisecond, Start: 5 * time.Millisecond, Terminate: 5 * time.Millisecond}

func clients(t *testing.T, s *awsemu.Server) *awsclient.Clients {
	t.Helper()
	o := s.ClientOptions()
	o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	c, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func waitState(t *testing.T, ctx context.Context, api *ec2.Client, id string, want ec2types.InstanceStateName) ec2types.Instance {
	t.Helper()
	for {
		out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatalf("describe %s: %v", id, err)
		}
		inst := out.Reservations[0].Instances[0]
		if inst.State.Name == want {
			return inst
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: state %s, want %s: %v", id, inst.State.Name, want, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func TestEC2StateMachineThroughSDK(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{Delays: fastDelays})
	api := clients(t, s).EC2
	ctx := ctxT(t)

	run, err := api.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-1"), InstanceType: ec2types.InstanceTypeM5Large, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		SubnetId:           aws.String("subnet-b"),
		HibernationOptions: &ec2types.HibernationOptionsRequest{Configured: aws.Bool(true)},
		BlockDeviceMappings: []ec2types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{
			VolumeSize: aws.Int32(40), Encrypted: aws.Bool(true)}}},
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}},
		UserData:          aws.String("aGVsbG8="),
	})
	if err != nil {
		t.Fatal(err)
	}
	inst := run.Instances[0]
	id := aws.ToString(inst.InstanceId)
	if inst.State.Name != ec2types.InstanceStateNamePending || aws.ToInt32(inst.State.Code) != 0 {
		t.Errorf("new instance state %+v, want pending/0", inst.State)
	}
	if got := aws.ToString(inst.Placement.AvailabilityZone); got != "us-east-1b" {
		t.Errorf("zone %q, want us-east-1b from subnet-b", got)
	}
	if !aws.ToBool(inst.HibernationOptions.Configured) || inst.LaunchTime == nil || aws.ToString(inst.PrivateDnsName) == "" {
		t.Errorf("instance fields missing: %+v", inst)
	}
	if len(inst.Tags) != 1 || aws.ToString(inst.Tags[0].Key) != "k" {
		t.Errorf("tags %+v", inst.Tags)
	}
	waitState(t, ctx, api, id, ec2types.InstanceStateNameRunning)

	stop, err := api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if sc := stop.StoppingInstances[0]; sc.CurrentState.Name != ec2types.InstanceStateNameStopping || sc.PreviousState.Name != ec2types.InstanceStateNameRunning {
		t.Errorf("stop change %+v -> %+v", sc.PreviousState, sc.CurrentState)
	}
	stopped := waitState(t, ctx, api, id, ec2types.InstanceStateNameStopped)
	if got := aws.ToString(stopped.StateReason.Code); got != "Client.UserInitiatedHibernate" {
		t.Errorf("state reason %q, want Client.UserInitiatedHibernate", got)
	}

	if _, err := api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	running := waitState(t, ctx, api, id, ec2types.InstanceStateNameRunning)
	if running.StateReason != nil {
		t.Errorf("running instance keeps state reason %+v", running.StateReason)
	}

	if _, err := api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: aws.String("extra"), Value: aws.String("1")}}}); err != nil {
		t.Fatal(err)
	}
	term, err := api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if term.TerminatingInstances[0].CurrentState.Name != ec2types.InstanceStateNameShuttingDown {
		t.Errorf("terminate change %+v", term.TerminatingInstances[0])
	}
	gone := waitState(t, ctx, api, id, ec2types.InstanceStateNameTerminated)
	if len(gone.Tags) != 2 {
		t.Errorf("tags after CreateTags: %+v", gone.Tags)
	}
	if _, err := api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); apiCode(err) != "IncorrectInstanceState" {
		t.Errorf("start terminated: %v, want IncorrectInstanceState", err)
	}
}

func TestEC2ErrorsThroughSDK(t *testing.T) {
	// A slow launch, so that the instance is surely still pending when hibernated below.
	s := awsemutest.StartT(t, awsemu.Options{Delays: awsemu.Delays{Launch: 300 * time.Millisecond}})
	api := clients(t, s).EC2
	ctx := ctxT(t)

	_, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0000000000000dead"}})
	if apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("describe unknown: %v", err)
	}
	_, err = api.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1), SubnetId: aws.String("subnet-nope")})
	if apiCode(err) != "InvalidSubnetID.NotFound" {
		t.Errorf("unknown subnet: %v", err)
	}
	// Hibernation needs an encrypted root volume larger than RAM.
	_, err = api.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		HibernationOptions:  &ec2types.HibernationOptionsRequest{Configured: aws.Bool(true)},
		BlockDeviceMappings: []ec2types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{VolumeSize: aws.Int32(40)}}}})
	if apiCode(err) != "UnsupportedHibernationConfiguration" {
		t.Errorf("unencrypted root: %v", err)
	}
	// Hibernating an instance launched without hibernation.
	run, err := api.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(run.Instances[0].InstanceId)
	if _, err := api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)}); apiCode(err) != "IncorrectInstanceState" {
		t.Errorf("hibernate pending: %v, want IncorrectInstanceState", err)
	}
	waitState(t, ctx, api, id, ec2types.InstanceStateNameRunning)
	if _, err := api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)}); apiCode(err) != "UnsupportedHibernationConfiguration" {
		t.Errorf("hibernate unconfigured: %v", err)
	}
	_, err = api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("no-such-filter"), Values: []string{"x"}}}})
	if apiCode(err) != "InvalidParameterValue" {
		t.Errorf("bad filter: %v", err)
	}

	// Server faults come back as the SDK sees real ones, after its bounded retries.
	s.SetFaults(awsemu.Faults{EC2ServerError: 1})
	_, err = api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if apiCode(err) != "InternalError" {
		t.Errorf("5xx fault: %v", err)
	}
	if got := s.Calls("DescribeInstances", "InternalError"); got != 8 {
		t.Errorf("DescribeInstances answered InternalError %d times, want 8 (max attempts)", got)
	}
}

func TestEC2ClientTokenIdempotency(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{Delays: fastDelays})
	api := clients(t, s).EC2
	ctx := ctxT(t)
	in := &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ClientToken: aws.String("tok-1")}
	first, err := api.RunInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := api.RunInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := aws.ToString(first.Instances[0].InstanceId), aws.ToString(again.Instances[0].InstanceId); a != b || aws.ToString(first.ReservationId) != aws.ToString(again.ReservationId) {
		t.Errorf("repeated launch returned %s, first %s", b, a)
	}
	changed := *in
	changed.InstanceType = "m5a.large"
	if _, err := api.RunInstances(ctx, &changed); apiCode(err) != "IdempotentParameterMismatch" {
		t.Errorf("changed parameters under one token: %v, want IdempotentParameterMismatch", err)
	}
	if n := len(s.Instances()); n != 1 {
		t.Errorf("%d instances, want 1", n)
	}
	out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("client-token"), Values: []string{"tok-1"}}}})
	if err != nil || len(out.Reservations) != 1 {
		t.Fatalf("filter by client-token: %v %+v", err, out)
	}
}

func TestEC2DescribePagination(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{Delays: fastDelays})
	api := clients(t, s).EC2
	ctx := ctxT(t)
	if _, err := api.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(12), MaxCount: aws.Int32(12),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{{Key: aws.String("lifeboat.dev/pool"), Value: aws.String("p")}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	pager := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{
		MaxResults: aws.Int32(5),
		Filters:    []ec2types.Filter{{Name: aws.String("tag:lifeboat.dev/pool"), Values: []string{"p"}}},
	})
	pages, seen := 0, map[string]bool{}
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				seen[aws.ToString(i.InstanceId)] = true
			}
		}
	}
	if pages != 3 || len(seen) != 12 {
		t.Errorf("%d pages with %d instances, want 3 pages of the 12 pool instances", pages, len(seen))
	}
}

func TestSQSThroughSDK(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{})
	api := clients(t, s).SQS
	ctx := ctxT(t)

	_, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	var notExist *sqstypes.QueueDoesNotExist
	if !errors.As(err, &notExist) {
		t.Errorf("GetQueueUrl of a missing queue: %T %v, want *types.QueueDoesNotExist", err, err)
	}
	created, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("lifeboat"), Attributes: map[string]string{"VisibilityTimeout": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(created.QueueUrl)
	got, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("lifeboat")})
	if err != nil || aws.ToString(got.QueueUrl) != url {
		t.Fatalf("GetQueueUrl: %v %v", got, err)
	}
	// SendMessage's MD5 is checked by the SDK.
	for i := range 3 {
		if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	// Long poll returns as soon as messages are there; ReceiveMessage's MD5s are checked too.
	recv, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 20,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	if len(recv.Messages) != 3 {
		t.Fatalf("received %d messages, want 3", len(recv.Messages))
	}
	if recv.Messages[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Errorf("attributes %v", recv.Messages[0].Attributes)
	}
	// In flight: invisible to another receive.
	empty, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
	if err != nil || len(empty.Messages) != 0 {
		t.Fatalf("receive while in flight: %v, %d messages", err, len(empty.Messages))
	}
	if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: recv.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: recv.Messages[1].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	back, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 5, VisibilityTimeout: 60})
	if err != nil || len(back.Messages) != 1 || aws.ToString(back.Messages[0].MessageId) != aws.ToString(recv.Messages[1].MessageId) {
		t.Fatalf("after ChangeMessageVisibility(0): %v %+v", err, back.Messages)
	}
	// The third comes back after its 1 s visibility timeout, with a higher receive count.
	later, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil || len(later.Messages) != 1 || later.Messages[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("redelivery after the visibility timeout: %v %+v", err, later.Messages)
	}
	if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("bogus")}); apiCode(err) != "ReceiptHandleIsInvalid" {
		t.Errorf("delete with a bogus handle: %v", err)
	}
	// Throttling is retried by the SDK.
	s.SetFaults(awsemu.Faults{SQSThrottle: 0.5})
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("y")}); err != nil {
		t.Fatal(err)
	}
	if s.Calls("SendMessage", "RequestThrottled") != 1 {
		t.Errorf("throttled SendMessage calls: %d, want 1", s.Calls("SendMessage", "RequestThrottled"))
	}
}

func TestSQSLongPollEndsWithContext(t *testing.T) {
	s := awsemutest.StartT(t, awsemu.Options{})
	api := clients(t, s).SQS
	url := s.CreateQueue(s.URL, "q")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("receive with a short context: %v", err)
	}
}

// Package cloud is Lifeboat's boundary to EC2 and SQS.
//
// The SDK boundary is a pair of small interfaces in the SDK's own signatures (EC2API, SQSAPI), so
// that *ec2.Client and *sqs.Client satisfy them unchanged, as karpenter-provider-aws does in
// pkg/aws/sdk.go. On top of it, Instances is the warm pool's view of EC2: launch with hibernation
// configured, hibernate, resume, terminate and list the instances of a pool; PlacementScorer
// probes Spot capacity with GetSpotPlacementScores (the reclaim-back probe). The interruption
// messages (EventBridge events delivered through Lifeboat's own SQS queue) live in the
// interruptionqueue subpackage; client construction with endpoint overrides and the retryer in
// awsclient; the wire-level emulator used by tests and `lifeboat sim` in awsemu.
package cloud

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// EC2API is the subset of the EC2 API Lifeboat calls.
type EC2API interface {
	RunInstances(ctx context.Context, in *ec2.RunInstancesInput, optFns ...func(*ec2.Options)) (*ec2.RunInstancesOutput, error)
	StartInstances(ctx context.Context, in *ec2.StartInstancesInput, optFns ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error)
	StopInstances(ctx context.Context, in *ec2.StopInstancesInput, optFns ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error)
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, optFns ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	GetSpotPlacementScores(ctx context.Context, in *ec2.GetSpotPlacementScoresInput, optFns ...func(*ec2.Options)) (*ec2.GetSpotPlacementScoresOutput, error)
}

// SQSAPI is the subset of the SQS API Lifeboat calls.
type SQSAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var (
	_ EC2API = (*ec2.Client)(nil)
	_ SQSAPI = (*sqs.Client)(nil)
)

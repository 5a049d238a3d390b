package awsclient

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/spf13/pflag"
)

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv(EnvEC2Endpoint, "http://env-ec2")
	t.Setenv(EnvSQSEndpoint, "http://env-sqs")
	var o Options
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--ec2-endpoint=http://flag-ec2", "--aws-region=eu-west-1", "--aws-max-attempts=4"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if o.EC2Endpoint != "http://flag-ec2" || o.SQSEndpoint != "http://env-sqs" || o.Region != "eu-west-1" || o.MaxAttempts != 4 || o.RetryMode != RetryModeStandard {
		t.Errorf("options %+v", o)
	}
	bad := Options{RetryMode: "yolo"}
	if err := bad.Complete(); err == nil {
		t.Error("unknown retry mode accepted")
	}
}

func TestNewPointsClientsAtEndpoints(t *testing.T) {
	c, err := New(context.Background(), Options{Region: "us-east-1", EC2Endpoint: "http://127.0.0.1:1", SQSEndpoint: "http://127.0.0.1:2",
		Credentials: aws.AnonymousCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(c.EC2.Options().BaseEndpoint); got != "http://127.0.0.1:1" {
		t.Errorf("EC2 endpoint %q", got)
	}
	if got := aws.ToString(c.SQS.Options().BaseEndpoint); got != "http://127.0.0.1:2" {
		t.Errorf("SQS endpoint %q", got)
	}
	if got := c.EC2.Options().Retryer.MaxAttempts(); got != 8 {
		t.Errorf("max attempts %d, want 8", got)
	}
}

// A storm of throttles never fails locally with "retry quota exceeded": attempts and backoff
// bound the load, not a client-side token bucket.
func TestRetryerHasNoRetryQuota(t *testing.T) {
	for _, mode := range []string{RetryModeStandard, RetryModeAdaptive} {
		o := Options{RetryMode: mode}
		if err := o.Complete(); err != nil {
			t.Fatal(err)
		}
		r := NewRetryer(o).(aws.RetryerV2)
		throttle := &smithy.GenericAPIError{Code: "RequestLimitExceeded"}
		for i := range 1000 {
			if _, err := r.GetRetryToken(context.Background(), throttle); err != nil {
				t.Fatalf("%s: retry %d refused: %v", mode, i, err)
			}
		}
	}
}

func TestBackoffIsBoundedJitter(t *testing.T) {
	b := jitterBackoff{base: 10 * time.Millisecond, throttleBase: 100 * time.Millisecond, max: 250 * time.Millisecond,
		throttles: retry.IsErrorThrottles(retry.DefaultThrottles)}
	transient := &smithy.GenericAPIError{Code: "InternalError"}
	throttle := &smithy.GenericAPIError{Code: "RequestLimitExceeded"}
	for attempt := 1; attempt <= 10; attempt++ {
		for _, tc := range []struct {
			err  error
			base time.Duration
		}{{transient, b.base}, {throttle, b.throttleBase}} {
			ceiling := min(tc.base<<(attempt-1), b.max)
			for range 50 {
				d, err := b.BackoffDelay(attempt, tc.err)
				if err != nil || d <= 0 || d > ceiling {
					t.Fatalf("attempt %d (%v): delay %s, want in (0, %s]", attempt, tc.err, d, ceiling)
				}
			}
		}
	}
}

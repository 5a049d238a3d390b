// Package awsclient builds Lifeboat's EC2 and SQS clients: region and credentials from the
// default chain, every endpoint overridable by flag or environment (so the production code path
// runs unchanged against the awsemu emulator, as aws-node-termination-handler's e2e tests do),
// a bounded retryer without a client-side retry quota, and the cloud metrics middleware.
package awsclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/pflag"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
)

// Environment variables read by Options.Complete when the flag is not set.
const (
	EnvEC2Endpoint = "LIFEBOAT_EC2_ENDPOINT"
	EnvSQSEndpoint = "LIFEBOAT_SQS_ENDPOINT"
	EnvQueueURL    = "LIFEBOAT_INTERRUPTION_QUEUE_URL"
)

// Retry modes.
const (
	RetryModeStandard = "standard"
	RetryModeAdaptive = "adaptive"
)

// Options configure the AWS clients.
type Options struct {
	// Region; empty uses the default chain (AWS_REGION, shared config, IMDS).
	Region string
	// EC2Endpoint and SQSEndpoint override the service endpoints (e.g. http://127.0.0.1:4566
	// for the emulator). Empty uses AWS's.
	EC2Endpoint string
	SQSEndpoint string
	// InterruptionQueueURL is Lifeboat's own SQS queue fed by EventBridge (not Karpenter's: two
	// consumers of one queue steal each other's messages).
	InterruptionQueueURL string

	// RetryMode is standard (default) or adaptive (client-side rate limiting on throttles).
	RetryMode string
	// MaxAttempts per operation, including the first; default 8.
	MaxAttempts int
	// MaxBackoff caps one backoff delay; default 20s.
	MaxBackoff time.Duration
	// BaseDelay and ThrottleBaseDelay are the first backoff delays for transient and for
	// throttling errors; they double per attempt with full jitter up to MaxBackoff. Defaults 50ms
	// and 1s (the SDK's). Tests against the emulator use milliseconds.
	BaseDelay         time.Duration
	ThrottleBaseDelay time.Duration

	// Credentials replaces the default credential chain (tests and the local simulation use
	// static credentials; the emulator does not check signatures).
	Credentials aws.CredentialsProvider
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Region, "aws-region", o.Region, "AWS region; empty uses the default chain (AWS_REGION, shared config, instance metadata).")
	fs.StringVar(&o.EC2Endpoint, "ec2-endpoint", o.EC2Endpoint, "Override the EC2 endpoint URL (env "+EnvEC2Endpoint+"), e.g. the local emulator.")
	fs.StringVar(&o.SQSEndpoint, "sqs-endpoint", o.SQSEndpoint, "Override the SQS endpoint URL (env "+EnvSQSEndpoint+").")
	fs.StringVar(&o.InterruptionQueueURL, "interruption-queue-url", o.InterruptionQueueURL, "URL of Lifeboat's own SQS queue of EC2 interruption events (env "+EnvQueueURL+"). Empty disables the SQS consumer.")
	fs.StringVar(&o.RetryMode, "aws-retry-mode", o.RetryMode, "AWS SDK retry mode: standard or adaptive.")
	fs.IntVar(&o.MaxAttempts, "aws-max-attempts", o.MaxAttempts, "Maximum attempts per AWS API call, including the first (default 8).")
	fs.DurationVar(&o.MaxBackoff, "aws-max-backoff", o.MaxBackoff, "Maximum backoff between attempts of an AWS API call (default 20s).")
}

// Complete fills unset fields from the environment and the defaults, and validates.
func (o *Options) Complete() error {
	if o.EC2Endpoint == "" {
		o.EC2Endpoint = os.Getenv(EnvEC2Endpoint)
	}
	if o.SQSEndpoint == "" {
		o.SQSEndpoint = os.Getenv(EnvSQSEndpoint)
	}
	if o.InterruptionQueueURL == "" {
		o.InterruptionQueueURL = os.Getenv(EnvQueueURL)
	}
	if o.RetryMode == "" {
		o.RetryMode = RetryModeStandard
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 8
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 20 * time.Second
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = 50 * time.Millisecond
	}
	if o.ThrottleBaseDelay == 0 {
		o.ThrottleBaseDelay = time.Second
	}
	switch {
	case o.RetryMode != RetryModeStandard && o.RetryMode != RetryModeAdaptive:
		return fmt.Errorf("--aws-retry-mode %q: use %s or %s", o.RetryMode, RetryModeStandard, RetryModeAdaptive)
	case o.MaxAttempts < 1:
		return fmt.Errorf("--aws-max-attempts %d: must be at least 1", o.MaxAttempts)
	case o.MaxBackoff < 0 || o.BaseDelay < 0 || o.ThrottleBaseDelay < 0:
		return errors.New("AWS backoff durations must not be negative")
	}
	return nil
}

// Clients are the AWS clients Lifeboat uses.
type Clients struct {
	Config aws.Config
	EC2    *ec2.Client
	SQS    *sqs.Client
}

// New completes o and builds the clients.
func New(ctx context.Context, o Options) (*Clients, error) {
	if err := o.Complete(); err != nil {
		return nil, err
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer { return NewRetryer(o) }),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(o.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config (region, credentials): %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: set --aws-region or AWS_REGION")
	}
	ec2Client := ec2.NewFromConfig(cfg, func(eo *ec2.Options) {
		if o.EC2Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.EC2Endpoint)
		}
		eo.APIOptions = append(eo.APIOptions, cloud.WithMetrics("ec2"))
	})
	sqsClient := sqs.NewFromConfig(cfg, func(so *sqs.Options) {
		if o.SQSEndpoint != "" {
			so.BaseEndpoint = aws.String(o.SQSEndpoint)
		}
		so.APIOptions = append(so.APIOptions, cloud.WithMetrics("sqs"))
	})
	return &Clients{Config: cfg, EC2: ec2Client, SQS: sqsClient}, nil
}

// NewRetryer returns the SDK retryer for o: bounded attempts, exponential backoff with full
// jitter (throttles start from ThrottleBaseDelay), and no client-side retry quota. The SDK's
// default token bucket fails calls locally with "retry quota exceeded" after a burst of throttles,
// which would stall a wave of resumes exactly when EC2 is busiest; the bounded attempts and the
// backoff already keep the load on EC2 in check.
func NewRetryer(o Options) aws.Retryer {
	backoff := jitterBackoff{base: o.BaseDelay, throttleBase: o.ThrottleBaseDelay, max: o.MaxBackoff, throttles: retry.IsErrorThrottles(retry.DefaultThrottles)}
	standard := func(so *retry.StandardOptions) {
		so.MaxAttempts = o.MaxAttempts
		so.MaxBackoff = o.MaxBackoff
		so.RateLimiter = ratelimit.None
		so.Backoff = backoff
		// EC2 answers InsufficientInstanceCapacity with a 5xx, which the SDK would retry with the
		// same instance type and zone. Lifeboat's answer to ICE is another type (launch) or a
		// replacement (resume), so fail fast instead.
		so.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(noRetryOnCapacity)}, so.Retryables...)
	}
	if o.RetryMode == RetryModeAdaptive {
		return retry.NewAdaptiveMode(func(ao *retry.AdaptiveModeOptions) {
			ao.StandardOptions = append(ao.StandardOptions, standard)
		})
	}
	return retry.NewStandard(standard)
}

func noRetryOnCapacity(err error) aws.Ternary {
	switch cloud.ErrorCode(err) {
	case cloud.CodeInsufficientInstanceCapacity, cloud.CodeInsufficientCapacity:
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

type jitterBackoff struct {
	base, throttleBase, max time.Duration
	throttles               retry.IsErrorThrottle
}

// BackoffDelay implements retry.BackoffDelayer: full jitter over base*2^(attempt-1), capped.
func (b jitterBackoff) BackoffDelay(attempt int, err error) (time.Duration, error) {
	base := b.base
	if b.throttles.IsErrorThrottle(err) == aws.TrueTernary {
		base = b.throttleBase
	}
	ceiling := base
	for i := 1; i < attempt && ceiling < b.max; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, b.max)
	if ceiling <= 0 {
		return 0, nil
	}
	return time.Duration(rand.Int64N(int64(ceiling)) + 1), nil
}

// String is for logs.
func (o Options) String() string {
	return "region=" + o.Region + " ec2=" + o.EC2Endpoint + " sqs=" + o.SQSEndpoint + " retry=" + o.RetryMode + "/" + strconv.Itoa(o.MaxAttempts)
}

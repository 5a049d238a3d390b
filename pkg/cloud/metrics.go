package cloud

import (
	"context"
	"errors"
	"net"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/lifeboat-k8s/lifeboat/pkg/metricdef"
)

// Metrics of the calls to AWS. Labels are bounded: service (ec2, sqs), api (operation name) and
// outcome (see Outcome).
var (
	APICalls    = metricdef.CounterVec("lifeboat_cloud_api_calls_total", "AWS API operations by service, API and outcome, after the SDK's retries.", "service", "api", "outcome")
	APIDuration = metricdef.HistogramVec("lifeboat_cloud_api_duration_seconds", "Latency of AWS API operations including the SDK's retries and backoff.", []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25}, "service", "api")
	APIAttempts = metricdef.CounterVec("lifeboat_cloud_api_attempts_total", "HTTP attempts to AWS APIs by service, API and outcome; attempts minus calls are the SDK's retries.", "service", "api", "outcome")
)

// Outcomes of a call, the "outcome" label.
const (
	OutcomeSuccess     = "success"
	OutcomeThrottled   = "throttled"
	OutcomeCapacity    = "insufficient_capacity"
	OutcomeNotFound    = "not_found"
	OutcomeClientError = "client_error"
	OutcomeServerError = "server_error"
	OutcomeCanceled    = "canceled"
	OutcomeNetwork     = "network_error"
	OutcomeOther       = "error"
)

// Outcome classifies an AWS call's error into a bounded label value.
func Outcome(err error) string {
	if err == nil {
		return OutcomeSuccess
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OutcomeCanceled
	}
	switch ErrorCode(err) {
	case CodeRequestLimitExceeded, "Throttling", "ThrottlingException", "RequestThrottled":
		return OutcomeThrottled
	case CodeInsufficientInstanceCapacity, CodeInsufficientCapacity:
		return OutcomeCapacity
	case CodeInstanceNotFound, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
		return OutcomeNotFound
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if apiErr.ErrorFault() == smithy.FaultServer {
			return OutcomeServerError
		}
		var respErr *smithyhttp.ResponseError
		if errors.As(err, &respErr) && respErr.HTTPStatusCode() >= 500 {
			return OutcomeServerError
		}
		return OutcomeClientError
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return OutcomeNetwork
	}
	return OutcomeOther
}

// WithMetrics returns an APIOptions entry (aws.Config.APIOptions, or ec2.Options.APIOptions)
// that records APICalls, APIDuration and APIAttempts for every operation of a client.
func WithMetrics(service string) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		call := middleware.InitializeMiddlewareFunc("LifeboatCallMetrics", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			api := awsmiddleware.GetOperationName(ctx)
			APICalls.WithLabelValues(service, api, Outcome(err)).Inc()
			APIDuration.WithLabelValues(service, api).Observe(time.Since(start).Seconds())
			return out, md, err
		})
		if err := stack.Initialize.Add(call, middleware.Before); err != nil {
			return err
		}
		attempt := middleware.FinalizeMiddlewareFunc("LifeboatAttemptMetrics", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			APIAttempts.WithLabelValues(service, awsmiddleware.GetOperationName(ctx), Outcome(err)).Inc()
			return out, md, err
		})
		// After the retry middleware, so that each attempt passes through it; a stack without
		// one (a custom client) still gets per-call attempts.
		if err := stack.Finalize.Insert(attempt, "Retry", middleware.After); err != nil {
			return stack.Finalize.Add(attempt, middleware.After)
		}
		return nil
	}
}

package cloud

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
)

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, OutcomeSuccess},
		{context.Canceled, OutcomeCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), OutcomeCanceled},
		{&smithy.GenericAPIError{Code: "RequestLimitExceeded"}, OutcomeThrottled},
		{&smithy.GenericAPIError{Code: "RequestThrottled"}, OutcomeThrottled},
		{fmt.Errorf("resume: %w", &smithy.GenericAPIError{Code: "InsufficientInstanceCapacity"}), OutcomeCapacity},
		{&smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound"}, OutcomeNotFound},
		{&smithy.GenericAPIError{Code: "InternalError", Fault: smithy.FaultServer}, OutcomeServerError},
		{&smithy.GenericAPIError{Code: "InvalidParameterValue"}, OutcomeClientError},
		{errors.New("boom"), OutcomeOther},
	} {
		if got := Outcome(tc.err); got != tc.want {
			t.Errorf("Outcome(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

package cloud

import (
	"errors"

	"github.com/aws/smithy-go"
)

// Sentinel errors callers match with errors.Is. The wrapped AWS error stays in the chain, so
// errors.As(err, &smithy.APIError) still yields the code and message.
var (
	// ErrInsufficientCapacity: EC2 has no capacity for the instance type in the zone
	// (InsufficientInstanceCapacity on RunInstances or StartInstances). For a hibernated instance
	// the remedy is to terminate and replace it: its instance type cannot change.
	ErrInsufficientCapacity = errors.New("insufficient capacity")
	// ErrNotFound: the instance does not exist (or is not yet visible, for longer than the
	// eventual-consistency window Lifeboat tolerates).
	ErrNotFound = errors.New("instance not found")
	// ErrIncorrectState: the instance is in a state that does not allow the call (for example
	// hibernating a pending instance). Retry later.
	ErrIncorrectState = errors.New("incorrect instance state")
	// ErrHibernationUnsupported: the instance cannot hibernate (not configured at launch, or the
	// prerequisites are not met). Replace it.
	ErrHibernationUnsupported = errors.New("hibernation unsupported")
	// ErrUnauthorized: the controller's IAM role may not make the call (UnauthorizedOperation).
	// Retrying does not help; the error's text names the missing permission.
	ErrUnauthorized = errors.New("not authorized")
)

// EC2 error codes Lifeboat reacts to.
const (
	CodeInsufficientInstanceCapacity = "InsufficientInstanceCapacity"
	CodeInsufficientCapacity         = "InsufficientCapacity"
	CodeUnsupported                  = "Unsupported"
	CodeInstanceNotFound             = "InvalidInstanceID.NotFound"
	CodeIncorrectInstanceState       = "IncorrectInstanceState"
	CodeIdempotentParameterMismatch  = "IdempotentParameterMismatch"
	CodeUnsupportedHibernation       = "UnsupportedHibernationConfiguration"
	CodeRequestLimitExceeded         = "RequestLimitExceeded"
	CodeUnauthorizedOperation        = "UnauthorizedOperation"
)

// ErrorCode returns the AWS error code in err's chain, or "".
func ErrorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// isCapacityError reports whether another instance type (or zone) may succeed where this one
// failed: no capacity, or the type is not offered there.
func isCapacityError(err error) bool {
	switch ErrorCode(err) {
	case CodeInsufficientInstanceCapacity, CodeInsufficientCapacity, CodeUnsupported:
		return true
	}
	return false
}

func isNotFound(err error) bool { return ErrorCode(err) == CodeInstanceNotFound }

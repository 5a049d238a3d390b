package cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// BatchResumer starts many stopped instances with one StartInstances call. It is optional next
// to Instances: the interruption controller resumes the standby nodes of a whole burst at once
// when the implementation offers it, and one instance at a time otherwise.
type BatchResumer interface {
	// ResumeAll starts the instances and returns one entry per ID: nil when the instance is
	// starting (or already running), else the instance's own error, matching
	// ErrInsufficientCapacity, ErrIncorrectState or ErrNotFound like Resume's.
	ResumeAll(ctx context.Context, ids []string) map[string]error
}

var _ BatchResumer = (*EC2Instances)(nil)

// ResumeAll implements BatchResumer. EC2 answers StartInstances for the whole request: one
// instance without capacity (ICE), in the wrong state or unknown fails the call for all of
// them, and the error does not reliably say which one. On such a failure every instance is
// started on its own, in parallel, which yields the per-instance errors; instances the failed
// call may already have started are in pending or running, which StartInstances accepts again.
func (p *EC2Instances) ResumeAll(ctx context.Context, ids []string) map[string]error {
	out := make(map[string]error, len(ids))
	if len(ids) == 0 {
		return out
	}
	if len(ids) == 1 {
		out[ids[0]] = p.Resume(ctx, ids[0])
		return out
	}
	resp, err := p.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids})
	var alone []string
	switch {
	case err == nil:
		started := make(map[string]bool, len(resp.StartingInstances))
		for _, s := range resp.StartingInstances {
			started[aws.ToString(s.InstanceId)] = true
		}
		for _, id := range ids {
			if started[id] {
				out[id] = nil
			} else {
				// Not in the answer: ask for this one alone rather than assume.
				alone = append(alone, id)
			}
		}
	case ctx.Err() != nil:
		for _, id := range ids {
			out[id] = fmt.Errorf("resume %s: %w", id, errors.Join(err, ctx.Err()))
		}
		return out
	default:
		alone = ids
	}
	resumeEach(ctx, p.Resume, alone, out)
	return out
}

// ResumeAll starts the instances: with one call where inst is a BatchResumer, else each on its
// own, in parallel. One entry per ID, as BatchResumer.ResumeAll.
func ResumeAll(ctx context.Context, inst Instances, ids []string) map[string]error {
	if b, ok := inst.(BatchResumer); ok {
		return b.ResumeAll(ctx, ids)
	}
	out := make(map[string]error, len(ids))
	resumeEach(ctx, inst.Resume, ids, out)
	return out
}

// resumeEach calls resume for every ID in parallel and records the results in out.
func resumeEach(ctx context.Context, resume func(context.Context, string) error, ids []string, out map[string]error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := resume(ctx, id)
			mu.Lock()
			out[id] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
}

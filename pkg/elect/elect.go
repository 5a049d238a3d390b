// Package elect runs a task on one replica at a time, guarded by a Lease, and keeps the
// process alive when the lease is lost: the replica stops the task and campaigns again.
//
// controller-runtime's manager-level leader election exits the process on a lost lease, which
// is right for a binary whose every part needs the lease (lifeboat-controller). It is wrong for
// lifeboat-webhook, whose replicas all serve admission requests and only the audit needs one
// replica: an apiserver slow enough to miss a renewal (a drain of many nodes) would take an
// admission replica down with the audit.
package elect

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Campaign is a controller-runtime Runnable that needs no manager-level leader election.
type Campaign struct {
	Leases    coordinationv1client.LeasesGetter
	Namespace string
	Name      string
	// Identity is the holder identity; empty: hostname_uuid, as controller-runtime does.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to client-go's usual 15 s, 10 s, 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Task runs while this replica holds the lease; its context ends when the lease is lost
	// or Start's context ends. A term's Task starts only after the previous term's returned.
	// The lease is released when a term ends, a moment before Task's context ends: Task must
	// tolerate another replica starting its own Task meanwhile (the audit does: at worst one
	// Event twice).
	Task func(ctx context.Context) error
}

// NeedLeaderElection: the campaign is the election.
func (c *Campaign) NeedLeaderElection() bool { return false }

// Start campaigns until ctx ends.
func (c *Campaign) Start(ctx context.Context) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(c.Namespace, c.Name))
	var mu sync.Mutex
	var prev chan struct{} // closed when the previous term's Task returned
	term := cfg
	term.Callbacks = leaderelection.LeaderCallbacks{
		OnStoppedLeading: func() {},
		OnStartedLeading: func(ctx context.Context) {
			mu.Lock()
			wait, done := prev, make(chan struct{})
			prev = done
			mu.Unlock()
			defer close(done)
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			logger.Info("Holding the lease: running the task")
			if err := c.Task(ctx); err != nil {
				logger.Error(err, "Task failed")
			}
		},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(term)
		if err != nil {
			return err
		}
		le.Run(ctx)
		if ctx.Err() == nil {
			logger.Info("Lost the lease; campaigning again")
			select {
			case <-ctx.Done():
			case <-time.After(cfg.RetryPeriod):
			}
		}
	}
	mu.Lock()
	last := prev
	mu.Unlock()
	if last != nil {
		<-last
	}
	return nil
}

func (c *Campaign) config() (leaderelection.LeaderElectionConfig, error) {
	id := c.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return leaderelection.LeaderElectionConfig{}, fmt.Errorf("holder identity: %w", err)
		}
		id = host + "_" + uuid.NewString()
	}
	def := func(d, fallback time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return fallback
	}
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
			Client:     c.Leases,
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   def(c.LeaseDuration, 15*time.Second),
		RenewDeadline:   def(c.RenewDeadline, 10*time.Second),
		RetryPeriod:     def(c.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: true,
		Name:            c.Name,
	}, nil
}

// Package cloudtest is the in-memory cloud.Instances (and cloud.PlacementScorer) of the
// controllers' unit tests. It is imported by _test files only (make verify checks that no
// shipped binary links it).
package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
)

// Instances records every call. Fields may be read and set by a test while no controller call
// is in flight.
type Instances struct {
	mu sync.Mutex
	// Known are instances by ID, as Get and List return them.
	Known map[string]*cloud.Instance
	// UnknownState is Get's answer for an ID not in Known ("" → cloud.ErrNotFound).
	UnknownState string
	// Running are IDs already running before the test (a crash after StartInstances).
	Running map[string]bool
	// ICE makes Resume of these IDs fail with cloud.ErrInsufficientCapacity.
	ICE map[string]bool
	// Resumed counts the successful Resume calls per ID; a resumed instance is running.
	Resumed map[string]int
	// Gone and Terminated are the terminated IDs (a set, and in call order).
	Gone       map[string]bool
	Terminated []string
	Hibernated []string
	// Batches are the ResumeAll calls (StartInstances with many IDs), in order.
	Batches [][]string
}

var (
	_ cloud.Instances    = (*Instances)(nil)
	_ cloud.BatchResumer = (*Instances)(nil)
)

// New returns an empty fake whose unknown instances are not found.
func New() *Instances {
	return &Instances{Known: map[string]*cloud.Instance{}, Running: map[string]bool{}, ICE: map[string]bool{},
		Resumed: map[string]int{}, Gone: map[string]bool{}}
}

// Launch is not supported: the tests that launch use the AWS emulator.
func (f *Instances) Launch(context.Context, cloud.LaunchRequest) (*cloud.Instance, error) {
	return nil, errors.New("cloudtest: Launch is not supported (use the AWS emulator)")
}

// Hibernate records the call and stops a known instance.
func (f *Instances) Hibernate(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Hibernated = append(f.Hibernated, id)
	if in := f.Known[id]; in != nil {
		in.State = cloud.StateStopped
	}
	return nil
}

// Resume fails for ICE IDs, else counts the start.
func (f *Instances) Resume(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ICE[id] {
		return fmt.Errorf("resume %s: %w", id, cloud.ErrInsufficientCapacity)
	}
	f.Resumed[id]++
	return nil
}

// ResumeAll resumes each ID and records the batch.
func (f *Instances) ResumeAll(ctx context.Context, ids []string) map[string]error {
	f.mu.Lock()
	f.Batches = append(f.Batches, append([]string(nil), ids...))
	f.mu.Unlock()
	out := map[string]error{}
	for _, id := range ids {
		out[id] = f.Resume(ctx, id)
	}
	return out
}

// Terminate records the call.
func (f *Instances) Terminate(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Gone[id] = true
	f.Terminated = append(f.Terminated, id)
	return nil
}

// List returns the known instances of the pool ("*": of every pool) that are not terminated.
func (f *Instances) List(_ context.Context, pool string) ([]cloud.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cloud.Instance
	for id, in := range f.Known {
		if (pool == "*" || in.Pool == pool) && !f.Gone[id] {
			out = append(out, *in)
		}
	}
	return out, nil
}

// Get reports a resumed (or Running) instance as running, a known one as it is, an unknown one
// in UnknownState or not found.
func (f *Instances) Get(_ context.Context, id string) (*cloud.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Resumed[id] > 0 || f.Running[id] {
		return &cloud.Instance{ID: id, State: cloud.StateRunning}, nil
	}
	if in, ok := f.Known[id]; ok {
		cp := *in
		return &cp, nil
	}
	if f.UnknownState != "" {
		return &cloud.Instance{ID: id, State: f.UnknownState}, nil
	}
	return nil, fmt.Errorf("describe %s: %w", id, cloud.ErrNotFound)
}

// BatchCount is the number of ResumeAll calls so far (safe while calls are in flight).
func (f *Instances) BatchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Batches)
}

// TotalResumed is the number of successful Resume calls so far (safe while calls are in
// flight).
func (f *Instances) TotalResumed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, n := range f.Resumed {
		total += n
	}
	return total
}

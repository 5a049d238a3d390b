package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestWriteAll(t *testing.T) {
	actions := func(n int) []PodAction {
		out := make([]PodAction, n)
		for i := range out {
			out[i] = PodAction{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)}}}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		actions  int
		failing  map[string]bool
		wantErrs int
	}{
		{name: "none", actions: 0},
		{name: "one", actions: 1},
		{name: "more than the parallelism", actions: 3*writeParallelism + 1},
		{name: "failures are all returned", actions: 20, failing: map[string]bool{"p3": true, "p17": true}, wantErrs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu         sync.Mutex
				seen       = map[string]int{}
				running    atomic.Int32
				maxAtATime atomic.Int32
			)
			errs := writeAll(actions(tc.actions), func(a PodAction) error {
				now := running.Add(1)
				defer running.Add(-1)
				for {
					m := maxAtATime.Load()
					if now <= m || maxAtATime.CompareAndSwap(m, now) {
						break
					}
				}
				time.Sleep(time.Millisecond) // let the writes overlap
				mu.Lock()
				seen[a.Pod.Name]++
				mu.Unlock()
				if tc.failing[a.Pod.Name] {
					return errors.New("write " + a.Pod.Name)
				}
				return nil
			})
			if len(errs) != tc.wantErrs {
				t.Fatalf("errors: got %v, want %d", errs, tc.wantErrs)
			}
			if len(seen) != tc.actions {
				t.Fatalf("wrote %d distinct Pods, want %d", len(seen), tc.actions)
			}
			for name, n := range seen {
				if n != 1 {
					t.Errorf("%s written %d times", name, n)
				}
			}
			if m := maxAtATime.Load(); m > writeParallelism {
				t.Errorf("%d writes at a time, want at most %d", m, writeParallelism)
			}
			if tc.actions > writeParallelism && maxAtATime.Load() < 2 {
				t.Errorf("the writes ran one at a time")
			}
		})
	}
}

func TestOnlyConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "api", errors.New("the object has been modified"))
	for _, tc := range []struct {
		name string
		errs []error
		want bool
	}{
		{name: "no error", want: false},
		{name: "a conflict", errs: []error{conflict}, want: true},
		{name: "a wrapped conflict", errs: []error{fmt.Errorf("surge app/api: %w", conflict)}, want: true},
		{name: "a conflict and another error", errs: []error{conflict, errors.New("boom")}, want: false},
		{name: "another error", errs: []error{apierrors.NewServiceUnavailable("down")}, want: false},
	} {
		if got := onlyConflicts(tc.errs); got != tc.want {
			t.Errorf("%s: onlyConflicts = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A take-back that loses the write race to a node reconcile's surge looks again soon, without
// an error (the failure backoff would grow with every conflict of a burst), and the next pass
// takes the surge back.
func TestSurgeTakeBackConflictRetriesSoon(t *testing.T) {
	var conflicts atomic.Int32
	conflicts.Store(1)
	funcs := interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*appsv1.Deployment); ok && conflicts.Add(-1) >= 0 {
			return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, obj.GetName(), errors.New("the object has been modified"))
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	ann := map[string]string{v1alpha1.AnnotationBridgeSurge: `{"base":6,"nodes":{"spot-1":2}}`}
	h := newHarnessWith(t, funcs, apiDeployment(8, ann), apiReplicaSet())
	res := h.reconcileSurge(t)
	if res.RequeueAfter != conflictRetry {
		t.Fatalf("after a conflict: %+v, want a requeue after %s", res, conflictRetry)
	}
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 8 {
		t.Fatalf("replicas %d after the conflict, want 8 (unchanged)", got)
	}
	h.reconcileSurge(t)
	if got := ptr.Deref(h.deployment(t).Spec.Replicas, 0); got != 6 {
		t.Errorf("replicas %d after the retry, want 6", got)
	}
}

// resumesInFlight records the waits and which Pods were written before the first.
type resumesInFlight struct {
	mu           sync.Mutex
	waits        []time.Duration
	writesBefore int
	writes       *atomic.Int32
}

func (r *resumesInFlight) YieldToResumes(_ context.Context, max time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.waits) == 0 {
		r.writesBefore = int(r.writes.Load())
	}
	r.waits = append(r.waits, max)
}

// A node's hold writes wait for the resume decisions in flight first (bounded), and a pass
// that writes nothing does not wait.
func TestHoldsYieldToResumes(t *testing.T) {
	var writes atomic.Int32
	funcs := interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			writes.Add(1)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	h := newHarnessWith(t, funcs,
		interruptedNode("spot-1", "lb-1"), poolNode("lb-1", "spot-1", true, "4"),
		apiDeployment(6, nil), apiReplicaSet(), apiHPA(),
		appPod("api-a", "spot-1", true, true), appPod("api-b", "spot-1", true, true))
	r := &resumesInFlight{writes: &writes}
	h.ctrl.YieldTo(r)
	h.reconcileNode(t, "spot-1")
	if len(r.waits) != 1 || r.waits[0] != yieldToResumes || r.writesBefore != 0 {
		t.Fatalf("waits %v with %d Pod writes before the first, want one wait of %s before any", r.waits, r.writesBefore, yieldToResumes)
	}
	if got := writes.Load(); got != 2 {
		t.Fatalf("%d Pod writes, want the 2 holds", got)
	}
	// Both held already: the next pass writes no hold and does not wait.
	h.reconcileNode(t, "spot-1")
	if len(r.waits) != 1 {
		t.Errorf("waits %v after a pass without writes, want still one", r.waits)
	}
}

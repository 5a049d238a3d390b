package bridge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
)

// seenSeat is what a handoff seat looked like when last seen placed.
type seenSeat struct {
	node     string
	prePulls []string // its image volumes' references
	// madeFor is the node its lifeboat.dev/seat-node annotation first named (the bridge
	// makes a held StatefulSet Pod's seat at the hold, for the interrupted node); lifeboat the
	// node it last named (the lifeboat that adopted it).
	madeFor, lifeboat string
}

// handoffSeatWatch polls the handoff's seats (placeholder Pods in Lifeboat's namespace): they
// live for the lifeboat's active time, and are deleted at the eviction they make room for.
type handoffSeatWatch struct {
	mu     sync.Mutex
	seats  map[string]seenSeat // by seat name
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *env) watchHandoffSeats(t *testing.T) *handoffSeatWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &handoffSeatWatch{seats: map[string]seenSeat{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			list, err := e.kube.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelSeat + "=true"})
			if err == nil {
				w.mu.Lock()
				for _, p := range list.Items {
					s := w.seats[p.Name]
					if s.madeFor == "" {
						s.madeFor = p.Annotations[v1alpha1.AnnotationSeatNode]
					}
					s.lifeboat = p.Annotations[v1alpha1.AnnotationSeatNode]
					if p.Spec.NodeName == "" {
						w.seats[p.Name] = s
						continue
					}
					s.node, s.prePulls = p.Spec.NodeName, nil
					for _, v := range p.Spec.Volumes {
						if v.Image != nil {
							s.prePulls = append(s.prePulls, v.Image.Reference)
						}
					}
					w.seats[p.Name] = s
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *handoffSeatWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *handoffSeatWatch) get(name string) (seenSeat, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.seats[name]
	return s, ok
}

// checkHandoffToSeats waits for the handoff to move every replica off the lifeboats, then
// checks that each replica that had a seat went to it: the seat pre-pulled the Pod's image,
// the replacement prefers the seat's node (the webhook, from the lifeboat's seat record) and
// is bound there.
func (e *env) checkHandoffToSeats(t *testing.T, ns string, w workload, replicas int, interrupted string, boats *seatWatch, seats *handoffSeatWatch) {
	t.Helper()
	var final []corev1.Pod
	waitFor(t, "the handoff to move every replica off the lifeboats", 3*time.Minute, func(ctx context.Context) (bool, string) {
		pods, err := e.listPods(ctx, ns, w.selector())
		if err != nil {
			return false, err.Error()
		}
		off := 0
		for i := range pods {
			if pods[i].DeletionTimestamp == nil && pods[i].Spec.NodeName != "" && !boats.isBoat(pods[i].Spec.NodeName) {
				off++
			}
		}
		final = pods
		return off == replicas && readyCount(pods) == replicas, fmt.Sprintf("%d of %d replicas off the lifeboats, %d Ready", off, replicas, readyCount(pods))
	})
	seated := 0
	for i := range final {
		p := &final[i]
		s, ok := seats.get(handoff.SeatName(ns, p.Name))
		if !ok || s.node == "" {
			continue // it never was on a lifeboat when the handoff came
		}
		seated++
		if s.madeFor != interrupted || !boats.isBoat(s.lifeboat) {
			t.Errorf("%s's seat was first made for %q and last belonged to %q: want made at the hold for the interrupted node %s, adopted by a lifeboat", p.Name, s.madeFor, s.lifeboat, interrupted)
		}
		if len(s.prePulls) != 1 || s.prePulls[0] != image {
			t.Errorf("%s's seat pre-pulled %v, want [%s] (an image volume)", p.Name, s.prePulls, image)
		}
		node, err := e.kube.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s's seat node %s: %v", p.Name, s.node, err)
			continue
		}
		host := node.Labels[corev1.LabelHostname]
		if !prefersHost(p, host) {
			t.Errorf("%s does not prefer its seat's node %s (hostname %q): affinity %+v", p.Name, s.node, host, p.Spec.Affinity)
		}
		if p.Spec.NodeName != s.node {
			t.Errorf("%s was bound to %s, not to its seat's node %s", p.Name, p.Spec.NodeName, s.node)
		}
	}
	if seated == 0 {
		t.Errorf("no replica left a lifeboat through a seat")
	}
	t.Logf("%d of %d replicas handed off to their seats", seated, replicas)
}

func prefersHost(p *corev1.Pod, host string) bool {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil {
		return false
	}
	for _, term := range p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		for _, r := range term.Preference.MatchExpressions {
			if r.Key == corev1.LabelHostname && len(r.Values) == 1 && r.Values[0] == host {
				return true
			}
		}
	}
	return false
}

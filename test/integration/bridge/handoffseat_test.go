package bridge

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

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

// handoffSeatWatch watches the handoff's seats (placeholder Pods in Lifeboat's namespace): they
// live for the lifeboat's active time, and are deleted at the eviction they make room for. A
// watch, not a poll: a seat adopted by a lifeboat and used by the handoff within a few hundred
// milliseconds (the seat's node already up) must still be seen adopted (a 200 ms poll missed it
// once under CI load).
type handoffSeatWatch struct {
	mu     sync.Mutex
	seats  map[string]seenSeat // by seat name
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *env) watchHandoffSeats(t *testing.T) *handoffSeatWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &handoffSeatWatch{seats: map[string]seenSeat{}, cancel: cancel}
	w.done = e.watchPods(ctx, t, v1alpha1.DefaultNamespace, v1alpha1.LabelSeat+"=true", w.observe)
	t.Cleanup(w.stop)
	return w
}

// observe records a seat as last seen.
func (w *handoffSeatWatch) observe(_ watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seats[p.Name]
	if s.madeFor == "" {
		s.madeFor = p.Annotations[v1alpha1.AnnotationSeatNode]
	}
	s.lifeboat = p.Annotations[v1alpha1.AnnotationSeatNode]
	if p.Spec.NodeName != "" {
		s.node, s.prePulls = p.Spec.NodeName, nil
		for _, v := range p.Spec.Volumes {
			if v.Image != nil {
				s.prePulls = append(s.prePulls, v.Image.Reference)
			}
		}
	}
	w.seats[p.Name] = s
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
// checks that each replica that ran on a lifeboat went to its seat: the seat pre-pulled the
// Pod's image, the replacement prefers the seat's node (the webhook, from the lifeboat's seat
// record) and is bound there. A replica the bridge moved straight to its seat (its node,
// launched at the hold, was up before the replica's turn) prefers that node and is bound
// there. Any other replica whose moved Pod never ran on a lifeboat (the scheduler found no
// room there) has a seat nobody adopts: it is logged, not checked.
func (e *env) checkHandoffToSeats(t *testing.T, ns string, w workload, replicas int, interrupted string, boats *seatWatch, seats *handoffSeatWatch, rec *recorder) {
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
	onBoat := map[string]bool{}
	for _, h := range rec.all() {
		if boats.isBoat(h.node) {
			onBoat[h.name] = true
		}
	}
	straight, err := e.straightMoves(ns)
	if err != nil {
		t.Fatal(err)
	}
	seated := 0
	for i := range final {
		p := &final[i]
		s, ok := seats.get(handoff.SeatName(ns, p.Name))
		if host, moved := straight[p.Name]; moved && !onBoat[p.Name] {
			// The bridge moved it straight to its seat's node (up before its turn came).
			seated++
			node, err := e.kube.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s's node %s: %v", p.Name, p.Spec.NodeName, err)
				continue
			}
			if !prefersHost(p, host) || p.Labels[v1alpha1.LabelSeatHost] != host || node.Labels[corev1.LabelHostname] != host {
				t.Errorf("%s, moved straight to its seat's node %s, prefers it %v and is bound to %s (hostname %q)", p.Name, host, prefersHost(p, host), node.Name, node.Labels[corev1.LabelHostname])
			}
			if len(s.prePulls) != 1 || s.prePulls[0] != image {
				t.Errorf("%s's seat pre-pulled %v, want [%s] (an image volume)", p.Name, s.prePulls, image)
			}
			continue
		}
		if !onBoat[p.Name] {
			t.Logf("%s never ran on a lifeboat nor moved straight to its seat: now on %s (its seat: %+v, found %v)", p.Name, p.Spec.NodeName, s, ok)
			continue
		}
		if !ok || s.node == "" {
			t.Errorf("%s ran on a lifeboat but its seat was never placed (found %v)", p.Name, ok)
			continue
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
		if !prefersHost(p, host) || p.Labels[v1alpha1.LabelSeatHost] != host || p.Spec.SchedulerName != v1alpha1.SchedulerName {
			t.Errorf("%s (created %s) does not prefer its seat's node %s (hostname %q): affinity %+v, label %s=%q, scheduler %q; want the preference, the label and %s (the webhook, from its lifeboat's seat record)",
				p.Name, p.CreationTimestamp.Format(time.RFC3339), s.node, host, p.Spec.Affinity, v1alpha1.LabelSeatHost, p.Labels[v1alpha1.LabelSeatHost], p.Spec.SchedulerName, v1alpha1.SchedulerName)
		}
		if p.Spec.NodeName != s.node {
			t.Errorf("%s was bound to %s, not to its seat's node %s", p.Name, p.Spec.NodeName, s.node)
		}
	}
	if seated == 0 {
		t.Errorf("no replica reached its seat")
	}
	t.Logf("%d of %d replicas reached their seats (%d straight from the interrupted node: %v)", seated, replicas, len(straight), straight)
}

// straightMoves are the Pods (name → seat's hostname) the bridge moved straight to their
// seat's node, from its BridgeMove events.
func (e *env) straightMoves(ns string) (map[string]string, error) {
	evs, err := e.events(context.Background(), ns, v1alpha1.EventBridgeMove)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, ev := range evs {
		name, msg, _ := strings.Cut(ev, ": ")
		if rest, ok := strings.CutPrefix(msg, "Moved straight to its seat's node "); ok {
			out[name], _, _ = strings.Cut(rest, " ")
		}
	}
	return out, nil
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

package sim

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/report"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// Notifier delivers a Spot interruption notice for a node to Lifeboat's queue (the emulated
// SQS queue in lifeboat mode; nothing in baseline mode, where only Karpenter reacts).
type Notifier interface {
	NotifySpotInterruption(ctx context.Context, node *corev1.Node, at time.Time) error
}

type noNotifier struct{}

func (noNotifier) NotifySpotInterruption(context.Context, *corev1.Node, time.Time) error { return nil }

// market plays a scenario's events on a running cluster the way AWS and Karpenter's AWS
// provider do: per notice, a message to Lifeboat's queue, the NodeClaim deleted and a
// SpotInterrupted Warning event on NodeClaim and Node (Karpenter's interruption controller),
// and at notice + notice budget the reclaim: the Node and every Pod on it gone at once.
type market struct {
	c        Clients
	s        *scenario.Scenario
	obs      *observer
	notifier Notifier
	// reclaimBack is the scenario's reclaim-back in lifeboat mode (nil otherwise): the policy
	// is created at t0.
	reclaimBack *scenario.ReclaimBack
	// mode names this market among the run's modes; pair (nil in a single-mode run) makes them
	// interrupt nodes of the same workloads (pair.go).
	mode string
	pair *pairing

	mu       sync.Mutex
	markers  []report.Marker
	killed   map[string]int       // workload key → Pods killed at reclaim
	exposed  map[string]int       // workload key → Pods on a node when its notice came
	noticed  map[string]time.Time // node → when its notice was sent
	reclaims sync.WaitGroup
}

func (m *market) mark(at time.Time, kind, label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.markers = append(m.markers, report.Marker{At: at.Sub(m.obs.start).Round(100 * time.Millisecond), Kind: kind, Label: label})
}

// play runs every event at its time after t0 (the observer's start); it returns when all
// events and reclaims are done or ctx ends.
func (m *market) play(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if m.reclaimBack != nil {
		if err := m.startReclaimBack(ctx, m.reclaimBack); err != nil {
			return err
		}
	}
	events := append([]scenario.Event(nil), m.s.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Duration < events[j].At.Duration })
	for idx, ev := range events {
		if err := sleepUntil(ctx, m.obs.start.Add(ev.At.Duration)); err != nil {
			return err
		}
		logger.Info("market event", "kind", ev.Kind, "pool", ev.Pool, "count", ev.Count)
		switch ev.Kind {
		case scenario.EventBurst, scenario.EventNotice:
			count := ev.Count
			if ev.Kind == scenario.EventNotice || count == 0 {
				count = 1
			}
			// The busiest pool's fullest nodes (a correlated reclaim hits the pool that holds
			// the most), or, after another mode's pick of this event, the nodes closest to it.
			victims := m.victims(ctx, idx, ev.Pool, count)
			if len(victims) == 0 {
				m.mark(time.Now(), "note", "no node in the pool to interrupt")
				continue
			}
			for i, n := range victims {
				delay := time.Duration(0)
				if len(victims) > 1 {
					delay = ev.Spread.Duration * time.Duration(i) / time.Duration(len(victims)-1)
				}
				if err := sleepUntil(ctx, m.obs.start.Add(ev.At.Duration+delay)); err != nil {
					return err
				}
				if err := m.interrupt(ctx, n); err != nil {
					logger.Error(err, "interrupt", "node", n.Name)
				}
			}
		case scenario.EventRebalance:
			m.mark(time.Now(), "rebalance", fmt.Sprintf("rebalance recommendation ×%d", ev.Count))
		case scenario.EventICE:
			if err := m.ice(ctx, ev); err != nil {
				return err
			}
		case scenario.EventPlacementScore:
			m.placementScore(ctx, ev, awsemu.DefaultPlacementScore)
		}
	}
	m.reclaims.Wait()
	return nil
}

func (m *market) wasNoticed(node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.noticed[node]
	return ok
}

// noticeAt is when the node's notice was sent.
func (m *market) noticeAt(node string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.noticed[node]
	return at, ok
}

// interrupt delivers one notice and schedules the reclaim.
func (m *market) interrupt(ctx context.Context, n *corev1.Node) error {
	now := time.Now()
	onNode := m.obs.podsOnNode(n.Name)
	m.mu.Lock()
	m.noticed[n.Name] = now
	if m.exposed == nil {
		m.exposed = map[string]int{}
	}
	for _, p := range onNode {
		m.exposed[podWorkloadKey(p)]++
	}
	m.mu.Unlock()
	m.mark(now, "notice", "notice "+n.Name)
	if err := m.notifier.NotifySpotInterruption(ctx, n, now); err != nil {
		return fmt.Errorf("notify %s: %w", n.Name, err)
	}
	claim := n.Labels["karpenter.sh/nodeclaim"]
	if claim == "" {
		claim = nodeClaimOf(n)
	}
	if err := m.recordSpotInterrupted(ctx, n, claim); err != nil {
		return err
	}
	if claim != "" {
		err := m.c.Dynamic.Resource(localcluster.NodeClaimGVR).Delete(ctx, claim, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete NodeClaim %s: %w", claim, err)
		}
	}
	m.reclaims.Add(1)
	go func() {
		defer m.reclaims.Done()
		if err := sleepUntil(ctx, now.Add(m.s.Timing.Notice.Duration)); err != nil {
			return
		}
		m.reclaim(context.WithoutCancel(ctx), n.Name)
	}()
	return nil
}

func nodeClaimOf(n *corev1.Node) string {
	for _, o := range n.OwnerReferences {
		if o.Kind == "NodeClaim" {
			return o.Name
		}
	}
	return ""
}

// recordSpotInterrupted writes the Warning events Karpenter's AWS interruption controller
// records (reason SpotInterrupted) on the NodeClaim and the Node.
func (m *market) recordSpotInterrupted(ctx context.Context, n *corev1.Node, claim string) error {
	objs := []corev1.ObjectReference{{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}}
	if claim != "" {
		objs = append(objs, corev1.ObjectReference{Kind: "NodeClaim", Name: claim, APIVersion: "karpenter.sh/v1"})
	}
	now := metav1.Now()
	for _, ref := range objs {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: "default"},
			InvolvedObject: ref,
			Reason:         "SpotInterrupted",
			Message:        "Spot interruption warning was triggered",
			Type:           corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "karpenter"},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		if _, err := m.c.Kube.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("record SpotInterrupted on %s %s: %w", ref.Kind, ref.Name, err)
		}
	}
	return nil
}

// reclaim takes the instance away: every Pod still running on the node dies at once (counted
// as killed), then the Node goes.
func (m *market) reclaim(ctx context.Context, node string) {
	logger := klog.FromContext(ctx)
	m.mark(time.Now(), "reclaim", "reclaim "+node)
	for _, p := range m.obs.podsOnNode(node) {
		m.mu.Lock()
		m.killed[podWorkloadKey(p)]++
		m.mu.Unlock()
		err := m.c.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "kill pod at reclaim", "pod", klog.KObj(p))
		}
	}
	// Drop Karpenter's termination finalizer: the instance is gone, nothing is left to drain.
	_, err := m.c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "clear node finalizers at reclaim", "node", node)
	}
	if err := m.c.Kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "delete node at reclaim", "node", node)
	}
}

// ice models a capacity crunch: the default NodePool stops allowing Spot for the period, so
// Karpenter launches On-Demand; then Spot is allowed again. (Karpenter's KWOK provider reads
// its offerings once at start, so unavailability is expressed through the NodePool.) A real
// ICE only fails new Spot launches; the running Spot nodes stay. Narrowing the NodePool's
// requirements, though, makes Karpenter see every Spot node as drifted and replace it with
// On-Demand — so for the period a disruption budget of zero nodes for reason Drifted holds
// them (budgets back to Karpenter's default, 10 %, afterwards; the requirement allows Spot
// again, so they are no longer drifted).
func (m *market) ice(ctx context.Context, ev scenario.Event) error {
	m.mark(time.Now(), "ice", "Spot capacity unavailable")
	if err := m.patchNodePool(ctx, iceNodePoolPatch(true)); err != nil {
		return fmt.Errorf("ice: restrict NodePool to on-demand: %w", err)
	}
	// EC2's Spot placement score drops with the capacity (lifeboat mode asks it).
	m.setPlacementScore(ev.Pool, ev.PlacementScore())
	m.reclaims.Add(1)
	go func() {
		defer m.reclaims.Done()
		if sleepUntil(ctx, time.Now().Add(ev.For.Duration)) != nil {
			return
		}
		m.mark(time.Now(), "ice-end", "Spot capacity back")
		m.setPlacementScore(ev.Pool, awsemu.DefaultPlacementScore)
		if err := m.patchNodePool(ctx, iceNodePoolPatch(false)); err != nil {
			klog.FromContext(ctx).Error(err, "ice: allow spot again")
		}
	}()
	return nil
}

func (m *market) patchNodePool(ctx context.Context, body string) error {
	_, err := m.c.Dynamic.Resource(localcluster.NodePoolGVR).Patch(ctx, "default", typesMerge, []byte(body), metav1.PatchOptions{})
	return err
}

// iceNodePoolPatch is the merge patch of the default NodePool at the start (crunch) and the end
// of a capacity crunch.
func iceNodePoolPatch(crunch bool) string {
	types, budgets := `"spot","on-demand"`, `[{"nodes":"10%"}]`
	if crunch {
		types, budgets = `"on-demand"`, `[{"nodes":"0","reasons":["Drifted"]},{"nodes":"10%"}]`
	}
	return fmt.Sprintf(`{"spec":{"disruption":{"budgets":%s},"template":{"spec":{"requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":[%s]},{"key":"kubernetes.io/os","operator":"In","values":["linux"]}]}}}}`, budgets, types)
}

const typesMerge = types.MergePatchType

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Package pooltelemetry keeps the capacity-pool interruption telemetry that the scheduler's
// CapacityPoolSpread plugin reads (format: pkg/telemetry). Interruptions are recorded once per
// interrupted Node in the same ConfigMap under EventsKey (the controller's own sliding-window
// log, so the window survives restarts); the controller recomputes pools.json from it.
package pooltelemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
)

// EventsKey holds the controller's log of interruptions within the window (JSON Events).
const EventsKey = "events.json"

// Event is one interrupted Node.
type Event struct {
	Node string    `json:"node"`
	Pool string    `json:"pool"`
	Time time.Time `json:"time"`
}

// Window computes the published document from the event log: counts and last interruption per
// capacity pool over [now-window, now]. Pure.
func Window(events []Event, window time.Duration, now time.Time) (*telemetry.Telemetry, []Event) {
	t := &telemetry.Telemetry{WindowSeconds: int64(window / time.Second), Updated: now.UTC(), Pools: map[string]telemetry.PoolStats{}}
	var kept []Event
	for _, e := range events {
		if now.Sub(e.Time) > window {
			continue
		}
		kept = append(kept, e)
		s := t.Pools[e.Pool]
		s.Interruptions++
		if e.Time.After(s.LastInterruption) {
			s.LastInterruption = e.Time.UTC()
		}
		t.Pools[e.Pool] = s
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Time.Before(kept[j].Time) })
	return t, kept
}

// Store reads and writes the ConfigMap.
type Store struct {
	Client client.Client
	Clock  clock.Clock
	Window time.Duration
	// Namespace and Name default to pkg/telemetry's.
	Namespace, Name string
}

func (s *Store) key() types.NamespacedName {
	ns, name := s.Namespace, s.Name
	if ns == "" {
		ns = telemetry.Namespace
	}
	if name == "" {
		name = telemetry.Name
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

// Record adds an interruption of node (capacity pool key pool) once; it reports whether it was
// new. It is idempotent per Node name, so duplicate notices count once.
func (s *Store) Record(ctx context.Context, node, pool string, at time.Time) (bool, error) {
	added := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		added = false
		cm, err := s.get(ctx)
		if err != nil {
			return err
		}
		events, err := decodeEvents(cm)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.Node == node {
				return nil
			}
		}
		events = append(events, Event{Node: node, Pool: pool, Time: at.UTC()})
		if err := s.write(ctx, cm, events); err != nil {
			return err
		}
		added = true
		return nil
	})
	return added, err
}

func (s *Store) get(ctx context.Context) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := s.Client.Get(ctx, s.key(), cm)
	if apierrors.IsNotFound(err) {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.key().Namespace, Name: s.key().Name}}, nil
	}
	return cm, err
}

func decodeEvents(cm *corev1.ConfigMap) ([]Event, error) {
	var events []Event
	if raw := cm.Data[EventsKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &events); err != nil {
			return nil, fmt.Errorf("decode %s/%s %s: %w", cm.Namespace, cm.Name, EventsKey, err)
		}
	}
	return events, nil
}

// write stores events and the recomputed document (create or update with the read version).
func (s *Store) write(ctx context.Context, cm *corev1.ConfigMap, events []Event) error {
	doc, kept := Window(events, s.Window, s.Clock.Now())
	data, err := doc.Encode()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[telemetry.DataKey] = data[telemetry.DataKey]
	cm.Data[EventsKey] = string(raw)
	if cm.ResourceVersion == "" {
		return s.Client.Create(ctx, cm)
	}
	return s.Client.Update(ctx, cm)
}

// Controller republishes the window periodically so that old interruptions age out.
type Controller struct {
	Store  *Store
	Period time.Duration
}

// Register adds the periodic singleton reconciler.
func (c *Controller) Register(mgr ctrl.Manager) error {
	if c.Period == 0 {
		c.Period = 30 * time.Second
	}
	tick := make(chan event.GenericEvent, 1)
	tick <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Store.key().Namespace, Name: c.Store.key().Name}}}
	return ctrl.NewControllerManagedBy(mgr).Named("telemetry").
		WatchesRawSource(source.Channel(tick, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// Reconcile prunes the window and republishes.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := c.Store.get(ctx)
		if err != nil {
			return err
		}
		events, err := decodeEvents(cm)
		if err != nil {
			// A corrupt log must not block publication: start a new window.
			events = nil
		}
		return c.Store.write(ctx, cm, events)
	})
	return reconcile.Result{RequeueAfter: c.Period}, err
}

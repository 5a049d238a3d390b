// Package capacitypoolspread is the CapacityPoolSpread scheduler plugin: it spreads the
// replicas of one workload (Pods with the same controller owner) across capacity pools, so
// that one correlated Spot reclaim takes at most a fraction of the workload, and it penalises
// pools with recent interruptions.
//
// A capacity pool is (instance type, zone, capacity type) from the node labels
// node.kubernetes.io/instance-type, topology.kubernetes.io/zone and karpenter.sh/capacity-type
// (pkg/telemetry.PoolKeyFromLabels). Interruptions come from the ConfigMap the controller
// maintains (pkg/telemetry, lifeboat-system/lifeboat-pool-telemetry by default).
//
// Score: a pool's load is the workload's replicas in it plus hotPoolPenalty replicas per
// recent interruption, each interruption weighing 0.5^(age/hotPoolHalfLife). Nodes in the
// least loaded pool score MaxNodeScore, the most loaded 0, linear in between.
package capacitypoolspread

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/telemetry"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config/validation"
	"github.com/lifeboat-k8s/lifeboat/plugins/internal/cyclestate"
)

const (
	// Name is the plugin's name in the registry and in configurations.
	Name = "CapacityPoolSpread"

	preScoreStateKey = "PreScore" + Name
	// telemetrySyncTimeout bounds how long New waits for the first telemetry read.
	telemetrySyncTimeout = 5 * time.Second
	// loadScale keeps fractional loads (decayed interruptions) in integer scores.
	loadScale = 1000
)

// CapacityPoolSpread scores nodes by how few of the Pod's sibling replicas (and recent
// interruptions) their capacity pool already holds.
type CapacityPoolSpread struct {
	handle         fwk.Handle
	clock          clock.PassiveClock
	hotPoolPenalty float64
	halfLife       time.Duration
	// telemetry is the last valid document read from the ConfigMap; never nil.
	telemetry atomic.Pointer[telemetry.Telemetry]
	// replicas counts controlled Pods per owner and pool, kept in step with the snapshot.
	replicas *replicaIndex
}

var (
	_ fwk.PreScorePlugin = &CapacityPoolSpread{}
	_ fwk.ScorePlugin    = &CapacityPoolSpread{}
	_ fwk.SignPlugin     = &CapacityPoolSpread{}
)

// New decodes and validates the args, then builds the plugin and starts watching the
// telemetry ConfigMap until ctx ends.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return newWithClock(ctx, obj, h, clock.RealClock{})
}

func newWithClock(ctx context.Context, obj runtime.Object, h fwk.Handle, clk clock.PassiveClock) (*CapacityPoolSpread, error) {
	args, err := scheme.DecodeArgs(Name, obj, &configv1.CapacityPoolSpreadArgs{}, validation.ValidateCapacityPoolSpreadArgs)
	if err != nil {
		return nil, err
	}
	pl := &CapacityPoolSpread{
		replicas:       newReplicaIndex(),
		handle:         h,
		clock:          clk,
		hotPoolPenalty: float64(args.HotPoolPenalty),
		halfLife:       args.HotPoolHalfLife.Duration,
	}
	pl.telemetry.Store(&telemetry.Telemetry{Pools: map[string]telemetry.PoolStats{}})
	if args.HotPoolPenalty > 0 {
		if err := pl.watchTelemetry(ctx, args.TelemetryNamespace, args.TelemetryConfigMapName); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// watchTelemetry keeps pl.telemetry up to date from one ConfigMap. It does not wait for the
// first read: until the document arrives (or if it never exists) pools count as cold.
func (pl *CapacityPoolSpread) watchTelemetry(ctx context.Context, namespace, name string) error {
	if pl.handle == nil || pl.handle.ClientSet() == nil {
		return fmt.Errorf("%s: no client to read telemetry %s/%s; set hotPoolPenalty: 0 to run without it", Name, namespace, name)
	}
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "configMap", klog.KRef(namespace, name))
	factory := informers.NewSharedInformerFactoryWithOptions(pl.handle.ClientSet(), 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	update := func(obj interface{}) {
		cm, ok := obj.(*v1.ConfigMap)
		if !ok {
			return
		}
		t, err := telemetry.Parse(cm.Data)
		if err != nil {
			logger.Error(err, "Ignoring unreadable pool telemetry; keeping the last valid document")
			return
		}
		pl.telemetry.Store(t)
		logger.V(4).Info("Pool telemetry updated", "pools", len(t.Pools), "updated", t.Updated)
	}
	_, err := factory.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj interface{}) { update(obj) },
		DeleteFunc: func(interface{}) {
			pl.telemetry.Store(&telemetry.Telemetry{Pools: map[string]telemetry.PoolStats{}})
		},
	})
	if err != nil {
		return fmt.Errorf("%s: watch telemetry %s/%s: %w", Name, namespace, name, err)
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	// Give the first read a bounded moment so that the first decisions after a restart already
	// see hot pools; never block start-up on it (missing RBAC, apiserver trouble).
	syncCtx, cancel := context.WithTimeout(ctx, telemetrySyncTimeout)
	defer cancel()
	for informerType, synced := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !synced {
			logger.Info("Pool telemetry not read yet; scoring pools as cold until it arrives", "informer", informerType.String(), "waited", telemetrySyncTimeout)
		}
	}
	return nil
}

// Name returns the plugin's name.
func (pl *CapacityPoolSpread) Name() string { return Name }

// SignPod refuses to sign Pods with a controller owner: their scores change with every
// sibling placed, so batching would reuse stale scores.
func (pl *CapacityPoolSpread) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if metav1.GetControllerOfNoCopy(pod) != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with a controller owner are spread against their siblings")
	}
	return nil, nil
}

// pool identifies a capacity pool; a struct key spares the hot path a string per node.
type pool struct{ instanceType, zone, capacityType string }

func poolOf(node *v1.Node) pool {
	return pool{node.Labels[v1alpha1.LabelInstanceType], node.Labels[v1alpha1.LabelZone], node.Labels[v1alpha1.LabelCapacityType]}
}

// preScoreState is the load of each capacity pool for the Pod's workload: replicas in
// pools that hold some, hot-pool penalties in pools with recent interruptions. Pools in
// neither map have load 0.
type preScoreState struct {
	replicas map[pool]float64
	penalty  map[pool]float64
}

// load of a pool for this cycle.
func (s *preScoreState) load(p pool) float64 { return s.replicas[p] + s.penalty[p] }

// Clone shares the state: it is never modified after PreScore.
func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore counts the Pod's siblings per capacity pool across all nodes (assumed Pods
// included) and weighs the pools' recent interruptions. Pods without a controller owner are
// not spread: Skip. Cost: one generation check per node; only nodes that changed since the
// last cycle are recounted (replicaIndex).
func (pl *CapacityPoolSpread) PreScore(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	all, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("listing nodes: %w", err))
	}
	s := &preScoreState{replicas: pl.replicas.sync(all, owner.UID)}
	if t := pl.telemetry.Load(); pl.hotPoolPenalty > 0 && len(t.Pools) > 0 {
		now := pl.clock.Now()
		s.penalty = make(map[pool]float64, len(t.Pools))
		for key, stats := range t.Pools {
			if p, ok := parsePoolKey(key); ok {
				s.penalty[p] = pl.hotPoolPenalty * decayedInterruptions(stats, now, pl.halfLife)
			}
		}
	}
	cycleState.Write(preScoreStateKey, s)
	return nil
}

// parsePoolKey is the inverse of telemetry.PoolKey ("<type>/<zone>/<capacity type>").
func parsePoolKey(key string) (pool, bool) {
	typ, rest, ok := strings.Cut(key, "/")
	if !ok {
		return pool{}, false
	}
	zone, capacity, ok := strings.Cut(rest, "/")
	if !ok {
		return pool{}, false
	}
	return pool{instanceType: typ, zone: zone, capacityType: capacity}, true
}

// decayedInterruptions weighs a pool's interruptions by the age of the last one: all of them
// count as if they happened then (reclaims of one pool come in bursts).
func decayedInterruptions(stats telemetry.PoolStats, now time.Time, halfLife time.Duration) float64 {
	if stats.Interruptions <= 0 {
		return 0
	}
	weight := 1.0
	if !stats.LastInterruption.IsZero() && halfLife > 0 {
		age := now.Sub(stats.LastInterruption)
		if age > 0 {
			weight = math.Exp2(-float64(age) / float64(halfLife))
		}
	}
	return float64(stats.Interruptions) * weight
}

// Score returns the load of the node's pool, scaled to an integer (lower is better).
func (pl *CapacityPoolSpread) Score(_ context.Context, cycleState fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := cyclestate.Read[*preScoreState](cycleState, preScoreStateKey, Name)
	if status != nil {
		return 0, status
	}
	load := s.load(poolOf(nodeInfo.Node()))
	return int64(math.Round(load * loadScale)), nil
}

// NormalizeScore maps loads to [0, MaxNodeScore]: least loaded pool highest.
func (pl *CapacityPoolSpread) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores {
		lo = min(lo, s.Score)
		hi = max(hi, s.Score)
	}
	for i := range scores {
		if hi == lo {
			scores[i].Score = fwk.MaxNodeScore
			continue
		}
		scores[i].Score = fwk.MaxNodeScore * (hi - scores[i].Score) / (hi - lo)
	}
	return nil
}

// ScoreExtensions returns the plugin: it normalizes its own scores.
func (pl *CapacityPoolSpread) ScoreExtensions() fwk.ScoreExtensions { return pl }

// Package controllers wires Lifeboat's warm-pool controllers into one controller-runtime
// manager. Each concern is its own package and reconciler; this file only builds them.
package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/activation"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/bridge"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/garbagecollection"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/handoff"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/indexes"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/interruption/intake"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodepool"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/pooltelemetry"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/recycle"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/warmpool"
)

// Scheme holds the types the controllers use: core, Karpenter v1, Lifeboat.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	gv := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	metav1.AddToGroupVersion(s, gv)
	s.AddKnownTypes(gv, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	return s
}

// CacheOptions limits the Event informer to Karpenter's SpotInterrupted events (the controller
// needs no other Event, and a cluster-wide Event cache is large) and the ConfigMap informer to
// Lifeboat's namespace (its telemetry and resume ledger; the controller's Role grants nothing
// wider, so a cluster-wide informer would never sync). namespace "" is lifeboat-system.
func CacheOptions(namespace string) cache.Options {
	if namespace == "" {
		namespace = v1alpha1.DefaultNamespace
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Event{}:     {Field: fields.OneTermEqualSelector("reason", intake.KarpenterReasonSpotInterrupted)},
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{namespace: {}}},
	}}
}

// Deps are the controllers' dependencies.
type Deps struct {
	Instances cloud.Instances
	Clock     clock.Clock
	// Queue, if set, is consumed for interruption notices (run only on the leader).
	Queue *interruptionqueue.Consumer
	// Namespace of Lifeboat (pre-pull Pods, telemetry). Default lifeboat-system.
	Namespace       string
	TelemetryWindow time.Duration
	// SeatImage runs in the handoff's seats; "" is handoff.DefaultSeatImage. SeatPrePullOff:
	// seats do not pull the Pods' images.
	SeatImage      string
	SeatPrePullOff bool
	WarmPool       warmpool.Options
	// Bridge bounds the eviction holds; zero fields take bridge.DefaultOptions.
	Bridge bridge.Options
	// ActiveRestartAfter, HandoffPoll and GCPeriod override those controllers' periods
	// (tests); zero keeps the defaults.
	ActiveRestartAfter time.Duration
	HandoffPoll        time.Duration
	GCPeriod, GCGrace  time.Duration
	// PlacementScorer is the reclaim-back probe (EC2 GetSpotPlacementScores); nil: no
	// reclaim-back move starts.
	PlacementScorer cloud.PlacementScorer
	// ReclaimBack tunes the reclaim-back controller. It runs when the ReclaimBackPolicy CRD is
	// installed (unless Off) and does nothing while no policy exists.
	ReclaimBack reclaimback.Options
}

// Registered gives tests and benchmarks access to the built controllers.
type Registered struct {
	Interruption *interruption.Controller
	WarmPool     *warmpool.Controller
}

// Register builds every controller and adds it to mgr.
func Register(ctx context.Context, mgr manager.Manager, d Deps) (*Registered, error) {
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	if d.Namespace == "" {
		d.Namespace = v1alpha1.DefaultNamespace
	}
	if d.TelemetryWindow == 0 {
		d.TelemetryWindow = time.Hour
	}
	d.WarmPool.Namespace = d.Namespace
	rec := mgr.GetEventRecorder("lifeboat-controller")
	c := mgr.GetClient()
	if err := indexes.Register(ctx, mgr); err != nil {
		return nil, fmt.Errorf("indexes: %w", err)
	}
	store := &pooltelemetry.Store{Client: c, Clock: d.Clock, Window: d.TelemetryWindow, Namespace: d.Namespace}
	wp := warmpool.New(c, d.Instances, d.Clock, rec, d.WarmPool)
	intr := interruption.New(c, mgr.GetAPIReader(), d.Instances, d.Clock, rec, store, d.Namespace)
	act := activation.NewActivator(c, d.Instances, d.Clock, rec)
	if d.ActiveRestartAfter > 0 {
		act.RestartAfter = d.ActiveRestartAfter
	}
	bo := bridge.DefaultOptions()
	if d.Bridge.Notice > 0 {
		bo.Notice = d.Bridge.Notice
	}
	if d.Bridge.Margin > 0 {
		bo.Margin = d.Bridge.Margin
	}
	if d.Bridge.ResumeTimeout > 0 {
		bo.ResumeTimeout = d.Bridge.ResumeTimeout
	}
	if d.Bridge.Poll > 0 {
		bo.Poll = d.Bridge.Poll
	}
	bo.Off = d.Bridge.Off
	if err := bo.Validate(); err != nil {
		return nil, err
	}
	ho := handoff.New(c, d.Clock, rec)
	ho.Namespace = d.Namespace
	if d.SeatImage != "" {
		ho.SeatImage = d.SeatImage
	}
	ho.SeatPrePullOff = d.SeatPrePullOff
	if d.HandoffPoll > 0 {
		ho.Poll = d.HandoffPoll
	}
	gc := garbagecollection.New(c, d.Instances, d.Clock, rec)
	if d.GCPeriod > 0 {
		gc.Period = d.GCPeriod
	}
	if d.GCGrace > 0 {
		gc.Grace = d.GCGrace
	}
	reconcilers := map[string]interface{ Register(ctrl.Manager) error }{
		"warmpool": wp, "interruption": intr, "interruption-intake": intr.Intake(), "activation": act, "handoff": ho,
		"recycle": recycle.New(c, d.Instances, d.Clock, rec), "garbagecollection": gc,
		"nodepool": nodepool.New(c, rec), "telemetry": &pooltelemetry.Controller{Store: store},
	}
	if !bo.Off {
		br := bridge.New(c, mgr.GetAPIReader(), d.Clock, rec, bo)
		br.YieldTo(intr)
		br.Seats = &handoff.SeatSpec{Namespace: ho.Namespace, Image: ho.SeatImage, PrePullImages: !ho.SeatPrePullOff}
		reconcilers["bridge"] = br
	}
	if !d.ReclaimBack.Off {
		// A cluster upgraded without the new CRD (Helm never upgrades crds/) would otherwise
		// fail the whole manager on a watch that never syncs.
		if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: v1alpha1.Group, Kind: "ReclaimBackPolicy"}, v1alpha1.Version); err != nil {
			klog.FromContext(ctx).Info("Reclaim-back off: the ReclaimBackPolicy CRD is not installed (kubectl apply --server-side -f charts/lifeboat/crds/)", "err", err.Error())
		} else {
			reconcilers["reclaimback"] = reclaimback.New(c, d.PlacementScorer, d.Clock, rec, d.Namespace, d.ReclaimBack)
		}
	}
	for name, r := range reconcilers {
		if err := r.Register(mgr); err != nil {
			return nil, fmt.Errorf("register %s: %w", name, err)
		}
	}
	if d.Queue != nil {
		q := d.Queue
		if q.HoldBatchOpen == nil {
			q.HoldBatchOpen = intr.Intake().HoldBatchOpen
		}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			return q.RunBatches(ctx, intr.Intake().HandleBatch)
		})); err != nil {
			return nil, err
		}
	}
	return &Registered{Interruption: intr, WarmPool: wp}, nil
}

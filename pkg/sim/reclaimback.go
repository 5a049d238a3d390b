package sim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

// ReclaimBackPolicyName is the ReclaimBackPolicy a lifeboat-mode run creates at t0 when the
// scenario has reclaimBack.
const ReclaimBackPolicyName = "sim"

// reclaimBackPolicy is the scenario's reclaim-back as the ReclaimBackPolicy the run creates at
// t0, for the default NodePool. A relative window becomes a UTC window of the day it opens:
// its start is t0 + after rounded up to the minute (the API's granularity), so it opens at
// most a minute late. open and close are the window's times (zero for always).
func reclaimBackPolicy(rb *scenario.ReclaimBack, t0 time.Time) (p *v1alpha1.ReclaimBackPolicy, open, close time.Time) {
	inFlight := intstr.Parse(rb.MaxInFlight)
	spec := v1alpha1.ReclaimBackPolicySpec{
		NodePools:         v1alpha1.NodePoolSelector{Names: []string{"default"}},
		MaxInFlight:       &inFlight,
		MinSpotStability:  &metav1.Duration{Duration: rb.MinSpotStability.Duration},
		MinPlacementScore: int32(rb.MinPlacementScore),
		CoolDown:          v1alpha1.CoolDownSpec{Initial: metav1.Duration{Duration: rb.CoolDown.Duration}, Max: metav1.Duration{Duration: 8 * rb.CoolDown.Duration}},
		MoveTimeout:       &metav1.Duration{Duration: rb.MoveTimeout.Duration},
	}
	if rb.Window == nil {
		spec.Always = true
	} else {
		open = t0.UTC().Add(rb.Window.After.Duration)
		if r := open.Truncate(time.Minute); !r.Equal(open) {
			open = r.Add(time.Minute)
		}
		close = open.Add(rb.Window.For.Duration)
		spec.Windows = []v1alpha1.MaintenanceWindow{{
			Days:     []string{open.Weekday().String()[:3]},
			Start:    open.Format("15:04"),
			Duration: metav1.Duration{Duration: rb.Window.For.Duration},
			TimeZone: "UTC",
		}}
	}
	return &v1alpha1.ReclaimBackPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ReclaimBackPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: ReclaimBackPolicyName},
		Spec:       spec,
	}, open, close
}

// startReclaimBack creates the run's ReclaimBackPolicy and marks its window on the time axis.
func (m *market) startReclaimBack(ctx context.Context, rb *scenario.ReclaimBack) error {
	p, open, close := reclaimBackPolicy(rb, m.obs.start)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return err
	}
	gvr := v1alpha1.GroupVersion.WithResource("reclaimbackpolicies")
	if _, err := m.c.Dynamic.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ReclaimBackPolicy %q (is the chart's CRD installed?): %w", ReclaimBackPolicyName, err)
	}
	if open.IsZero() {
		m.mark(m.obs.start, "reclaim-back", "reclaim-back: always")
		return nil
	}
	m.mark(open, "reclaim-back", "reclaim-back window opens")
	m.mark(close, "reclaim-back-end", "reclaim-back window closes")
	return nil
}

// placementScorer sets the Spot placement scores EC2 answers (the AWS emulator, lifeboat
// mode); baseline runs have no EC2 to ask.
type placementScorer interface {
	SetPlacementScore(instanceType, zone string, score int)
}

// setPlacementScore applies a score to an event's pool ("*" or empty: every type).
func (m *market) setPlacementScore(pool scenario.Pool, score int) {
	ps, ok := m.notifier.(placementScorer)
	if !ok {
		return
	}
	typ := pool.InstanceType
	if typ == "*" {
		typ = ""
	}
	ps.SetPlacementScore(typ, pool.Zone, score)
}

// placementScore plays a placement-score event: the score from now on, or for ev.For.
func (m *market) placementScore(ctx context.Context, ev scenario.Event, restore int) {
	m.mark(time.Now(), "placement-score", fmt.Sprintf("Spot placement score %d", ev.Score))
	m.setPlacementScore(ev.Pool, ev.Score)
	if ev.For.Duration <= 0 {
		return
	}
	m.reclaims.Add(1)
	go func() {
		defer m.reclaims.Done()
		if sleepUntil(ctx, time.Now().Add(ev.For.Duration)) == nil {
			m.setPlacementScore(ev.Pool, restore)
		}
	}()
}

// labelZoneIDs gives every Karpenter node the availability-zone ID label Karpenter's AWS
// provider sets (topology.k8s.aws/zone-id; its KWOK provider does not), which reclaim-back's
// placement probe needs to know the zones it asks about. It runs until ctx ends, looking at
// the observer's node cache once a second.
func labelZoneIDs(ctx context.Context, cl Clients, obs *observer) {
	logger := klog.FromContext(ctx)
	for {
		for _, obj := range obs.nodes.List() {
			n := obj.(*corev1.Node)
			zone := n.Labels[corev1.LabelTopologyZone]
			if n.Labels[karpenterNodePoolLabel] == "" || zone == "" || n.Labels[reclaimplan.LabelZoneID] != "" || n.DeletionTimestamp != nil {
				continue
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, reclaimplan.LabelZoneID, awsemu.ZoneID(zone))
			if _, err := cl.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				logger.Error(err, "label the node's zone ID", "node", n.Name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

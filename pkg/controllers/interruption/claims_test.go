package interruption

import (
	"errors"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// poolNodeIn is a pool node of pool "pool" in state, resumed for resumedFor (if set).
func poolNodeIn(name string, state v1alpha1.NodeState, resumedFor string) corev1.Node {
	n := *standbyNode(name, "i-"+name, "4")
	n.Labels[v1alpha1.LabelState] = string(state)
	if resumedFor != "" {
		n.Labels[v1alpha1.LabelResumedFor] = resumedFor
	}
	return n
}

func names(nodes []*corev1.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func TestTakeInventory(t *testing.T) {
	inBatch := map[string]bool{"spot-1": true}
	tests := []struct {
		name          string
		pool          []corev1.Node
		ledger        map[string]ledger.Claim
		wantClaimed   []string // claimedBy["spot-1"]
		wantLedgered  []string
		wantCandidate []string
	}{{
		name:          "standby nodes are candidates",
		pool:          []corev1.Node{poolNodeIn("sb-1", v1alpha1.NodeStateStandby, ""), poolNodeIn("sb-2", v1alpha1.NodeStateStandby, "")},
		wantClaimed:   []string{},
		wantCandidate: []string{"sb-1", "sb-2"},
	}, {
		name:          "an active node labelled for a batch Node is its claim; a handed-off one holds nothing",
		pool:          []corev1.Node{poolNodeIn("boat", v1alpha1.NodeStateActive, "spot-1"), poolNodeIn("old", v1alpha1.NodeStateDraining, "spot-1"), poolNodeIn("sb-1", v1alpha1.NodeStateStandby, "")},
		wantClaimed:   []string{"boat"},
		wantCandidate: []string{"sb-1"},
	}, {
		name:          "a ledger entry for a batch Node is its claim, and no candidate",
		pool:          []corev1.Node{poolNodeIn("sb-1", v1alpha1.NodeStateStandby, ""), poolNodeIn("sb-2", v1alpha1.NodeStateStandby, "")},
		ledger:        map[string]ledger.Claim{"sb-1": {Node: "sb-1", For: "spot-1", Holder: "p/1"}},
		wantClaimed:   []string{"sb-1"},
		wantLedgered:  []string{"sb-1"},
		wantCandidate: []string{"sb-2"},
	}, {
		name:          "a ledger entry for another Node holds its node; a void entry holds nothing",
		pool:          []corev1.Node{poolNodeIn("sb-1", v1alpha1.NodeStateStandby, ""), poolNodeIn("sb-2", v1alpha1.NodeStateStandby, "")},
		ledger:        map[string]ledger.Claim{"sb-1": {Node: "sb-1", For: "spot-9"}, "gone": {Node: "gone", For: "spot-1"}},
		wantClaimed:   []string{},
		wantCandidate: []string{"sb-2"},
	}, {
		name:          "a standby node labelled for another Node is no candidate",
		pool:          []corev1.Node{poolNodeIn("sb-1", v1alpha1.NodeStateStandby, "spot-9")},
		wantClaimed:   []string{},
		wantCandidate: []string{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := takeInventory(tt.pool, tt.ledger, inBatch)
			claimed := names(inv.claimedBy["spot-1"])
			sort.Strings(claimed)
			var ledgered []string
			for name := range inv.ledgered {
				ledgered = append(ledgered, name)
			}
			sort.Strings(ledgered)
			if !reflect.DeepEqual(claimed, tt.wantClaimed) || !reflect.DeepEqual(ledgered, tt.wantLedgered) || !reflect.DeepEqual(names(inv.candidates), tt.wantCandidate) {
				t.Errorf("claimed %v ledgered %v candidates %v, want %v %v %v", claimed, ledgered, names(inv.candidates), tt.wantClaimed, tt.wantLedgered, tt.wantCandidate)
			}
			for _, n := range append(inv.candidates, inv.claimedBy["spot-1"]...) {
				if inv.byName[n.Name] != n {
					t.Errorf("byName misses %s", n.Name)
				}
			}
		})
	}
}

func TestClaimsFor(t *testing.T) {
	x := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Annotations: map[string]string{
		v1alpha1.AnnotationInterruptedAt: "2026-11-29T21:00:00Z", v1alpha1.AnnotationInterruptionSource: "sqs/spot-interruption",
	}}}
	y := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-2"}}
	sb1, sb2 := poolNodeIn("sb-1", v1alpha1.NodeStateStandby, ""), poolNodeIn("sb-2", v1alpha1.NodeStateStandby, "")
	byName := map[string]*corev1.Node{"sb-1": &sb1, "sb-2": &sb2}
	plans := map[string]sizing.ResumePlan{"spot-1": {Resume: []string{"sb-2", "sb-1"}}, "spot-2": {}}
	got := claimsFor([]*corev1.Node{x, y}, plans, byName, "p/7", "2026-11-29T21:00:01Z")
	want := []ledger.Claim{
		{Node: "sb-2", InstanceID: "i-sb-2", For: "spot-1", InterruptedAt: "2026-11-29T21:00:00Z", Source: "sqs/spot-interruption", ClaimedAt: "2026-11-29T21:00:01Z", Holder: "p/7"},
		{Node: "sb-1", InstanceID: "i-sb-1", For: "spot-1", InterruptedAt: "2026-11-29T21:00:00Z", Source: "sqs/spot-interruption", ClaimedAt: "2026-11-29T21:00:01Z", Holder: "p/7"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claims %+v, want %+v", got, want)
	}
}

func TestSettleClaims(t *testing.T) {
	boat, earlier, sb1 := poolNodeIn("boat", v1alpha1.NodeStateActive, "spot-1"), poolNodeIn("earlier", v1alpha1.NodeStateStandby, ""), poolNodeIn("sb-1", v1alpha1.NodeStateStandby, "")
	inv := inventory{
		byName:    map[string]*corev1.Node{"boat": &boat, "earlier": &earlier, "sb-1": &sb1},
		claimedBy: map[string][]*corev1.Node{"spot-1": {&boat, &earlier}},
		// earlier: this batch's first attempt wrote it (holder p/1) before a conflict.
		ledgered: map[string]ledger.Claim{"earlier": {Node: "earlier", For: "spot-1", Holder: "p/1"}},
	}
	written := map[string]ledger.Claim{"sb-1": {Node: "sb-1", For: "spot-1", Holder: "p/1"}}
	conflict := apierrors.NewConflict(corev1.Resource("configmaps"), ledger.Name, errors.New("changed"))
	tests := []struct {
		name         string
		plan         sizing.ResumePlan
		writeErr     error
		wantStart    []string
		wantLedgered []string
		wantFresh    []string
		wantReplan   bool
		wantErr      bool
	}{
		{name: "written: the new claim joins the earlier ones", plan: sizing.ResumePlan{Resume: []string{"sb-1"}}, wantStart: []string{"boat", "earlier", "sb-1"}, wantLedgered: []string{"earlier", "sb-1"}, wantFresh: []string{"earlier", "sb-1"}},
		{name: "nothing to claim: the earlier claims, whatever the write", plan: sizing.ResumePlan{}, writeErr: conflict, wantStart: []string{"boat", "earlier"}, wantLedgered: []string{"earlier"}, wantFresh: []string{"earlier"}},
		{name: "a conflict plans again", plan: sizing.ResumePlan{Resume: []string{"sb-1"}}, writeErr: conflict, wantStart: []string{"boat", "earlier"}, wantLedgered: []string{"earlier"}, wantFresh: []string{"earlier"}, wantReplan: true},
		{name: "a ledger gone since the read plans again", plan: sizing.ResumePlan{Resume: []string{"sb-1"}}, writeErr: apierrors.NewNotFound(corev1.Resource("configmaps"), ledger.Name), wantStart: []string{"boat", "earlier"}, wantLedgered: []string{"earlier"}, wantFresh: []string{"earlier"}, wantReplan: true},
		{name: "another error fails the decision", plan: sizing.ResumePlan{Resume: []string{"sb-1"}}, writeErr: errors.New("forbidden"), wantStart: []string{"boat", "earlier"}, wantLedgered: []string{"earlier"}, wantFresh: []string{"earlier"}, wantErr: true},
	}
	keys := func(m map[string]bool) []string {
		out := []string{}
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := settleClaims("spot-1", tt.plan, inv, written, "p/1", tt.writeErr)
			ledgered := map[string]bool{}
			for k := range o.ledgered {
				ledgered[k] = true
			}
			if got := names(o.toStart); !reflect.DeepEqual(got, tt.wantStart) {
				t.Errorf("toStart %v, want %v", got, tt.wantStart)
			}
			if got := keys(ledgered); !reflect.DeepEqual(got, tt.wantLedgered) {
				t.Errorf("ledgered %v, want %v", got, tt.wantLedgered)
			}
			if got := keys(o.fresh); !reflect.DeepEqual(got, tt.wantFresh) {
				t.Errorf("fresh %v, want %v", got, tt.wantFresh)
			}
			if o.replan != tt.wantReplan || (o.err != nil) != tt.wantErr {
				t.Errorf("replan %v err %v, want replan %v err %v", o.replan, o.err, tt.wantReplan, tt.wantErr)
			}
		})
	}
}

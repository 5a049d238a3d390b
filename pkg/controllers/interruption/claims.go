package interruption

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
	"github.com/lifeboat-k8s/lifeboat/pkg/sizing"
)

// The pure steps of a claim attempt (claimAll): what one read of the pool Nodes and the ledger
// offers the batch, the ledger entries of its plans, and what each Node got from the write.

// inventory is what one read of the pool Nodes and the ledger offers a batch's plans.
type inventory struct {
	// byName are the pool nodes the batch may use: claimed for one of its Nodes, or candidates.
	byName map[string]*corev1.Node
	// claimedBy are the pool nodes already claimed for each of the batch's Nodes: labelled for
	// it (and still active), or recorded only in the ledger (this batch's earlier attempts, or
	// a batch a crash interrupted).
	claimedBy map[string][]*corev1.Node
	// ledgered are the claims of claimedBy that only the ledger records, by claimed node.
	ledgered map[string]ledger.Claim
	// candidates are the standby nodes free to claim, in the order read.
	candidates []*corev1.Node
}

// takeInventory sorts the pool Nodes and the ledger's claims for the batch's Nodes (inBatch).
// A node labelled for a batch Node but no longer active was handed off (draining) since an
// earlier decision, a rebalance recommendation's pre-resume, and cordoned: it holds nothing
// more. A ledger claim whose node is gone or no longer standby is void (reconcileLedger drops
// it). A standby node in any ledger entry, or without pool or instance, is no candidate.
func takeInventory(poolNodes []corev1.Node, inLedger map[string]ledger.Claim, inBatch map[string]bool) inventory {
	inv := inventory{byName: map[string]*corev1.Node{}, claimedBy: map[string][]*corev1.Node{}, ledgered: map[string]ledger.Claim{}}
	standbyByName := map[string]*corev1.Node{}
	var standby []*corev1.Node
	for i := range poolNodes {
		n := &poolNodes[i]
		owner := n.Labels[v1alpha1.LabelResumedFor]
		switch {
		case owner != "" && inBatch[owner]:
			inv.byName[n.Name] = n
			if nodeutil.State(n) == v1alpha1.NodeStateActive {
				inv.claimedBy[owner] = append(inv.claimedBy[owner], n)
			}
		case nodeutil.State(n) == v1alpha1.NodeStateStandby:
			standbyByName[n.Name] = n
			standby = append(standby, n)
		}
	}
	for name, cl := range inLedger {
		if !inBatch[cl.For] {
			continue
		}
		if _, labelled := inv.byName[name]; labelled {
			continue
		}
		n := standbyByName[name]
		if n == nil {
			continue
		}
		inv.byName[name] = n
		inv.claimedBy[cl.For] = append(inv.claimedBy[cl.For], n)
		inv.ledgered[name] = cl
	}
	for _, n := range standby {
		if _, claimed := inv.byName[n.Name]; claimed {
			continue
		}
		if _, held := inLedger[n.Name]; held {
			continue
		}
		if nodeutil.Pool(n) == "" || nodeutil.InstanceID(n) == "" || n.Labels[v1alpha1.LabelResumedFor] != "" {
			continue
		}
		inv.byName[n.Name] = n
		inv.candidates = append(inv.candidates, n)
	}
	return inv
}

// claimsFor are the ledger entries of the plans of the batch's interrupted Nodes: one per node
// a plan resumes, in the batch's order, held by holder and claimed at now.
func claimsFor(interrupted []*corev1.Node, plans map[string]sizing.ResumePlan, byName map[string]*corev1.Node, holder, now string) []ledger.Claim {
	var claims []ledger.Claim
	for _, x := range interrupted {
		for _, name := range plans[x.Name].Resume {
			claims = append(claims, ledger.Claim{
				Node: name, InstanceID: nodeutil.InstanceID(byName[name]), For: x.Name,
				InterruptedAt: x.Annotations[v1alpha1.AnnotationInterruptedAt],
				Source:        x.Annotations[v1alpha1.AnnotationInterruptionSource],
				ClaimedAt:     now, Holder: holder,
			})
		}
	}
	return claims
}

// claimOutcome is what one interrupted Node got from a claim attempt.
type claimOutcome struct {
	// toStart are the pool nodes claimed for the Node: earlier claims, and this attempt's if
	// the write succeeded.
	toStart []*corev1.Node
	// ledgered are the claims of toStart that only the ledger records so far.
	ledgered map[string]ledger.Claim
	// fresh are the claims of toStart that holder wrote: certainly not started yet.
	fresh map[string]bool
	// replan: the ledger changed since the read (another claim): plan the Node again.
	replan bool
	// err: the write failed otherwise; the decision fails.
	err error
}

// settleClaims is the outcome for the interrupted Node of the ledger write of claims (written:
// the write's entries by node; writeErr its error) that its plan took part in.
func settleClaims(node string, plan sizing.ResumePlan, inv inventory, written map[string]ledger.Claim, holder string, writeErr error) claimOutcome {
	o := claimOutcome{toStart: append([]*corev1.Node(nil), inv.claimedBy[node]...), ledgered: map[string]ledger.Claim{}, fresh: map[string]bool{}}
	for _, n := range inv.claimedBy[node] {
		if cl, ok := inv.ledgered[n.Name]; ok {
			o.ledgered[n.Name] = cl
			if cl.Holder == holder {
				o.fresh[n.Name] = true
			}
		}
	}
	if len(plan.Resume) == 0 {
		return o
	}
	switch {
	case writeErr == nil:
		for _, name := range plan.Resume {
			o.toStart = append(o.toStart, inv.byName[name])
			o.ledgered[name] = written[name]
			o.fresh[name] = true
		}
	case apierrors.IsConflict(writeErr) || apierrors.IsNotFound(writeErr):
		o.replan = true
	default:
		errs := make([]error, 0, len(plan.Resume))
		for _, name := range plan.Resume {
			errs = append(errs, fmt.Errorf("claim %s in the resume ledger: %w", name, writeErr))
		}
		o.err = errors.Join(errs...)
	}
	return o
}

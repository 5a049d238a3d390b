package handoff

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodeutil"
)

// Seats: capacity reserved ahead of the handoff for the Pods it must evict.
//
// A Pod that cannot surge (a StatefulSet's, a bare Pod) leaves the lifeboat by eviction: it is
// down from its eviction until its replacement runs elsewhere. If no node has room for it,
// that replacement waits for Karpenter to launch one (30–80 s on AWS, plus the image pull),
// and with a PDB of maxUnavailable 1 every later Pod waits behind it. So while a lifeboat
// hosts such Pods, the handoff keeps one seat for each: a placeholder Pod in Lifeboat's own
// namespace with the Pod's requests and node constraints, scheduled by the default scheduler
// onto ordinary capacity (Karpenter launches nodes for seats that find none). When the Pod is
// evicted, its seat is deleted at once, freeing the room its replacement takes.
//
// A seat also brings the Pod's images to its node: it mounts each as an image volume
// (Kubernetes ≥ 1.35), which the kubelet pulls before the seat starts, so the Pod that takes the
// seat starts from a cached image. The record of where each seat was (SeatRecord) lets the
// webhook steer the Pod's replacement to that node.
//
// Seats live in Lifeboat's namespace — the controller may create Pods only there — and carry
// an owner reference to the lifeboat Node, so they go with it whatever happens to the
// controller. They tolerate neither the lifeboat taint nor the taints of nodes being
// disrupted, so they never land on a lifeboat or a node going away.

// DefaultSeatImage is the seats' container: it requests resources and does nothing.
const DefaultSeatImage = "registry.k8s.io/pause:3.10"

// SeatName is the name of the seat for the Pod namespace/name: stable across the controller's
// restarts, and the same for a StatefulSet Pod's every incarnation.
func SeatName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "lifeboat-seat-" + hex.EncodeToString(sum[:])[:16]
}

// NeedsSeat says whether the handoff keeps a seat for a Pod of the lifeboat: it leaves by
// eviction (not a Deployment's, not a Job's) and is not going already.
func NeedsSeat(g Group, p *corev1.Pod) bool {
	return g.Kind == KindEvict && p.DeletionTimestamp.IsZero()
}

// keepsSeat: a Pod the handoff evicted keeps its seat until it is gone from the lifeboat —
// through its grace period — so that no other Pod takes the room before its replacement.
func keepsSeat(g Group, p *corev1.Pod) bool {
	return g.Kind == KindEvict
}

// SeatWait bounds how long the handoff keeps a Pod that needs a seat on the draining lifeboat
// while its seat has no usable room: Karpenter is launching a node for the seat, and the Pod
// serves where it is meanwhile instead of waiting, down, for the same node. After SeatWait of
// draining (capacity may be short, an ICE, a seat that cannot be created) it is evicted
// anyway, as without seats.
const SeatWait = 3 * time.Minute

// SeatAllowsEviction says whether the handoff may evict a Pod that needs a seat, whose seat is
// seat (nil: none yet) and whose lifeboat has been draining for draining: the seat holds room
// on a node that can take the Pod (usable: SeatNodeUsable of the seat's node), is Ready — its
// node has pulled the Pod's images (the seat's image volumes), so the replacement starts from
// a cached image instead of waiting out the pull, down, while the Pod could still serve on the
// lifeboat —, the lifeboat Node already carried the seat's host in its seat record when the
// pass began (recorded: the webhook, which gives the re-created Pod its preference for that
// host, may read the record only once it is written; an eviction in the pass that writes it
// would race it), and no other protected Pod waiting to be scheduled, nor another seat, would
// take that room first (contested: Contested); or the drain has waited SeatWait. Pure.
func SeatAllowsEviction(seat *corev1.Pod, usable, recorded, contested bool, draining time.Duration) bool {
	if draining >= SeatWait {
		return true
	}
	return seat != nil && seat.DeletionTimestamp.IsZero() && seat.Spec.NodeName != "" && nodeutil.PodReady(seat) && usable && recorded && !contested
}

// SeatsFirst says whether a draining lifeboat's Deployments wait with their surge: a Pod that
// needs a seat is still on it (not yet evicted) or on another lifeboat of the burst (elsewhere:
// their surge Pods would take that Pod's seat room as much as this lifeboat's), and the drain is
// younger than SeatWait. Pure.
func SeatsFirst(groups []Group, elsewhere bool, draining time.Duration) bool {
	if draining >= SeatWait {
		return false
	}
	if elsewhere {
		return true
	}
	for _, g := range groups {
		for _, p := range g.Pods {
			if NeedsSeat(g, p) {
				return true
			}
		}
	}
	return false
}

// Contested says whether a seat's room would be taken before Pod p's replacement gets it: a
// protected Pod not yet scheduled (waiting) has p's priority or more — the scheduler takes it
// first when the seat frees the room. A handoff's own surge is such a Pod: the evictions wait
// for the surge's Pods to find their places. So is another seat still waiting for room (of
// seats: any priority) — the default scheduler places seats, and it does not wait for the
// lifeboat scheduler's Pods of a higher priority: whichever sees the freed room first takes it
// (measured, compressed simulation: a StatefulSet Pod moved to its seat lost the room to the
// seat of another replica, Pending, and waited 45 s, down, for a node Karpenter launched for
// that seat). Pure.
func Contested(p *corev1.Pod, waiting, seats []*corev1.Pod) bool {
	prio := ptr.Deref(p.Spec.Priority, 0)
	for _, w := range waiting {
		if (w.Namespace != p.Namespace || w.Name != p.Name) && ptr.Deref(w.Spec.Priority, 0) >= prio {
			return true
		}
	}
	own := SeatName(p.Namespace, p.Name)
	for _, s := range seats {
		if s.Name != own && s.Spec.NodeName == "" && s.DeletionTimestamp.IsZero() && !nodeutil.IsTerminal(s) {
			return true
		}
	}
	return false
}

// SeatNodeUsable says whether room a seat holds on node n (nil: gone) can take the Pod: the
// node is Ready, schedulable and not going away — not deleted, not tainted by a disruption
// (Karpenter's, an interruption, a lifeboat's). A seat placed on a node that an interruption
// hit a moment later holds no usable room: it is replaced. Pure.
func SeatNodeUsable(n *corev1.Node) bool {
	if n == nil || !n.DeletionTimestamp.IsZero() || n.Spec.Unschedulable || !nodeutil.Ready(n) {
		return false
	}
	for _, key := range []string{v1alpha1.TaintKarpenterDisrupted, v1alpha1.TaintInterrupted, v1alpha1.TaintLifeboat, v1alpha1.TaintStandby} {
		if nodeutil.HasTaint(n, key) {
			return false
		}
	}
	return true
}

// SeatSpec is how the handoff makes seats.
type SeatSpec struct {
	// Namespace of the seats: Lifeboat's.
	Namespace string
	// Image runs in the seats; "" is DefaultSeatImage.
	Image string
	// PrePullImages: a seat mounts the Pod's images as image volumes (see PrePullVolumes).
	PrePullImages bool
	// Pool owns the seats (garbage collection when the WarmPool goes). Not the lifeboat Node:
	// Karpenter does not provision for a Pod a Node owns (it takes it for a static Pod), so a
	// Node-owned seat only ever found room that already existed. A lifeboat's seats go with
	// it through the handoff controller (leftover).
	Pool *v1alpha1.WarmPool
}

// Seat is the seat for Pod p of lifeboat node. Pure.
func Seat(p *corev1.Pod, node *corev1.Node, spec SeatSpec) *corev1.Pod {
	image := spec.Image
	if image == "" {
		image = DefaultSeatImage
	}
	seat := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: SeatName(p.Namespace, p.Name), Namespace: spec.Namespace,
			Labels: map[string]string{v1alpha1.LabelSeat: "true"},
			Annotations: map[string]string{
				v1alpha1.AnnotationSeatFor:  p.Namespace + "/" + p.Name,
				v1alpha1.AnnotationSeatNode: node.Name,
			},
		},
		Spec: corev1.PodSpec{
			NodeSelector:                  seatNodeSelector(p, node),
			Tolerations:                   seatTolerations(p.Spec.Tolerations),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			// Lifeboat's namespace enforces Pod Security "restricted".
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65535),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "seat", Image: image,
				Resources: corev1.ResourceRequirements{Requests: nodeutil.PodRequests(p)},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		seat.Spec.Affinity = &corev1.Affinity{NodeAffinity: a.NodeAffinity.DeepCopy()}
	}
	if spec.PrePullImages {
		seat.Spec.Volumes = PrePullVolumes(p)
	}
	if spec.Pool != nil {
		seat.OwnerReferences = []metav1.OwnerReference{poolOwner(spec.Pool)}
	}
	return seat
}

// PrePullVolumes are image volumes of the Pod's images (init containers', then containers',
// each once), so that the kubelet of the node a seat lands on pulls them before the Pod moves
// there. Image volumes need not be mounted to be pulled. None for a Pod that pulls with
// imagePullSecrets (a seat in Lifeboat's namespace cannot use them: the pull would fail) or
// runs on Windows (no image volumes there). Pure.
func PrePullVolumes(p *corev1.Pod) []corev1.Volume {
	if len(p.Spec.ImagePullSecrets) > 0 || (p.Spec.OS != nil && p.Spec.OS.Name == corev1.Windows) {
		return nil
	}
	var out []corev1.Volume
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Image == "" || seen[c.Image] {
			continue
		}
		seen[c.Image] = true
		out = append(out, corev1.Volume{
			Name: fmt.Sprintf("prepull-%d", len(out)),
			VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
				Reference: c.Image, PullPolicy: corev1.PullIfNotPresent}},
		})
	}
	return out
}

// seatNodeSelector is the Pod's node selector, and the lifeboat's zone when the Pod mounts a
// PersistentVolumeClaim: its volume (a zonal EBS volume, say) is in the zone the Pod runs in
// now, so room in another zone would not take the Pod.
func seatNodeSelector(p *corev1.Pod, node *corev1.Node) map[string]string {
	zone := node.Labels[v1alpha1.LabelZone]
	claims := false
	for _, v := range p.Spec.Volumes {
		claims = claims || v.PersistentVolumeClaim != nil || v.Ephemeral != nil
	}
	if !claims || zone == "" {
		return p.Spec.NodeSelector
	}
	out := make(map[string]string, len(p.Spec.NodeSelector)+1)
	maps.Copy(out, p.Spec.NodeSelector)
	out[v1alpha1.LabelZone] = zone
	return out
}

// seatTolerations are the Pod's tolerations less those that would let a seat onto a lifeboat
// or a node going away: Lifeboat's pool, standby and interruption taints, Karpenter's
// disruption taint, and a toleration of every taint (no key, operator Exists).
func seatTolerations(in []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range in {
		switch {
		case t.Key == "" && t.Operator == corev1.TolerationOpExists,
			t.Key == v1alpha1.TaintLifeboat, t.Key == v1alpha1.TaintStandby, t.Key == v1alpha1.TaintInterrupted,
			t.Key == v1alpha1.TaintKarpenterDisrupted,
			strings.HasPrefix(t.Key, "node.kubernetes.io/"): // not-ready, unreachable, …: kept to the defaults
			continue
		}
		out = append(out, t)
	}
	return out
}

// SeatPlan is what syncSeats writes: the seats to create and the names of those to delete.
type SeatPlan struct {
	Create []*corev1.Pod
	Delete []string
	// Adopt are seats made for one of the node's Pods elsewhere — by the bridge, at the hold
	// on the interrupted node the Pod came from — that become this lifeboat's (AdoptSeat).
	Adopt []*corev1.Pod
}

// PlanSeats compares the seats a lifeboat node needs (one per Pod of its groups that NeedsSeat)
// with those it has. A seat another node made for one of them is adopted. A seat placed on a
// node not in usable (SeatNodeUsable, by node name) is deleted, and made again by a later plan.
// Pure.
func PlanSeats(node *corev1.Node, groups []Group, existing []*corev1.Pod, usable map[string]bool, spec SeatSpec) SeatPlan {
	want, keep := map[string]*corev1.Pod{}, map[string]bool{}
	for _, g := range groups {
		for _, p := range g.Pods {
			if NeedsSeat(g, p) {
				want[SeatName(p.Namespace, p.Name)] = p
			}
			if keepsSeat(g, p) {
				keep[SeatName(p.Namespace, p.Name)] = true
			}
		}
	}
	var plan SeatPlan
	have := map[string]bool{}
	for _, s := range existing {
		adopt := s.Annotations[v1alpha1.AnnotationSeatNode] != node.Name && want[s.Name] != nil
		if s.Annotations[v1alpha1.AnnotationSeatNode] != node.Name && !adopt {
			continue
		}
		have[s.Name] = true
		switch {
		case !s.DeletionTimestamp.IsZero():
		case !keep[s.Name] || (s.Spec.NodeName != "" && !usable[s.Spec.NodeName]):
			plan.Delete = append(plan.Delete, s.Name)
		case adopt:
			plan.Adopt = append(plan.Adopt, AdoptSeat(s, node, spec))
		}
	}
	for _, name := range sortedNames(want) {
		if !have[name] {
			plan.Create = append(plan.Create, Seat(want[name], node, spec))
		}
	}
	slices.Sort(plan.Delete)
	return plan
}

// AdoptSeat is seat made this lifeboat node's: its seat-node annotation names node, and the
// WarmPool owns it as it owns the seats the handoff makes. Pure.
func AdoptSeat(seat *corev1.Pod, node *corev1.Node, spec SeatSpec) *corev1.Pod {
	out := seat.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[v1alpha1.AnnotationSeatNode] = node.Name
	if spec.Pool != nil {
		out.OwnerReferences = []metav1.OwnerReference{poolOwner(spec.Pool)}
	}
	return out
}

func poolOwner(pool *v1alpha1.WarmPool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "WarmPool", Name: pool.Name, UID: pool.UID}
}

func sortedNames(m map[string]*corev1.Pod) []string {
	return slices.Sorted(maps.Keys(m))
}

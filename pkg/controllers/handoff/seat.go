package handoff

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

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

// Seat is the seat for Pod p of lifeboat node, in namespace. Pure.
func Seat(p *corev1.Pod, node *corev1.Node, namespace, image string) *corev1.Pod {
	if image == "" {
		image = DefaultSeatImage
	}
	seat := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: SeatName(p.Namespace, p.Name), Namespace: namespace,
			Labels: map[string]string{v1alpha1.LabelSeat: "true"},
			Annotations: map[string]string{
				v1alpha1.AnnotationSeatFor:  p.Namespace + "/" + p.Name,
				v1alpha1.AnnotationSeatNode: node.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
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
	return seat
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
}

// PlanSeats compares the seats a lifeboat node needs (one per Pod of its groups that NeedsSeat)
// with those it has. Pure.
func PlanSeats(node *corev1.Node, groups []Group, existing []*corev1.Pod, namespace, image string) SeatPlan {
	want := map[string]*corev1.Pod{}
	for _, g := range groups {
		for _, p := range g.Pods {
			if NeedsSeat(g, p) {
				want[SeatName(p.Namespace, p.Name)] = p
			}
		}
	}
	var plan SeatPlan
	have := map[string]bool{}
	for _, s := range existing {
		if s.Annotations[v1alpha1.AnnotationSeatNode] != node.Name {
			continue
		}
		have[s.Name] = true
		if want[s.Name] == nil && s.DeletionTimestamp.IsZero() {
			plan.Delete = append(plan.Delete, s.Name)
		}
	}
	for _, name := range sortedNames(want) {
		if !have[name] {
			plan.Create = append(plan.Create, Seat(want[name], node, namespace, image))
		}
	}
	slices.Sort(plan.Delete)
	return plan
}

func sortedNames(m map[string]*corev1.Pod) []string {
	return slices.Sorted(maps.Keys(m))
}

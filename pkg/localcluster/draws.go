package localcluster

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// karpenterNodePoolLabel is on every Node Karpenter creates: the name of its NodePool.
const karpenterNodePoolLabel = "karpenter.sh/nodepool"

// drawKeys names the delay draws so that two runs of one scenario draw alike ("common random
// numbers"). A delay's jitter is a hash of (seed, key); keyed by object name, two runs would
// draw differently for the same event, because the names Kubernetes generates differ: a
// Deployment's replacement Pods and Karpenter's NodeClaims get random suffixes. A side-by-side
// comparison of a maximum (a workload's recovery) would then differ by chance. Keyed by
// "the i-th Pod of this workload to start" and "the i-th Node of this NodePool to boot", the
// two runs draw the same sequence of delays for each workload and NodePool, and differ only
// where what they do differs.
//
// The order restarts at the cluster's draw epoch (Cluster.RestartDrawOrder, a simulation's
// t0): an object created from then on is "the i-th created since t0". Without that, a run whose
// ramp created 160 Nodes and one whose ramp created 200 would draw different boots for their
// first replacement Node after the same notice.
//
// A drawKeys is used by one goroutine. A key is kept from its first use until done is called
// for the object, so a retried annotation draws the same delay.
type drawKeys struct {
	// epoch, when set, is the draw epoch's start, shared with the Cluster.
	epoch   *atomic.Pointer[time.Time]
	next    map[string]int
	pending map[types.UID]string
}

// podKey is the draw key of a Pod: its workload and the order in which its Pods come to start.
func (k *drawKeys) podKey(p *corev1.Pod) string {
	return k.key(p.UID, k.inEpoch(podWorkload(p), p.CreationTimestamp.Time))
}

// inEpoch names group's sequence of objects created at created: its own sequence from the draw
// epoch on.
func (k *drawKeys) inEpoch(group string, created time.Time) string {
	if k.epoch == nil {
		return group
	}
	if from := k.epoch.Load(); from != nil && !created.Before(*from) {
		return group + "@t0"
	}
	return group
}

// nodeKey is the draw key of a Node: its Karpenter NodePool and the order in which the pool's
// Nodes come to boot; a Node of no NodePool keeps its name (the harness names those).
func (k *drawKeys) nodeKey(n *corev1.Node) string {
	pool, ok := n.Labels[karpenterNodePoolLabel]
	if !ok {
		return n.Name
	}
	return k.key(n.UID, k.inEpoch("nodepool/"+pool, n.CreationTimestamp.Time))
}

func (k *drawKeys) key(uid types.UID, group string) string {
	if key, ok := k.pending[uid]; ok {
		return key
	}
	if k.next == nil {
		k.next, k.pending = map[string]int{}, map[types.UID]string{}
	}
	k.next[group]++
	key := fmt.Sprintf("%s#%d", group, k.next[group])
	k.pending[uid] = key
	return key
}

// done forgets the key of an object whose delay is written (or which is gone).
func (k *drawKeys) done(uid types.UID) { delete(k.pending, uid) }

// podWorkload names the workload a Pod belongs to, the same in every run: its controller's kind
// and name, with a ReplicaSet named by its Deployment (the ReplicaSet's name carries the Pod
// template's hash, which differs when the template does). A Pod with no controller is itself.
func podWorkload(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return p.Namespace + "/Pod/" + p.Name
	}
	name := ref.Name
	if ref.Kind == "ReplicaSet" {
		if hash := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			name = strings.TrimSuffix(name, "-"+hash)
		}
	}
	return p.Namespace + "/" + ref.Kind + "/" + name
}

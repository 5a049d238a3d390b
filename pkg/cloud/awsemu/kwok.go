package awsemu

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/kwoknode"
)

// BoundInstance is what a NodeBinder learns about an instance.
type BoundInstance struct {
	ID, InstanceType, Zone, Region string
	PrivateDNSName, PrivateIP      string
	// UserData is decoded; Tags are the instance's EC2 tags.
	UserData string
	Tags     map[string]string
}

// NodeBinder mirrors emulated instances as Kubernetes Nodes. The emulator calls it in order per
// instance, from one goroutine, after the delays of the state machine:
//
//   - Register when a launched instance's kubelet would have registered (Delays.Launch +
//     Delays.NodeBoot after RunInstances);
//   - PowerOff when the instance starts stopping (hibernation: the kubelet stops heartbeating);
//   - PowerOn when a resumed instance's kubelet is back (Delays.Start + Delays.NodeResume);
//   - Remove when the instance starts shutting down.
type NodeBinder interface {
	Register(ctx context.Context, inst BoundInstance) error
	PowerOff(ctx context.Context, inst BoundInstance) error
	PowerOn(ctx context.Context, inst BoundInstance) error
	Remove(ctx context.Context, inst BoundInstance) error
}

type binderOp int

const (
	opRegister binderOp = iota
	opPowerOff
	opPowerOn
	opRemove
)

func (o binderOp) String() string {
	return [...]string{"register", "power-off", "power-on", "remove"}[o]
}

type binderTask struct {
	op   binderOp
	inst BoundInstance
}

// binderQueue applies binder calls in order on one goroutine, so the emulator never calls the
// API server while holding its lock.
type binderQueue struct {
	binder NodeBinder
	log    klog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	cond      *sync.Cond
	tasks     []binderTask
	enqueued  uint64
	processed uint64
	closed    bool
}

func newBinderQueue(b NodeBinder, log klog.Logger) *binderQueue {
	ctx, cancel := context.WithCancel(context.Background())
	q := &binderQueue{binder: b, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *binderQueue) push(t binderTask) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.tasks = append(q.tasks, t)
	q.enqueued++
	q.cond.Broadcast()
}

func (q *binderQueue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.tasks) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		t := q.tasks[0]
		q.tasks = q.tasks[1:]
		q.mu.Unlock()

		q.apply(t)

		q.mu.Lock()
		q.processed++
		q.cond.Broadcast()
		q.mu.Unlock()
	}
}

func (q *binderQueue) apply(t binderTask) {
	var err error
	switch t.op {
	case opRegister:
		err = q.binder.Register(q.ctx, t.inst)
	case opPowerOff:
		err = q.binder.PowerOff(q.ctx, t.inst)
	case opPowerOn:
		err = q.binder.PowerOn(q.ctx, t.inst)
	case opRemove:
		err = q.binder.Remove(q.ctx, t.inst)
	}
	if err != nil && q.ctx.Err() == nil {
		q.log.Error(err, "Node binding failed", "op", t.op.String(), "instance", t.inst.ID, "node", t.inst.PrivateDNSName)
	}
}

func (q *binderQueue) wait(ctx context.Context) error {
	q.mu.Lock()
	target := q.enqueued
	q.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.processed < target && !q.closed {
		if err := ctx.Err(); err != nil {
			return err
		}
		q.cond.Wait()
	}
	return nil
}

func (q *binderQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.tasks = nil
	q.cond.Broadcast()
	q.mu.Unlock()
	q.cancel()
	<-q.done
}

func (e *Emulator) bindLocked(op binderOp, in *instance) {
	if e.binder == nil {
		return
	}
	e.binder.push(binderTask{op: op, inst: BoundInstance{
		ID: in.id, InstanceType: in.instanceType, Zone: in.zone, Region: e.opts.Region,
		PrivateDNSName: in.privateDNS, PrivateIP: in.privateIP, UserData: in.userData, Tags: copyTags(in.tags),
	}})
}

// The local cluster's KWOK conventions (package kwoknode, shared with pkg/localcluster):
//   - LabelPower=off makes the KWOK stages stop heartbeating and set Ready=False; removing it
//     brings the Node back;
//   - AnnotationReadyAt (RFC 3339) is when a booting or powered-on Node turns Ready. The emulator
//     has already waited the boot or resume delay when it calls the binder, so it writes "now".
const (
	LabelPower        = kwoknode.LabelPower
	PowerOff          = kwoknode.PowerOff
	AnnotationReadyAt = kwoknode.AnnotationReadyAt
)

// KubeNodeBinder is the client-go NodeBinder for a cluster whose Nodes are simulated by KWOK.
type KubeNodeBinder struct {
	Client kubernetes.Interface
	// Annotations added to every Node, by default the one KWOK selects managed Nodes by
	// (kwok.x-k8s.io/node: fake).
	Annotations map[string]string
	// Labels added to every Node.
	Labels map[string]string
	// Pods is the allocatable Pod count; default 110.
	Pods int
}

var _ NodeBinder = (*KubeNodeBinder)(nil)

// DefaultKWOKAnnotations select Nodes for KWOK's default configuration.
func DefaultKWOKAnnotations() map[string]string {
	return map[string]string{kwoknode.Annotation: kwoknode.AnnotationValue}
}

// NodeFor builds the Node a KubeNodeBinder registers for an instance: named by its private DNS
// name, providerID aws:///<zone>/<id>, the well-known instance-type/zone/region labels, the
// kubelet's --node-labels and --register-with-taints from the user data, and for pool instances
// (tag lifeboat.dev/pool) the pool label and the lifeboat and standby taints.
func (b *KubeNodeBinder) NodeFor(inst BoundInstance) *corev1.Node {
	vcpu, mem := shapeOf(inst.InstanceType)
	pods := b.Pods
	if pods == 0 {
		pods = 110
	}
	labels := map[string]string{
		corev1.LabelHostname:           inst.PrivateDNSName,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelInstanceTypeStable: inst.InstanceType,
		corev1.LabelTopologyZone:       inst.Zone,
		corev1.LabelTopologyRegion:     inst.Region,
	}
	for k, v := range b.Labels {
		labels[k] = v
	}
	nodeLabels, taints := kubeletFlagsFromUserData(inst.UserData)
	for k, v := range nodeLabels {
		labels[k] = v
	}
	if pool := inst.Tags[v1alpha1.LabelPool]; pool != "" {
		labels[v1alpha1.LabelPool] = pool
		taints = appendTaint(taints, corev1.Taint{Key: v1alpha1.TaintLifeboat, Value: pool, Effect: corev1.TaintEffectNoSchedule})
		taints = appendTaint(taints, corev1.Taint{Key: v1alpha1.TaintStandby, Effect: corev1.TaintEffectNoSchedule})
	}
	annotations := copyTags(b.Annotations)
	if b.Annotations == nil {
		annotations = DefaultKWOKAnnotations()
	}
	annotations[AnnotationReadyAt] = time.Now().UTC().Format(time.RFC3339Nano)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(vcpu), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(mem)<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: inst.PrivateDNSName, Labels: labels, Annotations: annotations},
		Spec: corev1.NodeSpec{
			ProviderID: "aws:///" + inst.Zone + "/" + inst.ID,
			Taints:     taints,
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: inst.PrivateIP},
				{Type: corev1.NodeInternalDNS, Address: inst.PrivateDNSName},
				{Type: corev1.NodeHostName, Address: inst.PrivateDNSName},
			},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "fake"},
		},
	}
}

func appendTaint(taints []corev1.Taint, t corev1.Taint) []corev1.Taint {
	for _, have := range taints {
		if have.Key == t.Key && have.Effect == t.Effect {
			return taints
		}
	}
	return append(taints, t)
}

// kubeletFlagsFromUserData finds --node-labels=k=v,… and --register-with-taints=k=v:Effect,…
// anywhere in the user data (bootstrap.sh --kubelet-extra-args, nodeadm's kubelet flags).
func kubeletFlagsFromUserData(userData string) (map[string]string, []corev1.Taint) {
	labels := map[string]string{}
	var taints []corev1.Taint
	for _, field := range strings.FieldsFunc(userData, func(r rune) bool {
		return r == ' ' || r == '\n' || r == '\t' || r == '"' || r == '\'' || r == '[' || r == ']'
	}) {
		field = strings.TrimSuffix(field, ",")
		switch {
		case strings.HasPrefix(field, "--node-labels="):
			for _, kv := range strings.Split(strings.TrimPrefix(field, "--node-labels="), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
					labels[k] = v
				}
			}
		case strings.HasPrefix(field, "--register-with-taints="):
			for _, spec := range strings.Split(strings.TrimPrefix(field, "--register-with-taints="), ",") {
				kv, effect, ok := strings.Cut(spec, ":")
				if !ok {
					continue
				}
				k, v, _ := strings.Cut(kv, "=")
				if k == "" {
					continue
				}
				taints = appendTaint(taints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
			}
		}
	}
	return labels, taints
}

// Register implements NodeBinder. An existing Node of the same name is left as is (the emulator
// or a previous run registered it).
func (b *KubeNodeBinder) Register(ctx context.Context, inst BoundInstance) error {
	node := b.NodeFor(inst)
	_, err := b.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return b.PowerOn(ctx, inst)
	}
	if err != nil {
		return fmt.Errorf("register node %s for %s: %w", node.Name, inst.ID, err)
	}
	return nil
}

// PowerOff implements NodeBinder: it sets the power label to "off".
func (b *KubeNodeBinder) PowerOff(ctx context.Context, inst BoundInstance) error {
	return b.patch(ctx, inst.PrivateDNSName, map[string]any{"labels": map[string]any{LabelPower: PowerOff}})
}

// PowerOn implements NodeBinder: it removes the power label, Ready now.
func (b *KubeNodeBinder) PowerOn(ctx context.Context, inst BoundInstance) error {
	return b.patch(ctx, inst.PrivateDNSName, map[string]any{
		"labels":      map[string]any{LabelPower: nil},
		"annotations": map[string]any{AnnotationReadyAt: time.Now().UTC().Format(time.RFC3339Nano)},
	})
}

func (b *KubeNodeBinder) patch(ctx context.Context, name string, metadata map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	if _, err := b.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s %s: %w", name, patch, err)
	}
	return nil
}

// Remove implements NodeBinder; a missing Node is not an error.
func (b *KubeNodeBinder) Remove(ctx context.Context, inst BoundInstance) error {
	err := b.Client.CoreV1().Nodes().Delete(ctx, inst.PrivateDNSName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s of %s: %w", inst.PrivateDNSName, inst.ID, err)
	}
	return nil
}

package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/kwoknode"
)

// How the harness drives KWOK. KWOK only manages Nodes carrying KWOKAnnotation (Karpenter's
// KWOK provider sets it on the Nodes it creates). The stages below are this project's own:
//
//   - a new Node reports Ready=False at once, as a booting kubelet does, so that
//     kube-controller-manager keeps the node.kubernetes.io/not-ready taint on it;
//   - a Node becomes Ready at the time in AnnotationReadyAt, which the harness' delay
//     controller writes from the first matching NodeBootDelays rule (creation + delay);
//   - a Node labelled LabelPower=off stops heartbeating and turns Ready=False ("powered off",
//     e.g. a hibernated instance); removing the label powers it on: it is Ready again at once,
//     or at AnnotationReadyAt if that is later (set it to model a resume delay);
//   - a Pod on a KWOK Node becomes Running/Ready at AnnotationStartAt, which the delay
//     controller writes when the Pod is bound, from the first PodStartDelays rule that matches
//     the Node's labels (image pull + app start), never before its Node is Ready; a rule with
//     ImagesCached matches only a Pod whose every image is already on its Node (pulled by an
//     earlier Pod, whose pull the later one waits out as a kubelet does, or listed in
//     node.status.images, as the warm pool's pre-pull leaves them);
//   - Job Pods complete AnnotationRunFor after they started (default at once, as KWOK does);
//   - a deleted Pod turns Failed at once (a kubelet puts a deleted Pod in a terminal phase
//     before it goes: the Job controller, whose podFailurePolicy implies
//     podReplacementPolicy Failed, replaces it only then) and is removed;
//   - a Node lists the images of the Pods bound to it — containers, init containers and image
//     volumes — in node.status.images, as a kubelet reports the images it pulled.
//
// The names are package kwoknode's (shared with the AWS emulator).
const (
	KWOKAnnotation      = kwoknode.Annotation
	KWOKAnnotationValue = kwoknode.AnnotationValue

	LabelPower        = kwoknode.LabelPower
	PowerOff          = kwoknode.PowerOff
	AnnotationReadyAt = kwoknode.AnnotationReadyAt
	AnnotationStartAt = kwoknode.AnnotationStartAt
	AnnotationRunFor  = kwoknode.AnnotationRunFor
)

// DelayRule gives a delay to Nodes whose labels match Selector (all key/values). Rules are
// evaluated in order; the first match wins; no match means no delay. Jitter spreads the delay
// uniformly over Delay ± Jitter, deterministically per DelaySeed and draw: the i-th Pod of a
// workload to start, the i-th Node of a Karpenter NodePool to boot (drawKeys), so two runs of
// one scenario draw the same delays for the same events whatever names their objects got.
type DelayRule struct {
	Selector map[string]string
	// PodSelector (PodStartDelays only): the rule matches only a Pod whose labels match it
	// (all key/values) — e.g. a placeholder with no application to start.
	PodSelector map[string]string
	// ImagesCached (PodStartDelays only): the rule matches only a Pod whose images are all on
	// its Node already — a start without a pull.
	ImagesCached bool
	Delay        time.Duration
	Jitter       time.Duration
}

func matchDelay(rules []DelayRule, nodeLabels, podLabels map[string]string, cached bool, seed int64, draw string) time.Duration {
	for _, r := range rules {
		if r.ImagesCached && !cached {
			continue
		}
		if !labels.SelectorFromSet(r.PodSelector).Matches(labels.Set(podLabels)) {
			continue
		}
		if labels.SelectorFromSet(r.Selector).Matches(labels.Set(nodeLabels)) {
			return r.Delay + jitter(r.Jitter, seed, draw)
		}
	}
	return 0
}

// jitter is a deterministic value in [-j, +j] for (seed, draw).
func jitter(j time.Duration, seed int64, draw string) time.Duration {
	if j <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, draw)
	u := float64(h.Sum64()%1_000_000) / 1_000_000 // [0,1)
	return time.Duration((2*u - 1) * float64(j))
}

// kwokStages is the KWOK configuration: this project's Node and Pod stages.
func kwokStages() string {
	return `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-node-register
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: DoesNotExist
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: "node is booting"
        reason: KubeletNotReady
        status: "False"
        type: Ready
      phase: Pending
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-node-boot
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['False', 'Unknown']
    - key: '.metadata.labels["` + LabelPower + `"]'
      operator: NotIn
      values: ['` + PowerOff + `']
    - key: '.metadata.annotations["` + AnnotationReadyAt + `"]'
      operator: Exists
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + AnnotationReadyAt + `"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type  | Quote}}
      {{ end }}
      addresses:
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
      {{ with NodePort }}
      daemonEndpoints:
        kubeletEndpoint:
          Port: {{ . }}
      {{ end }}
      allocatable:
      {{ with .status.allocatable }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: "4"
        memory: 16Gi
        pods: "110"
      {{ end }}
      capacity:
      {{ with .status.capacity }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: "4"
        memory: 16Gi
        pods: "110"
      {{ end }}
      {{ $nodeInfo := .status.nodeInfo }}
      {{ $kwokVersion := printf "kwok-%s" Version }}
      nodeInfo:
        architecture: {{ or $nodeInfo.architecture "amd64" }}
        bootID: {{ or $nodeInfo.bootID ` + "`\"\"`" + ` }}
        containerRuntimeVersion: {{ or $nodeInfo.containerRuntimeVersion $kwokVersion }}
        kernelVersion: {{ or $nodeInfo.kernelVersion $kwokVersion }}
        kubeProxyVersion: {{ or $nodeInfo.kubeProxyVersion $kwokVersion }}
        kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}
        machineID: {{ or $nodeInfo.machineID ` + "`\"\"`" + ` }}
        operatingSystem: {{ or $nodeInfo.operatingSystem "linux" }}
        osImage: {{ or $nodeInfo.osImage ` + "`\"\"`" + ` }}
        systemUUID: {{ or $nodeInfo.systemUUID ` + "`\"\"`" + ` }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-node-heartbeat
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: In
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
    - key: '.metadata.labels["` + LabelPower + `"]'
      operator: NotIn
      values: ['` + PowerOff + `']
  delay:
    durationMilliseconds: 20000
    jitterDurationMilliseconds: 25000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-node-power-off
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.metadata.labels["` + LabelPower + `"]'
      operator: In
      values: ['` + PowerOff + `']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['False']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      {{ if eq .type "Ready" }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: "instance powered off (stopped or hibernated)"
        reason: PoweredOff
        status: "False"
        type: Ready
      {{ else }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type  | Quote}}
      {{ end }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ['Pending']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
    - key: '.metadata.annotations["` + AnnotationStartAt + `"]'
      operator: Exists
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + AnnotationStartAt + `"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      {{ range .spec.readinessGates }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ .conditionType | Quote }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-pod-complete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ['Running']
    - key: '.metadata.ownerReferences.[].kind'
      operator: In
      values: ['Job']
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + AnnotationRunFor + `"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
` + terminatedContainers(0, "Completed") + `      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-pod-terminate
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.status.phase'
      operator: NotIn
      values: ['Succeeded', 'Failed']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      {{ if or (eq .type "Ready") (eq .type "ContainersReady") }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: {{ .type | Quote }}
      {{ else }}
      - lastTransitionTime: {{ .lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      {{ end }}
` + terminatedContainers(137, "Error") + `      phase: Failed
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lifeboat-pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.status.phase'
      operator: In
      values: ['Succeeded', 'Failed']
  next:
    delete: true
`
}

// terminatedContainers is the statusTemplate fragment that ends every container of a Pod with
// exitCode and reason, as a kubelet reports them when the Pod completes or is killed.
func terminatedContainers(exitCode int, reason string) string {
	return fmt.Sprintf(`      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: %d
            finishedAt: {{ $now | Quote }}
            reason: %s
            startedAt: {{ $now | Quote }}
      {{ end }}
`, exitCode, reason)
}

func writeKWOKConfig(path string) error {
	return os.WriteFile(path, []byte(kwokStages()), 0o644)
}

// delayController writes the ready-at / start-at annotations from the delay rules. It runs in
// the harness process, so the rules are plain Go values and need no CRD.
type delayController struct {
	client    kubernetes.Interface
	nodeRules []DelayRule
	podRules  []DelayRule
	seed      int64
	nodes     cache.Indexer
	// pulls is when each image is on each Node ("node\x00image"): the start of the first Pod
	// that pulled it there. Only the Pod goroutine uses it.
	pulls map[string]time.Time
	// podDraws and nodeDraws key the jitter of each delay (see drawKeys); one per goroutine.
	podDraws, nodeDraws drawKeys
}

// RestartDrawOrder starts the draw epoch at at: Pods and Nodes created from then on draw their
// delays as the i-th of their workload or NodePool created since at (drawKeys), so the runs of
// one scenario draw alike after their t0 whatever their ramps created before it. The epoch
// starts at the second of at: creation timestamps have whole seconds. Without KWOK it does
// nothing.
func (c *Cluster) RestartDrawOrder(at time.Time) {
	from := at.Truncate(time.Second)
	c.drawEpoch.Store(&from)
}

func (d *delayController) run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("kwok-delays")
	factory := informers.NewSharedInformerFactory(d.client, 0)
	nodeInf := factory.Core().V1().Nodes().Informer()
	podInf := factory.Core().V1().Pods().Informer()
	d.nodes = nodeInf.GetIndexer()

	nodeQueue := make(chan string, 4096)
	podQueue := make(chan types.NamespacedName, 16384)
	_, _ = nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { enqueueNode(nodeQueue, o) },
		UpdateFunc: func(_, o any) { enqueueNode(nodeQueue, o) },
	})
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { enqueuePod(podQueue, o) },
		UpdateFunc: func(_, o any) { enqueuePod(podQueue, o) },
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, podInf.HasSynced) {
		return fmt.Errorf("kwok delay controller: caches did not sync")
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-nodeQueue:
				if err := d.annotateNode(ctx, name); err != nil && ctx.Err() == nil {
					logger.V(2).Info("annotate node", "node", name, "err", err)
					requeueLater(ctx, nodeQueue, name)
				}
			}
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case key := <-podQueue:
				if err := d.annotatePod(ctx, key); err != nil && ctx.Err() == nil {
					logger.V(2).Info("annotate pod", "pod", key, "err", err)
					requeueLater(ctx, podQueue, key)
				}
			}
		}
	}()
	return nil
}

func requeueLater[T any](ctx context.Context, q chan T, v T) {
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
			select {
			case q <- v:
			case <-ctx.Done():
			}
		}
	}()
}

func enqueueNode(q chan string, o any) {
	n, ok := o.(*corev1.Node)
	if !ok || n.Annotations[KWOKAnnotation] != KWOKAnnotationValue || n.Annotations[AnnotationReadyAt] != "" {
		return
	}
	q <- n.Name
}

func enqueuePod(q chan types.NamespacedName, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || p.Annotations[AnnotationStartAt] != "" || p.DeletionTimestamp != nil {
		return
	}
	q <- types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

func (d *delayController) annotateNode(ctx context.Context, name string) error {
	obj, ok, err := d.nodes.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	n := obj.(*corev1.Node)
	if n.Annotations[AnnotationReadyAt] != "" {
		return nil
	}
	readyAt := n.CreationTimestamp.Add(matchDelay(d.nodeRules, n.Labels, nil, false, d.seed, d.nodeDraws.nodeKey(n)))
	err = patchAnnotation(ctx, d.client.CoreV1().Nodes().Patch, "", name, AnnotationReadyAt, readyAt)
	if err == nil || apierrors.IsNotFound(err) {
		d.nodeDraws.done(n.UID)
		return nil
	}
	return err
}

func (d *delayController) annotatePod(ctx context.Context, key types.NamespacedName) error {
	pod, err := d.client.CoreV1().Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Annotations[AnnotationStartAt] != "" || pod.Spec.NodeName == "" {
		return nil
	}
	obj, ok, _ := d.nodes.GetByKey(pod.Spec.NodeName)
	if !ok {
		return fmt.Errorf("node %s of pod %s not in cache yet", pod.Spec.NodeName, key)
	}
	n := obj.(*corev1.Node)
	if n.Annotations[KWOKAnnotation] != KWOKAnnotationValue {
		return nil // not a KWOK node: nobody will start this Pod
	}
	nodeReadyAt := n.Annotations[AnnotationReadyAt]
	if nodeReadyAt == "" && n.Labels[LabelPower] != PowerOff && NodeReadyStatus(n) != corev1.ConditionTrue {
		return fmt.Errorf("node %s has no boot time yet", n.Name)
	}
	// A container cannot start before its node has booted.
	from := time.Now()
	if ready, err := time.Parse(time.RFC3339Nano, nodeReadyAt); err == nil && ready.After(from) {
		from = ready
	}
	if d.pulls == nil {
		d.pulls = map[string]time.Time{}
	}
	images := PodImages(pod)
	startAt := startTime(d.podRules, n, pod.Labels, images, d.pulls, from, d.seed, d.podDraws.podKey(pod))
	err = patchAnnotation(ctx, d.client.CoreV1().Pods(key.Namespace).Patch, key.Namespace, key.Name, AnnotationStartAt, startAt)
	if err == nil || apierrors.IsNotFound(err) {
		d.podDraws.done(pod.UID)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	recordPulls(d.pulls, n, images, startAt)
	return d.reportImages(ctx, pod)
}

// reportImages plays the kubelet's image reporting: once a Pod is bound, its Node lists the
// Pod's images in node.status.images (a kubelet pulls them before starting the containers).
// Code that proves images are cached on a node, such as the warm pool's pre-pull, reads this.
func (d *delayController) reportImages(ctx context.Context, pod *corev1.Pod) error {
	obj, ok, err := d.nodes.GetByKey(pod.Spec.NodeName)
	if err != nil || !ok {
		return err
	}
	n := obj.(*corev1.Node)
	have := nodeImages(n)
	images := append([]corev1.ContainerImage(nil), n.Status.Images...)
	added := false
	for _, img := range PodImages(pod) {
		if !have[img] {
			have[img] = true
			images = append(images, corev1.ContainerImage{Names: []string{img}, SizeBytes: 50 << 20})
			added = true
		}
	}
	if !added {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"images": images}})
	if err != nil {
		return err
	}
	_, err = d.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// PodImages are the images a kubelet pulls for a Pod: its init containers', its containers' and
// its image volumes' (each once, in that order).
func PodImages(pod *corev1.Pod) []string {
	var out []string
	seen := map[string]bool{}
	add := func(img string) {
		if img != "" && !seen[img] {
			seen[img] = true
			out = append(out, img)
		}
	}
	for _, c := range pod.Spec.InitContainers {
		add(c.Image)
	}
	for _, c := range pod.Spec.Containers {
		add(c.Image)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			add(v.Image.Reference)
		}
	}
	return out
}

func nodeImages(n *corev1.Node) map[string]bool {
	have := map[string]bool{}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			have[name] = true
		}
	}
	return have
}

// startTime is when a Pod bound to Node n with images starts: from (now, or the Node's boot
// if later) plus the first matching rule's delay. Its images are cached when each is on the
// Node: listed in node.status.images, or pulled by an earlier Pod (pulls: when that pull
// ends) — then the Pod also waits for the latest of those pulls, as a kubelet shares one pull
// among the Pods that need the image.
func startTime(rules []DelayRule, n *corev1.Node, podLabels map[string]string, images []string, pulls map[string]time.Time, from time.Time, seed int64, draw string) time.Time {
	listed := nodeImages(n)
	cached, pulledAt := true, time.Time{}
	for _, img := range images {
		at, pulling := pulls[n.Name+"\x00"+img]
		switch {
		case pulling:
			if at.After(pulledAt) {
				pulledAt = at
			}
		case !listed[img]:
			cached = false
		}
	}
	if cached && pulledAt.After(from) {
		from = pulledAt
	}
	return from.Add(matchDelay(rules, n.Labels, podLabels, cached, seed, draw))
}

// recordPulls notes that a Pod starting at startAt on Node n brings its images there: those
// not there yet arrive then.
func recordPulls(pulls map[string]time.Time, n *corev1.Node, images []string, startAt time.Time) {
	listed := nodeImages(n)
	for _, img := range images {
		if _, ok := pulls[n.Name+"\x00"+img]; !ok && !listed[img] {
			pulls[n.Name+"\x00"+img] = startAt
		}
	}
}

type patchFunc[T any] func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)

func patchAnnotation[T any](ctx context.Context, patch patchFunc[T], _ string, name, key string, at time.Time) error {
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, at.UTC().Format(time.RFC3339Nano))
	_, err := patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	return err
}

// CreateKWOKNode creates a Node that KWOK manages as a fake kubelet. It is Ready after the
// NodeBootDelays rule that matches its labels. Capacity/allocatable default to 4 CPU, 16Gi.
// With ControllerManager on, the Node starts with the not-ready taint a kubelet registers
// with (kube-controller-manager lifts it once Ready); without it nothing would lift it.
func (c *Cluster) CreateKWOKNode(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	if !c.opts.KWOK {
		return nil, fmt.Errorf("CreateKWOKNode: the cluster was started without KWOK (set Options.KWOK)")
	}
	n := node.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[KWOKAnnotation] = KWOKAnnotationValue
	if c.opts.ControllerManager {
		n.Spec.Taints = WithNotReadyTaint(n.Spec.Taints)
	}
	return c.Client().CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
}

// WithNotReadyTaint adds node.kubernetes.io/not-ready:NoSchedule, as a kubelet does when it
// registers a Node; kube-controller-manager removes it once the Node is Ready. Code that
// creates KWOK Nodes itself (e.g. the AWS emulator's KWOK binding) should use it, or the
// scheduler may bind Pods to a Node that is still booting.
func WithNotReadyTaint(taints []corev1.Taint) []corev1.Taint {
	for _, t := range taints {
		if t.Key == corev1.TaintNodeNotReady {
			return taints
		}
	}
	return append(taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
}

// PowerOff makes a KWOK node stop heartbeating and report Ready=False, like a stopped or
// hibernated instance.
func (c *Cluster) PowerOff(ctx context.Context, nodeName string) error {
	return SetPower(ctx, c.Client(), nodeName, false, 0)
}

// PowerOn brings a powered-off KWOK node back: Ready again at once.
func (c *Cluster) PowerOn(ctx context.Context, nodeName string) error {
	return SetPower(ctx, c.Client(), nodeName, true, 0)
}

// SetPower powers a KWOK node off or on through the LabelPower convention. When powering on
// with a delay, the Node turns Ready only after it (e.g. a hibernated instance resuming). It
// needs only a client, so tools outside tests (the AWS emulator's KWOK binding, `lifeboat
// sim`) use it too.
func SetPower(ctx context.Context, client kubernetes.Interface, nodeName string, on bool, delay time.Duration) error {
	var body string
	if on {
		body = fmt.Sprintf(`{"metadata":{"labels":{%q:null},"annotations":{%q:%q}}}`,
			LabelPower, AnnotationReadyAt, time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	} else {
		body = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, LabelPower, PowerOff)
	}
	_, err := client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("power %s node %s: %w", map[bool]string{true: "on", false: "off"}[on], nodeName, err)
	}
	return nil
}

// WaitNodeReady waits until the Node's Ready condition has the wanted status.
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, nodeName string, ready bool) error {
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return NodeReadyStatus(n) == want, nil
	})
}

// NodeReadyStatus returns the status of the Node's Ready condition ("" when absent).
func NodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

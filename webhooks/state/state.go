// Package state is how the webhooks read the cluster: informer caches first, and a live read only
// when an object the request depends on is not in the cache yet (a ReplicaSet created a few
// milliseconds before its first Pod, a namespace created just before its first workload).
package state

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

// GVKs of the objects whose metadata the owner chain needs.
var kindGVK = map[policy.Kind]schema.GroupVersionKind{
	policy.KindReplicaSet:  {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	policy.KindDeployment:  {Group: "apps", Version: "v1", Kind: "Deployment"},
	policy.KindStatefulSet: {Group: "apps", Version: "v1", Kind: "StatefulSet"},
	policy.KindJob:         {Group: "batch", Version: "v1", Kind: "Job"},
	policy.KindCronJob:     {Group: "batch", Version: "v1", Kind: "CronJob"},
}

// MetadataObjects are the PartialObjectMetadata objects to cache metadata-only: the webhooks only
// need labels and owner references of workloads, so the cache holds neither specs nor templates.
func MetadataObjects() []client.Object {
	var out []client.Object
	for _, k := range []policy.Kind{policy.KindReplicaSet, policy.KindDeployment, policy.KindStatefulSet, policy.KindJob, policy.KindCronJob} {
		out = append(out, metadataObject(k))
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return append(out, ns)
}

// PodMetadataObject is the Pods' metadata-only informer of the eviction webhook: most
// evictions of a drain are of Pods Lifeboat never holds, decided from it without a read of the
// API server (policy.EvictionAllowedByMetadata).
func PodMetadataObject() client.Object {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// PoolNodeMetadataObject is the metadata-only informer of the warm pools' Nodes (PoolNodeSelector
// restricts it to them): the Pod webhook reads whether a lifeboat is active
// (policy.Config.SchedulerRouting).
func PoolNodeMetadataObject() client.Object {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return m
}

// PoolNodeSelector selects the warm pools' Nodes: the only Nodes the webhook caches.
func PoolNodeSelector() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.LabelPool, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return labels.NewSelector().Add(*req)
}

func metadataObject(k policy.Kind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(kindGVK[k])
	return m
}

// Cluster answers the webhooks' questions about the cluster.
type Cluster struct {
	// Cache is the informer-backed reader (namespaces and workloads as metadata, PDBs and
	// PriorityClasses in full).
	Cache client.Reader
	// Live is read only on a cache miss; nil disables the fallback.
	Live client.Reader
	// PodMetadata caches Pods' metadata for the eviction webhook; nil: every eviction reads
	// the API server.
	PodMetadata client.Reader
	// PoolNodes caches the warm pools' Nodes' metadata (PoolNodeMetadataObject); nil: no
	// lifeboat is ever seen active.
	PoolNodes client.Reader
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// LifeboatActive reports whether a pool Node is in state active (claimed for an interruption,
// until its handoff). It reads the cache only: a Pod created in the few milliseconds between the
// claim and the cache's update keeps the default scheduler, which is what it had before.
func (c *Cluster) LifeboatActive(ctx context.Context) (bool, error) {
	if c.PoolNodes == nil {
		return false, nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.PoolNodes.List(ctx, list, client.MatchingLabels{v1alpha1.LabelState: string(v1alpha1.NodeStateActive)}); err != nil {
		return false, fmt.Errorf("list active lifeboat Nodes: %w", err)
	}
	for i := range list.Items {
		if _, ok := list.Items[i].Labels[v1alpha1.LabelPool]; ok && list.Items[i].DeletionTimestamp == nil {
			return true, nil
		}
	}
	return false, nil
}

// SeatHost is the kubernetes.io/hostname of the node where the handoff kept a seat for the Pod
// namespace/name (a lifeboat Node's AnnotationSeats, or AnnotationBridgeSeats for a Pod the
// bridge moved straight to its seat; entries younger than policy.SeatRecordTTL), "" for none.
// Cache only. Every pool Node is read, whatever its state: a lifeboat emptied by its last
// eviction may be recycled before that Pod's replacement comes. A record that does not parse
// is skipped: the preference only saves an image pull.
func (c *Cluster) SeatHost(ctx context.Context, namespace, name string) (string, error) {
	if c.PoolNodes == nil || name == "" {
		return "", nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.PoolNodes.List(ctx, list); err != nil {
		return "", fmt.Errorf("list lifeboat Nodes: %w", err)
	}
	key, now := namespace+"/"+name, c.now()
	var newest policy.SeatEntry // a Pod moved more than once has more than one: the last counts
	for i := range list.Items {
		for _, a := range []string{v1alpha1.AnnotationSeats, v1alpha1.AnnotationBridgeSeats} {
			raw, ok := list.Items[i].Annotations[a]
			if !ok {
				continue
			}
			rec, err := policy.ParseSeatRecord(raw)
			if err != nil {
				continue
			}
			if e, ok := rec.Entry(key, now); ok && e.Host != "" && !e.At.Before(newest.At) {
				newest = e
			}
		}
	}
	return newest.Host, nil
}

func (c *Cluster) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

var _ policy.MetadataLookup = &Cluster{}

// Metadata returns a workload's metadata, or nil when it does not exist.
func (c *Cluster) Metadata(ctx context.Context, kind policy.Kind, namespace, name string) (*metav1.ObjectMeta, error) {
	gvk, ok := kindGVK[kind]
	if !ok {
		return nil, fmt.Errorf("kind %s is not part of an owner chain", kind)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	found, err := c.get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, m)
	if err != nil || !found {
		return nil, err
	}
	return &m.ObjectMeta, nil
}

// NamespaceLabels returns the labels of a namespace (nil if it does not exist).
func (c *Cluster) NamespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	found, err := c.get(ctx, types.NamespacedName{Name: name}, m)
	if err != nil || !found {
		return nil, err
	}
	return m.Labels, nil
}

// PDBs returns the PodDisruptionBudgets of a namespace.
func (c *Cluster) PDBs(ctx context.Context, namespace string) ([]*policyv1.PodDisruptionBudget, error) {
	var list policyv1.PodDisruptionBudgetList
	if err := c.Cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets in %s: %w", namespace, err)
	}
	out := make([]*policyv1.PodDisruptionBudget, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// LivePDBs reads the PodDisruptionBudgets of a namespace from the API server, for a verdict
// that a PDB missing from the cache would change: a PDB applied together with its workload (one
// `kubectl apply -f`) is created milliseconds before it and may not be cached yet. False when
// there is no live reader.
func (c *Cluster) LivePDBs(ctx context.Context, namespace string) ([]*policyv1.PodDisruptionBudget, bool, error) {
	if c.Live == nil {
		return nil, false, nil
	}
	var list policyv1.PodDisruptionBudgetList
	if err := c.Live.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, false, fmt.Errorf("list PodDisruptionBudgets in %s: %w", namespace, err)
	}
	out := make([]*policyv1.PodDisruptionBudget, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, true, nil
}

// PriorityClass returns a PriorityClass from the cache, or nil when it does not exist. Classes
// change rarely and are created before the Pods that use them, so there is no live fallback.
func (c *Cluster) PriorityClass(ctx context.Context, name string) (*policy.PriorityClass, error) {
	if name == "" {
		return nil, nil
	}
	var pc schedulingv1.PriorityClass
	if err := c.Cache.Get(ctx, types.NamespacedName{Name: name}, &pc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get PriorityClass %s: %w", name, err)
	}
	return &policy.PriorityClass{Name: pc.Name, Value: pc.Value, PreemptionPolicy: pc.PreemptionPolicy, GlobalDefault: pc.GlobalDefault}, nil
}

func (c *Cluster) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	err := c.Cache.Get(ctx, key, obj)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("get %s %s from cache: %w", obj.GetObjectKind().GroupVersionKind().Kind, key, err)
	}
	if c.Live == nil {
		return false, nil
	}
	err = c.Live.Get(ctx, key, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("get %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, key, err)
	}
}

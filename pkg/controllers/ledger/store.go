package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// View is one read of the ledger.
type View struct {
	// ConfigMap is the ledger as read; nil if it does not exist yet.
	ConfigMap *corev1.ConfigMap
	// ByNode are its claims by claimed node.
	ByNode map[string]Claim
}

// Store reads and writes the ledger for one controller process. Its writes are serialized, and
// it remembers the API server's answer to the last of them and the versions they replaced, so
// that a read from a cache behind this process's own writes is replaced by that answer.
type Store struct {
	namespace string
	client    client.Client
	reader    client.Reader

	mu sync.Mutex
	// lastWrite is the API server's answer to this process's last ledger write.
	lastWrite *corev1.ConfigMap
	// superseded are the versions this process's writes replaced ("" for none): a cached
	// ledger at such a version is behind them.
	superseded map[string]bool
}

// NewStore returns the Store of the ledger in namespace. c writes; reader reads the API server
// (Remove).
func NewStore(namespace string, c client.Client, reader client.Reader) *Store {
	return &Store{namespace: namespace, client: c, reader: reader, superseded: map[string]bool{}}
}

// Namespace is the ledger's namespace.
func (s *Store) Namespace() string { return s.namespace }

// Read reads the ledger from from (the cache or the API server). From the cache, a claim made
// an instant ago may be missing: the write of claims planned on it then fails its
// resourceVersion precondition. A cached copy that this process's own writes have superseded is
// replaced by the API server's answer to the last of them (the next batch of a burst split over
// two receives must not lose a round trip to a conflict with the first). Entries that do not
// parse still hold their nodes (and are logged).
func (s *Store) Read(ctx context.Context, from client.Reader) (*View, error) {
	cm := &corev1.ConfigMap{}
	err := from.Get(ctx, Key(s.namespace), cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = nil
	case err != nil:
		return nil, fmt.Errorf("read the resume ledger %s: %w", Key(s.namespace), err)
	}
	if newer := s.ownWriteNewerThan(cm); newer != nil {
		cm = newer
	}
	if cm == nil {
		return &View{ByNode: map[string]Claim{}}, nil
	}
	claims, err := Decode(cm)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the resume ledger")
	}
	return &View{ConfigMap: cm, ByNode: claims}, nil
}

// ownWriteNewerThan returns the answer to this process's last ledger write if read (nil: not
// found) is a version that write superseded; else nil. Once a read shows the last write, the
// record of superseded versions is cleared.
func (s *Store) ownWriteNewerThan(read *corev1.ConfigMap) *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.lastWrite
	if last == nil {
		return nil
	}
	switch {
	case read == nil:
		if s.superseded[""] {
			return last.DeepCopy()
		}
	case read.ResourceVersion == last.ResourceVersion:
		clear(s.superseded)
	case s.superseded[read.ResourceVersion]:
		return last.DeepCopy()
	}
	return nil
}

// noteWrite records the API server's answer to this process's write of the ledger that
// replaced version base ("" for a creation). Callers hold mu.
func (s *Store) noteWrite(base string, answer *corev1.ConfigMap) {
	s.superseded[base] = true
	s.lastWrite = answer.DeepCopy()
}

// Append adds claims to the ledger as read in v: a patch with its resourceVersion as
// precondition, or the creation of the ledger if v found none (which fails if another writer
// created it since). If another write of this process came after v was read, the claims are
// added to that write's answer instead (the batches reserve their picks from each other, so
// their claims cannot overlap; if they do, it is a conflict). Any failure of the precondition
// is a conflict: plan again.
func (s *Store) Append(ctx context.Context, v *View, claims []Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := v.ConfigMap
	if last := s.lastWrite; last != nil && (base == nil && s.superseded[""] || base != nil && s.superseded[base.ResourceVersion]) {
		base = last
		for _, cl := range claims {
			if _, taken := base.Data[cl.Node]; taken {
				return apierrors.NewConflict(corev1.Resource("configmaps"), Name, fmt.Errorf("node %s was claimed by another batch", cl.Node))
			}
		}
	}
	entries := make(map[string]string, len(claims))
	for _, cl := range claims {
		entries[cl.Node] = Encode(cl)
	}
	if base == nil {
		return s.create(ctx, entries)
	}
	// The merge patch adds the claims' keys, with the resourceVersion read as precondition. It
	// is written out directly: the burst's one write on the way to StartInstances, no diff of
	// the whole ledger before it.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": base.ResourceVersion},
		"data":     entries,
	})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: base.Namespace, Name: base.Name}}
	if err := s.client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	s.noteWrite(base.ResourceVersion, cm)
	return nil
}

// create creates the ledger with entries; an existing ledger is a conflict. Callers hold mu.
func (s *Store) create(ctx context.Context, entries map[string]string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: Name, Labels: map[string]string{"app.kubernetes.io/part-of": "lifeboat", "app.kubernetes.io/component": "resume-ledger"}},
		Data:       entries,
	}
	err := s.client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		return apierrors.NewConflict(corev1.Resource("configmaps"), Name, err)
	}
	if err == nil {
		s.noteWrite("", cm)
	}
	return err
}

// Remove drops the entries drop selects from the ledger (read from the API server).
func (s *Store) Remove(ctx context.Context, drop func(Claim) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		cm := &corev1.ConfigMap{}
		if err := s.reader.Get(ctx, Key(s.namespace), cm); err != nil {
			return client.IgnoreNotFound(err)
		}
		claims, _ := Decode(cm)
		before := cm.DeepCopy()
		changed := false
		for node, cl := range claims {
			if drop(cl) {
				delete(cm.Data, node)
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if err := s.client.Patch(ctx, cm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return client.IgnoreNotFound(err)
		}
		s.noteWrite(before.ResourceVersion, cm)
		return nil
	})
}

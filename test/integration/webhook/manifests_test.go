package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// TestManifestsApply applies everything in manifests/webhook/ (and the namespace manifest) to the
// real apiserver with server-side apply in dry-run mode, so a stale field, a wrong apiVersion or an
// invalid object fails here and not at install time. The namespace is applied for real first:
// namespaced objects cannot be dry-run into a namespace that does not exist.
func TestManifestsApply(t *testing.T) {
	ctx := context.Background()
	dc, err := discovery.NewDiscoveryClientForConfig(shared.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	// Any warning (Pod Security "restricted" on the Deployment's template, a deprecated field)
	// fails the test too.
	cfg := shared.RESTConfig()
	warnings := &warningCollector{}
	cfg.WarningHandler = warnings
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	apply := func(path string, dryRun bool) int {
		n := 0
		for _, doc := range decodeManifests(t, path) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(doc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s: %s %s: %v", path, gvk, u.GetName(), err)
			}
			var ri = dyn.Resource(m.Resource)
			opts := metav1.PatchOptions{FieldManager: "lifeboat-manifests-test", Force: boolPtr(true)}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			var res interface {
				Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
			} = ri
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				res = ri.Namespace(u.GetNamespace())
			}
			if _, err := res.Patch(ctx, u.GetName(), types.ApplyPatchType, doc, opts); err != nil {
				t.Errorf("%s: apply %s %s/%s: %v", path, gvk.Kind, u.GetNamespace(), u.GetName(), err)
			}
			n++
		}
		return n
	}

	apply(repoPath(t, "manifests/namespace.yaml"), false)
	files, err := filepath.Glob(repoPath(t, "manifests/webhook/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		if apply(f, true) == 0 {
			t.Errorf("%s holds no objects", f)
		}
		b, _ := os.ReadFile(f)
		for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass", "Deployment", "PodDisruptionBudget", "ServiceAccount", "ClusterRole", "Role"} {
			if strings.Contains(string(b), "kind: "+k+"\n") {
				kinds[k] = true
			}
		}
	}
	for _, w := range warnings.take() {
		t.Errorf("warning while applying manifests: %s", w)
	}
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass", "Deployment", "PodDisruptionBudget", "ServiceAccount", "ClusterRole", "Role"} {
		if !kinds[k] {
			t.Errorf("manifests/webhook/ has no %s", k)
		}
	}
}

func boolPtr(b bool) *bool { return &b }

package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/ledger"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// controllerIdentity is the ServiceAccount the controller runs as (a sidecar of the scheduler).
const controllerIdentity = "system:serviceaccount:" + v1alpha1.DefaultNamespace + ":lifeboat-scheduler"

// shippedRBAC renders manifests/controller as `kubectl apply -k` would and returns its RBAC
// documents (the scheduler's, which the sidecar shares, included).
func shippedRBAC(t *testing.T) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "manifests", "controller"))
	if err != nil {
		t.Fatalf("kustomize build manifests/controller: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	rbacKind := regexp.MustCompile(`(?m)^kind: (ClusterRole|ClusterRoleBinding|Role|RoleBinding|ServiceAccount)$`)
	var docs []string
	for _, d := range strings.Split(string(out), "\n---\n") {
		if rbacKind.MatchString(d) {
			docs = append(docs, d)
		}
	}
	if len(docs) < 4 {
		t.Fatalf("%d RBAC documents in manifests/controller, want the ServiceAccount, roles and bindings", len(docs))
	}
	return strings.Join(docs, "\n---\n")
}

// TestShippedRBAC runs the controller with exactly the permissions manifests/controller grants
// its ServiceAccount (impersonated): a pool converges, an interruption notice resumes its
// lifeboat through the resume ledger, the decision is recorded and the ledger emptied. (A
// cluster-wide ConfigMap informer, for one, would never sync under these permissions.)
func TestShippedRBAC(t *testing.T) {
	e := newEnvWith(t, localcluster.Options{KWOK: true, ControllerManager: true})
	ctx := context.Background()
	e.emu.SetFaults(awsemuNoFaults())
	if err := e.cluster.ApplyYAML(ctx, shippedRBAC(t)); err != nil {
		t.Fatal(err)
	}
	e.impersonate = controllerIdentity
	e.spotWithProtectedPod(ctx, "spot-r1", "i-00000000000000f01", "3")
	if err := e.client.Create(ctx, e.warmPool(1, "1h")); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.waitFor("1 hibernated standby under the shipped RBAC", 120*time.Second, e.standbyConverged(1))
	if _, err := e.emu.SendMessage("lifeboat-interruptions", spotNotice("i-00000000000000f01", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the lifeboat active and Ready for spot-r1", 60*time.Second, e.activeReadyFor("spot-r1", 1))
	e.waitFor("the decision recorded and the ledger emptied", 30*time.Second, func(ctx context.Context) (bool, string) {
		spot, cm := &corev1.Node{}, &corev1.ConfigMap{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: "spot-r1"}, spot); err != nil {
			return false, err.Error()
		}
		if err := e.client.Get(ctx, ledger.Key(v1alpha1.DefaultNamespace), cm); err != nil {
			return false, err.Error()
		}
		d := spot.Annotations[v1alpha1.AnnotationResumeDecision]
		return d != "" && d != "none" && len(cm.Data) == 0, fmt.Sprintf("decision %q, ledger %v", d, cm.Data)
	})
}

// Package chart tests charts/lifeboat with the real tools, helm and promtool built from
// hack/tools/go.mod (make tools): helm lint, helm template of every example values file, the
// alerts' promtool unit tests, that every metric the alerts and the dashboard name exists in the
// binaries' registries, and — on the real local control plane — helm install, upgrade and
// uninstall with Lifeboat's binaries running as the chart's ServiceAccounts (install_test.go).
package chart

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

const (
	releaseName = "lifeboat"
	namespace   = "lifeboat-system"
)

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "lifeboat") }

// tool returns bin/<name> (or $LIFEBOAT_BIN_DIR/<name>), built by make tools.
func tool(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("LIFEBOAT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		// make test builds the tools first; make test-unit (-short) does not build anything.
		if testing.Short() {
			t.Skipf("%s not found in %s (make tools builds it)", name, dir)
		}
		t.Fatalf("%s not found in %s: build it with `make tools` (hack/build-chart-tools.sh)", name, dir)
	}
	return p
}

// run runs a tool and returns its stdout; a failure reports the tool's stderr.
func run(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	out, err := runErr(bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return out
}

func runErr(bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(err.Error() + ": " + stderr.String() + string(out))
	}
	return out, nil
}

// exampleValues lists charts/lifeboat/examples/*.yaml.
func exampleValues(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example values in %s/examples: %v", chartDir(t), err)
	}
	return files
}

// render runs helm template and decodes every object.
func render(t testing.TB, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out := run(t, tool(t, "helm"), append([]string{"template", releaseName, chartDir(t), "--namespace", namespace}, args...)...)
	return decode(t, out)
}

func decode(t testing.TB, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split("\n"+string(b), "\n---\n") {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			t.Fatalf("rendered document without kind/apiVersion:\n%s", doc)
		}
		objs = append(objs, u)
	}
	return objs
}

func TestLint(t *testing.T) {
	helm := tool(t, "helm")
	run(t, helm, "lint", "--strict", chartDir(t))
	for _, f := range exampleValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			run(t, helm, "lint", "--strict", chartDir(t), "--namespace", namespace, "-f", f)
		})
	}
}

// TestTemplateExamples renders every example and checks what the apiserver would otherwise
// only find at install time: every Pod template passes Pod Security "restricted", images are
// pinned by digest when one is given, and values that must agree are refused when they do not.
func TestTemplateExamples(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range exampleValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs := render(t, "-f", f)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
				if o.GetKind() != "Deployment" {
					continue
				}
				var d appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
					t.Fatalf("Deployment %s: %v", o.GetName(), err)
				}
				for _, r := range evaluator.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
					if !r.Allowed {
						t.Errorf("Deployment %s violates Pod Security restricted: %s: %s", d.Name, r.ForbiddenReason, r.ForbiddenDetail)
					}
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					if strings.Contains(c.Image, "@sha256:") && strings.Contains(strings.SplitN(c.Image, "@", 2)[0], ":") {
						t.Errorf("container %s: image %s has both a tag and a digest", c.Name, c.Image)
					}
				}
			}
			for _, k := range []string{"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole", "ServiceAccount", "ConfigMap"} {
				if kinds[k] == 0 {
					t.Errorf("no %s rendered", k)
				}
			}
		})
	}

	t.Run("production pins digests and renders the monitoring objects", func(t *testing.T) {
		objs := render(t, "-f", filepath.Join(chartDir(t), "examples", "production.yaml"))
		seen := map[string]bool{}
		for _, o := range objs {
			seen[o.GetKind()] = true
			if o.GetKind() == "Deployment" {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, c := range cs {
					if img := c.(map[string]any)["image"].(string); !strings.Contains(img, "@sha256:") {
						t.Errorf("%s: image %s not pinned by digest", o.GetName(), img)
					}
				}
			}
		}
		for _, k := range []string{"ServiceMonitor", "PrometheusRule", "WarmPool"} {
			if !seen[k] {
				t.Errorf("no %s rendered", k)
			}
		}
	})

	t.Run("inconsistent values are refused", func(t *testing.T) {
		helm := tool(t, "helm")
		for _, args := range [][]string{
			{"--set", "webhook.tls.mode=vault"},
			{"--set", "webhook.tls.mode=secret"},
			{"--set", "scheduler.name=other"},
		} {
			if _, err := runErr(helm, append([]string{"template", releaseName, chartDir(t)}, args...)...); err == nil {
				t.Errorf("helm template %v succeeded, want an error", args)
			}
		}
	})
}

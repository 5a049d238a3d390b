package reclaimback

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

// TestPolicyValidation: the CRD's schema and CEL rules, on a real apiserver. The example in
// examples/ is accepted as written; each broken spec is refused with a message that says what
// to change; the defaults are filled in.
func TestPolicyValidation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs kube-apiserver")
	}
	c := localclustertest.StartT(t, localcluster.Options{})
	ctx := context.Background()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{filepath.Join(root, "manifests", "crds")}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyYAML(ctx, string(must(os.ReadFile(filepath.Join(root, "examples", "reclaimbackpolicy.yaml"))))); err != nil {
		t.Fatalf("examples/reclaimbackpolicy.yaml refused: %v", err)
	}
	res := dynamic.NewForConfigOrDie(c.RESTConfig()).Resource(policyGVR)
	create := func(name, spec string) error {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte("apiVersion: lifeboat.dev/v1alpha1\nkind: ReclaimBackPolicy\nmetadata: {name: "+name+"}\nspec:\n"+spec), &obj.Object); err != nil {
			t.Fatal(err)
		}
		_, err := res.Create(ctx, obj, createOptions)
		return err
	}

	if err := create("defaults", "  always: true\n"); err != nil {
		t.Fatal(err)
	}
	got := must(res.Get(ctx, "defaults", getOptions))
	for path, want := range map[string]any{"maxInFlight": int64(1), "minSpotStability": "30m", "minPlacementScore": int64(7), "moveTimeout": "15m"} {
		if v, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", path); v != want {
			t.Errorf("default spec.%s = %v, want %v", path, v, want)
		}
	}
	if cd, _, _ := unstructured.NestedStringMap(got.Object, "spec", "coolDown"); cd["initial"] != "10m" || cd["max"] != "4h" {
		t.Errorf("default coolDown = %v", cd)
	}

	for name, tc := range map[string]struct{ spec, want string }{
		"neither-always-nor-windows": {"  maxInFlight: 1\n", "exactly one of always"},
		"both":                       {"  always: true\n  windows: [{days: [Mon], start: \"22:00\", duration: 1h}]\n", "exactly one of always"},
		"bad-start":                  {"  windows: [{days: [Mon], start: \"24:00\", duration: 1h}]\n", "spec.windows[0].start"},
		"bad-day":                    {"  windows: [{days: [Funday], start: \"22:00\", duration: 1h}]\n", "spec.windows[0].days[0]"},
		"long-window":                {"  windows: [{days: [Mon], start: \"22:00\", duration: 25h}]\n", "between 1m and 24h"},
		"zero-in-flight":             {"  always: true\n  maxInFlight: 0\n", "maxInFlight must be"},
		"bad-percent":                {"  always: true\n  maxInFlight: \"150%\"\n", "maxInFlight must be"},
		"score":                      {"  always: true\n  minPlacementScore: 11\n", "minPlacementScore"},
		"cool-down-inverted":         {"  always: true\n  coolDown: {initial: 1h, max: 10m}\n", "coolDown.initial must not exceed"},
	} {
		err := create(name, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	if err := create("percent", "  always: true\n  maxInFlight: \"25%\"\n"); err != nil {
		t.Errorf("maxInFlight 25%%: %v", err)
	}
}

var (
	policyGVR     = schema.GroupVersionResource{Group: "lifeboat.dev", Version: "v1alpha1", Resource: "reclaimbackpolicies"}
	createOptions = metav1.CreateOptions{}
	getOptions    = metav1.GetOptions{}
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

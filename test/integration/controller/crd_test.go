package controller

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

var warmPoolGVR = schema.GroupVersionResource{Group: "lifeboat.dev", Version: "v1alpha1", Resource: "warmpools"}

// TestCRDValidation applies the generated CRD to a real apiserver and checks that invalid
// WarmPools are rejected by CEL/OpenAPI validation with a message that says what to fix, and
// that defaults are applied to a minimal valid one.
func TestCRDValidation(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the local control plane (make tools)")
	}
	c := localclustertest.StartT(t, localcluster.Options{})
	ctx := context.Background()
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{crdDir(t)}); err != nil {
		t.Fatal(err)
	}
	dyn := c.Dynamic().Resource(warmPoolGVR)
	create := func(name, specYAML string) error {
		obj := &unstructured.Unstructured{}
		doc := "apiVersion: lifeboat.dev/v1alpha1\nkind: WarmPool\nmetadata:\n  name: " + name + "\nspec:\n" + specYAML
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatalf("%s: bad test YAML: %v", name, err)
		}
		_, err := dyn.Create(ctx, obj, metav1CreateOptions)
		return err
	}
	const valid = "  instanceTypes: [m5.large]\n  imageID: ami-0abc\n  rootVolumeGiB: 30\n"
	tests := []struct {
		name, spec, wantMsg string
	}{
		{"negative-size", valid + "  size: -1\n", `size must be an integer from 0 to 500, or "auto"`},
		{"bad-size-string", valid + "  size: lots\n", `size must be an integer from 0 to 500, or "auto"`},
		{"no-instance-types", "  instanceTypes: []\n  imageID: ami-0abc\n  rootVolumeGiB: 30\n", "spec.instanceTypes: Invalid value"},
		{"nothing-to-launch", "  instanceTypes: [m5.large]\n", "set launchTemplateID, or imageID"},
		{"no-root-volume", "  instanceTypes: [m5.large]\n  imageID: ami-0abc\n", "rootVolumeGiB is required without a launch template"},
		{"short-active", valid + "  activeDuration: 5s\n", "activeDuration must be between 30s and 24h"},
		{"not-a-duration", valid + "  activeDuration: five minutes\n", "spec.activeDuration"},
		{"too-old", valid + "  maxStandbyAge: 2000h\n", "maxStandbyAge must be between 1h and 1440h"},
		{"bad-handoff", valid + "  handoff: Never\n", `Unsupported value: "Never"`},
		{"bad-after-use", valid + "  afterUse: Keep\n", `Unsupported value: "Keep"`},
		{"list-without-images", valid + "  prePull: {policy: List}\n", "prePull.images must list at least one image"},
		{"images-without-list", valid + "  prePull: {policy: Auto, images: [nginx]}\n", "prePull.images is only used with prePull.policy List"},
		{"karpenter-tag", valid + "  tags: {karpenter.sh/nodepool: x}\n", "tags must not use the karpenter.sh/"},
		{"reserved-label", valid + "  nodeLabels: {lifeboat.dev/state: active}\n", "nodeLabels must not use the lifeboat.dev/"},
		{"short-deadline", valid + "  handoffDeadline: 10s\n", "handoffDeadline must be at least 1m"},
		{"price-not-a-number", valid + "  pricing: {onDemandHourly: \"$0.19\"}\n", "spec.pricing.onDemandHourly"},
		{"spot-fraction-above-one", valid + "  pricing: {spotFraction: \"1.5\"}\n", "spec.pricing.spotFraction"},
		{"negative-ebs-price", valid + "  pricing: {ebsGiBMonth: \"-0.08\"}\n", "spec.pricing.ebsGiBMonth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := create(tt.name, tt.spec)
			if err == nil {
				t.Fatalf("accepted an invalid WarmPool")
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}

	if err := create("minimal", valid+"  size: auto\n"); err != nil {
		t.Fatalf("valid WarmPool rejected: %v", err)
	}
	if err := create("priced", valid+"  pricing: {onDemandHourly: \"0.192\", spotFraction: \"0.35\", ebsGiBMonth: \"0.08\"}\n"); err != nil {
		t.Fatalf("WarmPool with valid prices rejected: %v", err)
	}
	got, err := dyn.Get(ctx, "minimal", metav1GetOptions)
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Object["spec"].(map[string]any)
	for k, want := range map[string]any{"activeDuration": "5m", "handoff": "AfterActiveDuration", "afterUse": "Terminate", "maxStandbyAge": "720h", "rebalanceRecommendation": "Ignore", "handoffDeadline": "15m"} {
		if spec[k] != want {
			t.Errorf("default %s = %v, want %v", k, spec[k], want)
		}
	}
	if pp := spec["prePull"].(map[string]any); pp["policy"] != "Auto" {
		t.Errorf("default prePull = %v", pp)
	}
}

package localcluster

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestNodePoolYAML(t *testing.T) {
	for _, tc := range []struct {
		name             string
		pool             NodePool
		weight           int64
		labels           map[string]any
		reqs             map[string][]any
		consolidateAfter string
	}{
		{name: "default", pool: NodePool{Name: "default"},
			reqs:             map[string][]any{"karpenter.sh/capacity-type": {"spot", "on-demand"}, "kubernetes.io/os": {"linux"}},
			consolidateAfter: "30s"},
		{name: "weighted with labels", pool: NodePool{Name: "slow", Weight: 1, Labels: map[string]string{"boot": "slow"}, CapacityTypes: []string{"spot"}},
			weight: 1, labels: map[string]any{"boot": "slow"},
			reqs:             map[string][]any{"karpenter.sh/capacity-type": {"spot"}, "kubernetes.io/os": {"linux"}},
			consolidateAfter: "30s"},
		{name: "narrowed catalog", pool: NodePool{Name: "n", InstanceTypes: []string{"c5.large"}, Zones: []string{"us-east-1a"}, ConsolidateAfter: 90e9, DisruptionBudget: "0"},
			reqs: map[string][]any{"karpenter.sh/capacity-type": {"spot", "on-demand"}, "kubernetes.io/os": {"linux"},
				"node.kubernetes.io/instance-type": {"c5.large"}, "topology.kubernetes.io/zone": {"us-east-1a"}},
			consolidateAfter: "1m30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := tc.pool.YAML()
			obj := map[string]any{}
			if err := json.Unmarshal([]byte(y), &obj); err != nil {
				t.Fatalf("not JSON/YAML: %v\n%s", err, y)
			}
			u := unstructured.Unstructured{Object: obj}
			if u.GetKind() != "NodePool" || u.GetAPIVersion() != "karpenter.sh/v1" || u.GetName() != tc.pool.Name {
				t.Errorf("kind %s %s name %s", u.GetAPIVersion(), u.GetKind(), u.GetName())
			}
			w, _, _ := unstructured.NestedFieldNoCopy(obj, "spec", "weight")
			if f, _ := w.(float64); int64(f) != tc.weight { // JSON numbers decode as float64
				t.Errorf("weight %d, want %d", w, tc.weight)
			}
			labels, _, _ := unstructured.NestedMap(obj, "spec", "template", "metadata", "labels")
			if len(labels) != len(tc.labels) || (len(labels) > 0 && !reflect.DeepEqual(labels, tc.labels)) {
				t.Errorf("labels %v, want %v", labels, tc.labels)
			}
			reqs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "requirements")
			got := map[string][]any{}
			for _, r := range reqs {
				m := r.(map[string]any)
				got[m["key"].(string)] = m["values"].([]any)
			}
			want := map[string][]any{}
			for k, v := range tc.reqs {
				want[k] = v
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("requirements %v, want %v", got, want)
			}
			budgets, _, _ := unstructured.NestedSlice(obj, "spec", "disruption", "budgets")
			if want := tc.pool.DisruptionBudget; (want == "") != (len(budgets) == 0) || (want != "" && budgets[0].(map[string]any)["nodes"] != want) {
				t.Errorf("budgets %v, want nodes %q", budgets, want)
			}
			if after, _, _ := unstructured.NestedString(obj, "spec", "disruption", "consolidateAfter"); after != tc.consolidateAfter {
				t.Errorf("consolidateAfter %q, want %q", after, tc.consolidateAfter)
			}
			// The startup taint is there already: the harness leaves the YAML as it is.
			if same, err := WithNotReadyStartupTaint(y); err != nil || same != y {
				t.Errorf("WithNotReadyStartupTaint changed the rendered NodePool (err %v)", err)
			}
		})
	}
}

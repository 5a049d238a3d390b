package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// KarpenterModule is the Go module whose CRDs the harness applies.
const KarpenterModule = "sigs.k8s.io/karpenter"

var (
	NodePoolGVR      = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	NodeClaimGVR     = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	KWOKNodeClassGVR = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

// InstanceType is one instance type offered by Karpenter's KWOK provider.
type InstanceType struct {
	Name      string
	CPU       string // e.g. "2"
	Memory    string // e.g. "8Gi"
	Pods      string // max Pods, e.g. "29"
	Offerings []Offering
}

// Offering is an instance type in one zone and capacity type, with its hourly price.
type Offering struct {
	Zone         string
	CapacityType string // "spot" or "on-demand"
	Price        float64
	Available    bool
}

// DefaultZones are the zones of the default catalog.
var DefaultZones = []string{"us-east-1a", "us-east-1b", "us-east-1c"}

// DefaultInstanceTypes is a small AWS-like catalog: general purpose, compute and memory
// families in three zones, each with Spot (~35% of On-Demand) and On-Demand offerings.
func DefaultInstanceTypes() []InstanceType {
	type spec struct {
		name, cpu, mem, pods string
		od                   float64
	}
	specs := []spec{
		{"m5.large", "2", "8Gi", "29", 0.096}, {"m5.xlarge", "4", "16Gi", "58", 0.192},
		{"m6i.large", "2", "8Gi", "29", 0.096}, {"m6i.xlarge", "4", "16Gi", "58", 0.192},
		{"c5.large", "2", "4Gi", "29", 0.085}, {"c5.xlarge", "4", "8Gi", "58", 0.17},
		{"c6i.large", "2", "4Gi", "29", 0.085}, {"r5.large", "2", "16Gi", "29", 0.126},
	}
	var out []InstanceType
	for _, s := range specs {
		it := InstanceType{Name: s.name, CPU: s.cpu, Memory: s.mem, Pods: s.pods}
		for _, z := range DefaultZones {
			it.Offerings = append(it.Offerings,
				Offering{Zone: z, CapacityType: "spot", Price: s.od * 0.35, Available: true},
				Offering{Zone: z, CapacityType: "on-demand", Price: s.od, Available: true})
		}
		out = append(out, it)
	}
	return out
}

// InstanceTypesJSON renders instance types in the KWOK provider's file format.
func InstanceTypesJSON(types []InstanceType) ([]byte, error) {
	type req struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	}
	type offering struct {
		Price        float64 `json:"Price"`
		Available    bool    `json:"Available"`
		Requirements []req   `json:"Requirements"`
	}
	type itype struct {
		Name             string            `json:"name"`
		Offerings        []offering        `json:"offerings"`
		Architecture     string            `json:"architecture"`
		OperatingSystems []string          `json:"operatingSystems"`
		Resources        map[string]string `json:"resources"`
	}
	var out []itype
	for _, t := range types {
		it := itype{Name: t.Name, Architecture: "amd64", OperatingSystems: []string{"linux"},
			Resources: map[string]string{"cpu": t.CPU, "memory": t.Memory, "pods": t.Pods, "ephemeral-storage": "20Gi"}}
		for _, o := range t.Offerings {
			it.Offerings = append(it.Offerings, offering{Price: o.Price, Available: o.Available, Requirements: []req{
				{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{o.CapacityType}},
				{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{o.Zone}},
			}})
		}
		out = append(out, it)
	}
	return json.MarshalIndent(out, "", "  ")
}

// DefaultNodeClass is the KWOKNodeClass every default NodePool refers to.
func DefaultNodeClass(registrationDelay time.Duration) string {
	d := ""
	if registrationDelay > 0 {
		d = fmt.Sprintf("\n  nodeRegistrationDelay: %ds", int(registrationDelay.Round(time.Second).Seconds()))
	}
	return `apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: default
spec:` + func() string {
		if d == "" {
			return " {}"
		}
		return d
	}() + "\n"
}

// DefaultNodePool allows Spot and On-Demand across the default catalog. Consolidation is
// limited to empty nodes after 30 s so tests see stable placements.
//
// Every NodePool the harness applies carries the startup taint node.kubernetes.io/not-ready
// (added by WithNotReadyStartupTaint when missing): a real kubelet registers its Node with
// that taint and kube-controller-manager removes it once the Node is Ready. KWOK has no
// kubelet, so without it the scheduler would bind Pods to a Node that is still booting.
var DefaultNodePool = NodePool{Name: "default"}.YAML()

// KarpenterCRDDirs finds Karpenter's CRD files: bin/crds/karpenter (copied by `make tools`)
// when present, else the module source found with `go list -m`.
func KarpenterCRDDirs(binDir string) ([]string, error) {
	if d := filepath.Join(binDir, "crds", "karpenter"); dirHasYAML(d) {
		return []string{d}, nil
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", KarpenterModule)
	if root, err := RepoRoot(); err == nil {
		cmd.Dir = root
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("find %s CRDs: `go list -m %s` failed (%v); run `make tools`, which copies them to %s/crds/karpenter",
			KarpenterModule, KarpenterModule, err, binDir)
	}
	dir := strings.TrimSpace(string(out))
	return []string{filepath.Join(dir, "pkg", "apis", "crds"), filepath.Join(dir, "kwok", "apis", "crds")}, nil
}

func dirHasYAML(d string) bool {
	m, _ := filepath.Glob(filepath.Join(d, "*.yaml"))
	return len(m) > 0
}

// ApplyCRDDirs creates (or updates) every CRD in the directories' YAML files and waits until
// each is Established.
func ApplyCRDDirs(ctx context.Context, c *Cluster, dirs []string) error {
	client, err := apiextensionsclient.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	var names []string
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.yaml"))
		for _, f := range files {
			docs, err := readYAMLDocs(f)
			if err != nil {
				return err
			}
			for _, doc := range docs {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := json.Unmarshal(doc, crd); err != nil {
					return fmt.Errorf("decode CRD %s: %w", f, err)
				}
				if crd.Kind != "CustomResourceDefinition" {
					continue
				}
				_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					old, gerr := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
					if gerr != nil {
						return gerr
					}
					crd.ResourceVersion = old.ResourceVersion
					_, err = client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
				}
				if err != nil {
					return fmt.Errorf("apply CRD %s from %s: %w", crd.Name, f, err)
				}
				names = append(names, crd.Name)
			}
		}
	}
	for _, n := range names {
		if err := waitFor(ctx, nil, "CRD "+n+" established", func(ctx context.Context) bool {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true
				}
			}
			return false
		}); err != nil {
			return err
		}
	}
	return nil
}

func readYAMLDocs(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return splitYAML(f)
}

// ApplyYAML creates or updates every object in the YAML documents with the dynamic client.
// Cluster-scoped and namespaced kinds are resolved through discovery.
func (c *Cluster) ApplyYAML(ctx context.Context, docs ...string) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	for _, d := range docs {
		parts, err := splitYAML(strings.NewReader(d))
		if err != nil {
			return err
		}
		for _, p := range parts {
			obj := &unstructured.Unstructured{}
			if err := json.Unmarshal(p, &obj.Object); err != nil {
				return fmt.Errorf("decode object: %w", err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if err := c.applyObject(ctx, dyn, obj); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) applyObject(ctx context.Context, dyn dynamic.Interface, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	res, err := c.client.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return fmt.Errorf("discover %s: %w", gvk.GroupVersion(), err)
	}
	for _, r := range res.APIResources {
		if r.Kind != gvk.Kind || strings.Contains(r.Name, "/") {
			continue
		}
		gvr := gvk.GroupVersion().WithResource(r.Name)
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if r.Namespaced {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		_, err := ri.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			old, gerr := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj.SetResourceVersion(old.GetResourceVersion())
			_, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		return nil
	}
	return fmt.Errorf("apply %s %s: the server has no such kind", gvk.Kind, obj.GetName())
}

func (c *Cluster) startKarpenter(ctx context.Context) error {
	began := time.Now()
	dirs, err := KarpenterCRDDirs(c.opts.BinDir)
	if err != nil {
		return err
	}
	if err := ApplyCRDDirs(ctx, c, dirs); err != nil {
		return err
	}
	types := c.opts.InstanceTypes
	if len(types) == 0 {
		types = DefaultInstanceTypes()
	}
	itJSON, err := InstanceTypesJSON(types)
	if err != nil {
		return err
	}
	itPath := filepath.Join(c.runDir, "instance-types.json")
	if err := os.WriteFile(itPath, itJSON, 0o644); err != nil {
		return err
	}
	pools := c.opts.NodePools
	if len(pools) == 0 {
		pools = []string{DefaultNodePool}
	}
	for i, p := range pools {
		if pools[i], err = WithNotReadyStartupTaint(p); err != nil {
			return err
		}
	}
	if err := c.ApplyYAML(ctx, append([]string{DefaultNodeClass(c.opts.KarpenterRegistrationDelay)}, pools...)...); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	env := []string{
		"KUBECONFIG=" + c.kubeconfig,
		"DISABLE_LEADER_ELECTION=true",
		fmt.Sprintf("METRICS_PORT=%d", ports[0]),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", ports[1]),
		"INSTANCE_TYPES_FILE_PATH=" + itPath,
		"SYSTEM_NAMESPACE=kube-system",
		"LOG_LEVEL=debug",
		// Shorter provisioning batches than production (10 s / 1 s): tests react faster and
		// the timing model, not batching, dominates node arrival.
		"BATCH_MAX_DURATION=2s",
		"BATCH_IDLE_DURATION=500ms",
	}
	env = append(env, c.opts.KarpenterEnv...)
	k, err := c.start("karpenter", BinKarpenter, nil, env)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, k, "karpenter /readyz", func(ctx context.Context) bool {
		return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
	}); err != nil {
		return err
	}
	c.opts.Logf("karpenter ready in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// splitYAML splits a multi-document YAML stream into JSON documents.
func splitYAML(r interface{ Read([]byte) (int, error) }) ([][]byte, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var out [][]byte
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		out = append(out, raw)
	}
}

// NotReadyTaint is the taint a kubelet registers its Node with until the Node is Ready.
var NotReadyTaint = map[string]any{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}

// WithNotReadyStartupTaint returns the NodePool YAML with the not-ready startup taint added
// to spec.template.spec.startupTaints unless it is there already.
func WithNotReadyStartupTaint(nodePoolYAML string) (string, error) {
	docs, err := splitYAML(strings.NewReader(nodePoolYAML))
	if err != nil || len(docs) != 1 {
		return "", fmt.Errorf("NodePool YAML must hold exactly one document (err: %v)", err)
	}
	obj := map[string]any{}
	if err := json.Unmarshal(docs[0], &obj); err != nil {
		return "", err
	}
	taints, _, err := unstructured.NestedSlice(obj, "spec", "template", "spec", "startupTaints")
	if err != nil {
		return "", fmt.Errorf("NodePool startupTaints: %w", err)
	}
	for _, t := range taints {
		if m, ok := t.(map[string]any); ok && m["key"] == NotReadyTaint["key"] {
			return nodePoolYAML, nil
		}
	}
	taints = append(taints, map[string]any{"key": NotReadyTaint["key"], "effect": NotReadyTaint["effect"]})
	if err := unstructured.SetNestedSlice(obj, taints, "spec", "template", "spec", "startupTaints"); err != nil {
		return "", err
	}
	b, err := json.Marshal(obj)
	return string(b), err
}

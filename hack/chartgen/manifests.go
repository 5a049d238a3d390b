package main

import (
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

const generatedHeader = "# Generated from charts/lifeboat by `make chart` (hack/chartgen); edit the chart, not this file.\n"

// manifestFiles maps each chart template to its file under manifests/. The scheduler's
// Deployment and ConfigMap are special: the ConfigMap's config.yaml becomes
// scheduler/config.yaml (kustomize's configMapGenerator turns it back into the ConfigMap), and
// the controller sidecar is split off into controller/sidecar.yaml, so that
// manifests/scheduler deploys the scheduler alone and manifests/controller adds the controller.
var manifestFiles = map[string]string{
	"namespace.yaml":               "namespace.yaml",
	"webhook/deployment.yaml":      "webhook/deployment.yaml",
	"webhook/rbac.yaml":            "webhook/rbac.yaml",
	"webhook/webhooks.yaml":        "webhook/webhooks.yaml",
	"webhook/priorityclasses.yaml": "webhook/priorityclasses.yaml",
	"scheduler/rbac.yaml":          "scheduler/rbac.yaml",
	"scheduler/pdb.yaml":           "scheduler/pdb.yaml",
	"controller/rbac.yaml":         "controller/rbac.yaml",
	"controller/configmap.yaml":    "controller/configmap.yaml",
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: lifeboat/templates/(\S+)\n`)

// Labels that describe a Helm release; a kubectl-applied manifest is not one.
var helmOnlyLabel = regexp.MustCompile(`(?m)^\s+(helm\.sh/chart: .*|app\.kubernetes\.io/managed-by: Helm|app\.kubernetes\.io/instance: lifeboat)\n`)

func renderManifests(rendered []byte) (map[string][]byte, error) {
	bySource := map[string][]string{}
	var order []string
	for _, doc := range strings.Split("\n"+string(rendered), "\n---\n") {
		m := sourceLine.FindStringSubmatch(doc)
		if m == nil {
			if strings.TrimSpace(doc) != "" {
				return nil, fmt.Errorf("a rendered document has no # Source line: %.80q", doc)
			}
			continue
		}
		body := helmOnlyLabel.ReplaceAllString(sourceLine.ReplaceAllString(doc, ""), "")
		body = strings.TrimLeft(body, "\n")
		if _, seen := bySource[m[1]]; !seen {
			order = append(order, m[1])
		}
		body = strings.TrimRight(body, "\n") + "\n"
		// helm template orders documents by kind; a template's comment-only document (its
		// preamble) goes first in its file.
		if commentOnly(body) {
			bySource[m[1]] = append([]string{body}, bySource[m[1]]...)
		} else {
			bySource[m[1]] = append(bySource[m[1]], body)
		}
	}

	out := map[string][]byte{}
	for _, src := range order {
		docs := bySource[src]
		switch src {
		case "scheduler/configmap.yaml":
			cfg, err := schedulerConfig(docs)
			if err != nil {
				return nil, err
			}
			out["scheduler/config.yaml"] = []byte(generatedHeader + cfg)
		case "scheduler/deployment.yaml":
			dep, sidecar, err := splitSidecar(docs)
			if err != nil {
				return nil, err
			}
			out["scheduler/deployment.yaml"] = dep
			out["controller/sidecar.yaml"] = sidecar
		default:
			dst, ok := manifestFiles[src]
			if !ok {
				return nil, fmt.Errorf("template %s renders objects but has no place in manifests/: add it to manifestFiles", src)
			}
			out[dst] = []byte(generatedHeader + strings.Join(docs, "---\n"))
		}
	}
	ns, ok := out["namespace.yaml"]
	if !ok {
		return nil, fmt.Errorf("the chart rendered no Namespace")
	}
	// manifests/scheduler is a complete kustomization of its own, namespace included.
	out["scheduler/namespace.yaml"] = ns
	out["scheduler/kustomization.yaml"] = []byte(schedulerKustomization)
	out["controller/kustomization.yaml"] = []byte(controllerKustomization)
	for _, want := range []string{"scheduler/config.yaml", "scheduler/deployment.yaml", "webhook/webhooks.yaml", "webhook/priorityclasses.yaml"} {
		if _, ok := out[want]; !ok {
			return nil, fmt.Errorf("the chart rendered nothing for manifests/%s", want)
		}
	}
	return out, nil
}

// schedulerConfig returns config.yaml of the lifeboat-scheduler-config ConfigMap, verbatim.
func schedulerConfig(docs []string) (string, error) {
	for _, d := range docs {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(d), &cm); err != nil {
			return "", fmt.Errorf("scheduler ConfigMap: %w", err)
		}
		if cm.Kind == "ConfigMap" && cm.Data["config.yaml"] != "" {
			return cm.Data["config.yaml"], nil
		}
	}
	return "", fmt.Errorf("no ConfigMap with config.yaml in templates/scheduler/configmap.yaml")
}

// splitSidecar splits the scheduler Deployment into the Deployment without the controller
// container and a strategic-merge patch that adds it (manifests/controller/sidecar.yaml).
func splitSidecar(docs []string) (deployment, sidecar []byte, err error) {
	if len(docs) != 1 {
		return nil, nil, fmt.Errorf("templates/scheduler/deployment.yaml: want one document, got %d", len(docs))
	}
	comments := leadingComments(docs[0])
	var dep map[string]any
	if err := yaml.Unmarshal([]byte(docs[0]), &dep); err != nil {
		return nil, nil, err
	}
	podSpec, ok := nested(dep, "spec", "template", "spec")
	if !ok {
		return nil, nil, fmt.Errorf("scheduler Deployment has no pod spec")
	}
	containers, _ := podSpec["containers"].([]any)
	var kept []any
	var controller any
	for _, c := range containers {
		if m, _ := c.(map[string]any); m["name"] == "controller" {
			controller = c
			continue
		}
		kept = append(kept, c)
	}
	if controller == nil {
		return nil, nil, fmt.Errorf("scheduler Deployment has no controller container")
	}
	podSpec["containers"] = kept
	// The checksum covers the controller's settings too; in kustomize the configMapGenerator's
	// name hash rolls the Pods instead.
	if meta, ok := nested(dep, "spec", "template", "metadata"); ok {
		if ann, _ := meta["annotations"].(map[string]any); ann != nil {
			delete(ann, "lifeboat.dev/config-checksum")
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	depYAML, err := yaml.Marshal(dep)
	if err != nil {
		return nil, nil, err
	}
	meta, _ := dep["metadata"].(map[string]any)
	patch := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": meta["name"], "namespace": meta["namespace"]},
		"spec":       map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{controller}}}},
	}
	patchYAML, err := yaml.Marshal(patch)
	if err != nil {
		return nil, nil, err
	}
	sidecarHeader := "# Strategic-merge patch that adds lifeboat-controller as a sidecar container to the\n" +
		"# lifeboat-scheduler Deployment (manifests/scheduler). Both replicas run it; the controllers\n" +
		"# run only on the leader of the lease lifeboat-system/lifeboat-controller.\n"
	return []byte(generatedHeader + comments + string(depYAML)), []byte(generatedHeader + sidecarHeader + string(patchYAML)), nil
}

func commentOnly(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func nested(m map[string]any, path ...string) (map[string]any, bool) {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

func leadingComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(doc, "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		b.WriteString(l)
	}
	return b.String()
}

var schedulerKustomization = generatedHeader + `# kubectl apply -k manifests/scheduler
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: lifeboat-system
resources:
- namespace.yaml
- rbac.yaml
- deployment.yaml
- pdb.yaml
configMapGenerator:
- name: lifeboat-scheduler-config
  files:
  - config.yaml
labels:
- pairs:
    app.kubernetes.io/part-of: lifeboat
  includeSelectors: false
`

var controllerKustomization = generatedHeader + `# kubectl apply -k manifests/controller
# The scheduler Deployment (manifests/scheduler, its own kustomization) plus the controller
# sidecar, its RBAC, its settings and the WarmPool CRD. IAM (EC2 Run/Start/Stop/Terminate/
# Describe/CreateTags on pool-tagged instances, SQS Receive/Delete on Lifeboat's queue) comes
# from the scheduler ServiceAccount's IRSA / Pod Identity: docs/INSTALL.md.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: lifeboat-system
resources:
- ../scheduler
- ../crds
- rbac.yaml
- configmap.yaml
patches:
- path: sidecar.yaml
`

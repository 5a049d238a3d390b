// Command chartgen keeps what is derived from charts/lifeboat in step with it:
//
//   - charts/lifeboat/README.md, whose values table comes from the comments of values.yaml;
//   - charts/lifeboat/crds/, a copy of the CRDs controller-gen writes into manifests/crds;
//   - manifests/ (namespace, webhook, scheduler, controller), rendered with `helm template` so
//     that kubectl/kustomize users, `lifeboat sim` and the tests that read manifests/ deploy
//     exactly what the chart deploys.
//
// With -verify it writes nothing and fails when a file differs from what it would write
// (make verify). Usage: go run ./hack/chartgen [-verify] -helm bin/helm
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	helm := flag.String("helm", "bin/helm", "helm binary (make tools builds it from hack/tools/go.mod)")
	verify := flag.Bool("verify", false, "write nothing; fail when a generated file is stale")
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := run(*root, *helm, *verify); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run(root, helm string, verify bool) error {
	chart := filepath.Join(root, "charts", "lifeboat")
	files := map[string][]byte{}

	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	chartYAML, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return err
	}
	readme, err := renderReadme(chartYAML, values)
	if err != nil {
		return fmt.Errorf("README from values.yaml: %w", err)
	}
	files[filepath.Join(chart, "README.md")] = readme

	crds, err := filepath.Glob(filepath.Join(root, "manifests", "crds", "*.yaml"))
	if err != nil {
		return err
	}
	for _, src := range crds {
		if filepath.Base(src) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		files[filepath.Join(chart, "crds", filepath.Base(src))] = b
	}

	rendered, err := helmTemplate(helm, chart)
	if err != nil {
		return err
	}
	manifests, err := renderManifests(rendered)
	if err != nil {
		return fmt.Errorf("manifests from the chart: %w", err)
	}
	for rel, b := range manifests {
		files[filepath.Join(root, "manifests", rel)] = b
	}
	return writeOrVerify(files, verify)
}

// helmTemplate renders the chart as the manifests ship it: default values, the Namespace
// included, release lifeboat in lifeboat-system.
func helmTemplate(helm, chart string) ([]byte, error) {
	cmd := exec.Command(helm, "template", "lifeboat", chart, "--namespace", "lifeboat-system", "--set", "namespace.create=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s template: %w: %s (build helm with `make tools`)", helm, err, stderr.String())
	}
	return out, nil
}

func writeOrVerify(files map[string][]byte, verify bool) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var stale []string
	for _, n := range names {
		old, err := os.ReadFile(n)
		if err == nil && bytes.Equal(old, files[n]) {
			continue
		}
		if verify {
			stale = append(stale, n)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(n), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(n, files[n], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", n)
	}
	if len(stale) > 0 {
		return fmt.Errorf("stale (run `make chart` and commit): %s", strings.Join(stale, ", "))
	}
	return nil
}

#!/usr/bin/env bash
# Builds helm and promtool from hack/tools/go.mod (their own module: they need k8s.io/* v0.37,
# go.mod pins v0.36.3) into the directory given as $1 (an absolute path or one relative to the
# repository root).
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-bin}" && cd "${1:-bin}" && pwd)"
cd hack/tools
# The version stamps helm's own Makefile sets: without the Kubernetes version, `helm template`
# assumes a v1.20 cluster and refuses the chart's kubeVersion.
helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
IFS=. read -r k8s_major k8s_minor _ <<<"$(go list -m -f '{{.Version}}' k8s.io/client-go | sed 's/^v//')"
k8s_major=$((k8s_major + 1))
go build -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$k8s_major -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$k8s_major -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor" \
  -o "$out/helm" helm.sh/helm/v3/cmd/helm
prom_version=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
go build -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prom_version" \
  -o "$out/promtool" github.com/prometheus/prometheus/cmd/promtool

#!/usr/bin/env bash
# Builds the real components of the local control plane from the module graph (no downloads
# beyond the Go module proxy) into the directory given as $1, and copies Karpenter's CRDs from
# its module source to $1/crds/karpenter so the harness needs no Go toolchain at run time.
# helm and promtool (chart and alert tests, make chart) come from their own module,
# hack/tools/go.mod: they need newer Kubernetes libraries than go.mod pins.
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
out="${1:-bin}"
cd "$(dirname "$0")/.."
mkdir -p "$out"
start=$(date +%s)
flags=(-ldflags "-s -w")
# Each binary separately: two of the packages are named kwok.
go build "${flags[@]}" -o "$out/etcd" ./hack/etcd
go build "${flags[@]}" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build "${flags[@]}" -o "$out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
go build "${flags[@]}" -o "$out/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
go build "${flags[@]}" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
go build "${flags[@]}" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl
go build "${flags[@]}" -o "$out/karpenter-kwok" sigs.k8s.io/karpenter/kwok
bash hack/build-chart-tools.sh "$out"
karpenter=$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
rm -rf "$out/crds/karpenter" && mkdir -p "$out/crds/karpenter"
cp "$karpenter"/pkg/apis/crds/*.yaml "$karpenter"/kwok/apis/crds/*.yaml "$out/crds/karpenter/"
chmod u+w "$out"/crds/karpenter/*.yaml
echo "tools built into $out in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# Regenerates the k8s.io staging `replace` block in go.mod for a Kubernetes version.
# k8s.io/kubernetes replaces its staging modules with local paths, which a consumer cannot
# resolve; every one must be pinned to the matching v0.x.y tag instead.
#
#   hack/update-staging-replaces.sh v1.36.3
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
version="${1:?usage: $0 <kubernetes version, e.g. v1.36.3>}"
staging="v0.${version#v1.}"
cd "$(dirname "$0")/.."

modfile=$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$modfile" ] || { echo "cannot download k8s.io/kubernetes@${version}" >&2; exit 1; }
mods=$(awk '/^replace \(/{inblk=1;next} inblk&&/^\)/{inblk=0} inblk&&/=> \.\/staging/{print $1}' "$modfile")

args=(-require="k8s.io/kubernetes@${version}")
for m in $mods; do
  args+=(-replace="${m}=${m}@${staging}")
done
go mod edit "${args[@]}"
echo "go.mod: k8s.io/kubernetes ${version}, $(echo "$mods" | wc -l) staging modules replaced at ${staging}"

#!/usr/bin/env bash
# Generates with controller-gen the WarmPool deepcopy functions
# (pkg/apis/v1alpha1/zz_generated.deepcopy.go) and CRD (manifests/crds/), and the deepcopy
# functions of the scheduler plugin args (plugins/apis/config/zz_generated.deepcopy.go and
# plugins/apis/config/v1/zz_generated.deepcopy.go; these join kube-scheduler's config group, so
# they get no CRD). controller-gen is a go.mod tool, so go.mod pins its version:
# sigs.k8s.io/controller-tools v0.20.1, the newest that does not raise k8s.io modules above the
# project's v0.36 set (v0.21 raises k8s.io/kube-openapi).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
go tool controller-gen \
  object:headerFile=hack/boilerplate.go.txt \
  crd \
  paths=./pkg/apis/... \
  output:crd:artifacts:config=manifests/crds
go tool controller-gen \
  object:headerFile=hack/boilerplate.go.txt \
  paths=./plugins/apis/...

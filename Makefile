# Lifeboat — run `make help` for the targets.
# The dependency set (Karpenter v1.15) needs Go >= 1.26.9; the go command fetches this
# toolchain from the module proxy once per machine.
export GOTOOLCHAIN := go1.27.3
export GOFLAGS := -buildvcs=false

SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --match "v[0-9]*" 2>/dev/null || echo "v0.0.0-dev+$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")
LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(VERSION) -X k8s.io/component-base/version.gitMajor=0 -X k8s.io/component-base/version.gitMinor=1
TEST_TIMEOUT ?= 25m

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_.-]+:.*## /{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# ---- components of the local control plane, built from the module graph ----

TOOLS_STAMP := $(BIN)/.tools-stamp
$(TOOLS_STAMP): go.mod go.sum hack/etcd/main.go hack/build-tools.sh hack/tools/go.mod hack/tools/go.sum hack/build-chart-tools.sh
	bash hack/build-tools.sh $(BIN)
	@touch $@

.PHONY: tools
tools: $(TOOLS_STAMP) ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, karpenter-kwok, helm, promtool into bin/ (only when a go.mod changes)

# helm and promtool alone (make chart, make verify): their own module, hack/tools/go.mod.
HELM := $(BIN)/helm
CHART_TOOLS_STAMP := $(BIN)/.chart-tools-stamp
$(CHART_TOOLS_STAMP): hack/tools/go.mod hack/tools/go.sum hack/build-chart-tools.sh
	bash hack/build-chart-tools.sh $(BIN)
	@touch $@

.PHONY: chart
chart: $(CHART_TOOLS_STAMP) ## Regenerate what derives from charts/lifeboat: its README (from values.yaml), its crds/, and manifests/ (helm template)
	go run ./hack/chartgen -helm $(HELM)

.PHONY: build
build: ## Build Lifeboat's binaries (cmd/...) into bin/
	@mkdir -p $(BIN)
	@pkgs=$$(go list ./cmd/... 2>/dev/null); if [ -n "$$pkgs" ]; then go build -ldflags "$(LDFLAGS)" -o $(BIN)/ $$pkgs; fi

# ---- run ----

.PHONY: up
up: tools ## Start the full local control plane (etcd, apiserver, KCM, KWOK, Karpenter) in the foreground
	go run ./hack/up --bin-dir $(BIN) --kubeconfig $(CURDIR)/.lifeboat/kubeconfig --run-dir $(CURDIR)/.lifeboat/cluster

.PHONY: demo
demo: tools build ## The main job: a Spot reclaim (monday-reclaim) with Karpenter alone and with Lifeboat, side by side
	$(BIN)/lifeboat sim run --scenario monday-reclaim --parallel --bin-dir $(BIN) --out $(CURDIR)/.lifeboat/demo

REPORT ?= $(CURDIR)/.lifeboat/demo/report.html

.PHONY: report-check
report-check: ## Open a simulation report in headless Chromium (apt-get install chromium): the outcome first, then the table, then the charts, no sideways scrolling; writes a screenshot beside it (REPORT=path)
	cd hack/reportshot && go run . --report $(abspath $(REPORT))

# ---- test ----

.PHONY: test
test: tools build ## Run every test: unit, integration and end-to-end on the real local control plane
	LIFEBOAT_BIN_DIR=$(BIN) go test -timeout $(TEST_TIMEOUT) -p 2 ./...

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (-short)
	go test -short ./...

.PHONY: generate
generate: ## Regenerate the WarmPool deepcopy code and CRD (controller-gen)
	bash hack/generate.sh

.PHONY: verify
verify: $(CHART_TOOLS_STAMP) ## gofmt, go vet, go mod tidy and generated code leave no diff; the binaries link no test code; chart README and manifests/ match the chart
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@bad=$$(go list -deps ./cmd/... | grep -E '^testing$$|^github.com/lifeboat-k8s/lifeboat/(test/|.*test$$)' || true); \
	  if [ -n "$$bad" ]; then echo "the shipped binaries link test code (keep test helpers in *test packages imported only by _test.go files):"; echo "$$bad"; exit 1; fi
	bash hack/generate.sh
	@git diff --exit-code -- manifests/crds pkg/apis plugins/apis || { echo "generated code is stale: run make generate and commit"; exit 1; }
	go run ./hack/chartgen -verify -helm $(HELM)
	@cp go.mod /tmp/lifeboat.go.mod.bak; cp go.sum /tmp/lifeboat.go.sum.bak; go mod tidy; \
	  if ! git diff --quiet -- go.mod go.sum; then echo "go mod tidy changed go.mod/go.sum:"; git diff -- go.mod go.sum; \
	  cp /tmp/lifeboat.go.mod.bak go.mod; cp /tmp/lifeboat.go.sum.bak go.sum; exit 1; fi

# ---- fuzzing and benchmarks (results: docs/BENCHMARKS.md, raw JSON: .lifeboat/bench/) ----

.PHONY: fuzz
fuzz: ## Fuzz the admission handlers and the interruption-message parser (FUZZTIME=2m per target)
	bash hack/fuzz.sh

.PHONY: bench-webhook
bench-webhook: tools ## Webhook: mutation-path Go benchmark + Pod CREATE latency with/without the webhook
	bash hack/bench-webhook.sh

.PHONY: bench-scheduler
bench-scheduler: tools ## Scheduler: pods/s of lifeboat-scheduler vs default-scheduler, 1000 nodes / 5000 Pods
	bash hack/bench-scheduler.sh

.PHONY: bench-controller
bench-controller: tools ## Controller: notice → StartInstances latency (1 and 10 at once), 100-instance reconcile cost
	bash hack/bench-controller.sh

.PHONY: bench-cloud
bench-cloud: ## Cloud layer: StartInstances and SQS receive/delete round trips through the emulator
	bash hack/bench-cloud.sh

.PHONY: clean
clean: ## Remove bin/ and .lifeboat/
	rm -rf $(BIN) .lifeboat

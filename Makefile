# Gantry's one way to build and test. CI runs `make test` (see .ci/run).
SHELL := /usr/bin/env bash -o pipefail -o errexit

BIN := _output/bin
ARTIFACTS ?= _output/e2e-artifacts
# Number of kwok nodes for `make up`.
NODES ?= 3
# How `make up`, `down`, `status` and `e2e` run clusters: local (processes) or kind (Docker
# containers of the node image; needs `make node-image`).
RUNTIME ?= local
# Control plane of a kind cluster (`make up`, `make e2e`): gantry (Gantry's kube-apiserver and
# kube-scheduler) or stock (upstream's, with Gantry's add-ons as on a managed cluster).
CONTROL_PLANE ?= gantry
# Repetitions of `make bench`'s and `make bench-scheduler`'s benchmarks (compare only what one run printed).
COUNT ?= 3
# Which benchmarks `make bench-scheduler` runs (see hack/bench-scheduler.sh).
WHAT ?= perf
# Ginkgo label filter for `make e2e`, e.g. FOCUS=smoke.
FOCUS ?=
# Platforms of `make images` (multi-arch indexes) and registry of `make push`.
PLATFORMS ?= linux/amd64,linux/arm64
REGISTRY ?=
# A kind node image to build `make node-image` on instead of Gantry's own root filesystem.
NODE_BASE_IMAGE ?=
# KUEUE=1: `make up` also installs Kueue (built by `make kueue`; see docs/kueue.md).
KUEUE ?=
# Extra flags for gantry-cluster up, e.g. UP_FLAGS="--port 6443 --retain".
UP_FLAGS ?=
# `make soak`: how long tenants work under faults, and the seed of the work and fault schedule
# (0: a new one, printed in the report).
DURATION ?= 30m
SEED ?= 0
# `make upgrade-test`: the revision of the release a cluster is upgraded from.
FROM ?=
GINKGO := go tool ginkgo
# Where `make soak` writes its report: one folder a shape.
SOAK_ARTIFACTS = $(ARTIFACTS)-soak$(if $(filter kind,$(RUNTIME)),-kind$(if $(filter stock,$(CONTROL_PLANE)),-stock))
UNIT_PKGS = $(shell go list ./... | grep -v '/e2e/')

.PHONY: all help build kueue images node-image manifests push up down status e2e e2e-kind unit integration bench bench-e2e bench-scheduler bench-provisioning soak soak-plants upgrade-test verify lint test clean update

all: build

## help: this list.
help:
	@awk '/^## [a-z0-9-]+:/ { sub(/^## /, ""); t = $$1; sub(/^[a-z0-9-]+: */, ""); printf "\n  %-22s %s", t, $$0; next } \
		/^## / { sub(/^## /, ""); printf " %s", $$0 } END { print "" }' $(MAKEFILE_LIST)

## build: every control-plane binary into _output/bin (incremental).
build:
	hack/build.sh

## kueue: Kueue's manager (sigs.k8s.io/kueue, pinned in hack/tools/kueue) into _output/bin, built
## from source: the ProvisioningRequest client Gantry is tested against, not part of the release.
kueue:
	GANTRY_BUILD_SET=kueue hack/build.sh

## images: every Gantry image and every image a kind node needs, built from the pinned sources
## with no Docker daemon, for PLATFORMS, into _output/images (OCI layout, docker-load archives).
images:
	PLATFORMS=$(PLATFORMS) hack/images.sh

## node-image: the kind node image for this machine's platform (Debian root filesystem, kind's
## base files, containerd, kubelet, every image of `make images` preloaded); docker-loaded.
## NODE_BASE_IMAGE=kindest/node:...@sha256:... builds on that image (by digest) instead, where it can be pulled.
node-image: images
	NODE_BASE_IMAGE='$(NODE_BASE_IMAGE)' hack/node-image.sh

## manifests: config/overlays/{managed,full} rendered into _output/manifests/gantry-<overlay>.yaml,
## every image pinned by the digest `make images` built (REGISTRY: where they will be pulled from).
manifests: images
	go run ./release/cmd/gantry-images manifests --registry '$(or $(REGISTRY),gantry.local)'

## push: copy the images of _output/images/oci to REGISTRY (e.g. REGISTRY=registry.example.com/gantry).
push:
	go run ./release/cmd/gantry-images push --registry '$(REGISTRY)'

## up: build, then bring up the cluster (NODES=3 kwok nodes; RUNTIME=kind adds 2 workers; KUEUE=1
## adds Kueue).
up: build $(if $(KUEUE),kueue)
	$(BIN)/gantry-cluster up --runtime $(RUNTIME) --control-plane $(CONTROL_PLANE) --nodes $(NODES) $(if $(KUEUE),--kueue) $(UP_FLAGS)

## down: remove the cluster and everything made for it.
down: build
	$(BIN)/gantry-cluster down --runtime $(RUNTIME)

## status: whether the cluster runs, and its components.
status: build
	$(BIN)/gantry-cluster status --runtime $(RUNTIME)

## unit: unit tests (no cluster).
unit:
	go test $(UNIT_PKGS)
	cd hack/tools/perf && go test ./...

## integration: tests against real etcd + Gantry's kube-apiserver from _output/bin (build tag integration).
integration: build
	go test -tags integration $$(go list -tags integration ./... | grep -E '/integration(/|$$)')

## bench: Gantry's checks against upstream's, same inputs, same run; prints ns/op and ratios; the
## tenant-reachable costs (narrowing, MetadataPolicy engine) at sizes 10, 100, 1000, 2000 (COUNT=3).
bench: build
	GANTRY_BENCH=1 go test -modfile=_output/patched/go.mod -tags gantry_patched -count=1 \
		-run TestNarrowingVsUpstream -v ./apiserver-patches/narrowing/install | grep -v '^=== RUN'
	GANTRY_BENCH=1 go test -count=1 -run TestAdmitCostByPolicyCount -v ./admission/metadatapolicy | grep -v '^=== RUN'
	go test -count=$(COUNT) -run '^$$' -bench Scaled ./admission/metadatapolicy/engine | grep -E '^Benchmark'

## bench-e2e: pod create latency with admission off / in-process / webhook, one run, ratios.
bench-e2e: build
	$(GINKGO) -v --label-filter=latency ./e2e/metadatapolicy/webhook | grep -E '^(pod create|admission|off|in-process|webhook)'

## bench-scheduler: the scheduler benchmarks of scheduler/bench, WHAT=perf (default: upstream's
## scheduler_perf workloads, upstream's default profile vs Gantry's, with and without reservations),
## qps (preemption at the scheduler's client limits), cost (what reservations cost each process) or
## all; COUNT repetitions in one run; prints pods/s, spreads and ratios. `make bench-scheduler WHAT=all
## DOC=1` regenerates docs/performance.md and its plot (hours at COUNT=3 on 2 cores). Knobs (BENCH,
## LABELS, DOC, KEEP, OUT, PROFILE, COUNTERS, TRACE): hack/bench-scheduler.sh.
bench-scheduler: build
	WHAT=$(WHAT) COUNT=$(COUNT) hack/bench-scheduler.sh

## e2e: ginkgo suites on the cluster of KUBECONFIG, or on a local cluster the suite brings up (the
## kueue suite's with Kueue, built by `make kueue`).
e2e: build kueue
	rm -rf $(ARTIFACTS) && mkdir -p $(ARTIFACTS)
	$(GINKGO) -v --timeout=$(if $(filter kind,$(RUNTIME)),80m,40m) --label-filter='$(if $(FOCUS),$(FOCUS),!latency)' \
		--junit-report=junit.xml --output-dir=$(ARTIFACTS) ./e2e/... -- --artifacts=$(abspath $(ARTIFACTS)) --runtime=$(RUNTIME) \
		--control-plane=$(CONTROL_PLANE)

## e2e-kind: the node image for this machine's platform, then on kind clusters the smoke,
## narrowing and MetadataPolicy webhook suites with Gantry's control plane, the smoke and install
## (day-2) suites with the stock one, and with each the kueue suite's specs labelled kind-sample
## (what `make test` runs on kind; `make e2e RUNTIME=kind [CONTROL_PLANE=stock]` runs every suite).
e2e-kind: build
	$(MAKE) node-image PLATFORMS=linux/$$(go env GOARCH)
	rm -rf $(ARTIFACTS)-kind $(ARTIFACTS)-stock && mkdir -p $(ARTIFACTS)-kind $(ARTIFACTS)-stock
	$(GINKGO) -v --timeout=40m --label-filter='!latency && (!kueue || kind-sample)' --junit-report=junit.xml --output-dir=$(ARTIFACTS)-kind \
		./e2e/smoke ./e2e/narrowing ./e2e/metadatapolicy/webhook ./e2e/kueue -- --artifacts=$(abspath $(ARTIFACTS))-kind --runtime=kind
	$(GINKGO) -v --timeout=30m --label-filter='!latency && (!kueue || kind-sample)' --junit-report=junit.xml --output-dir=$(ARTIFACTS)-stock \
		./e2e/smoke ./e2e/install ./e2e/kueue -- --artifacts=$(abspath $(ARTIFACTS))-stock --runtime=kind --control-plane=stock

## bench-provisioning: gantry-provisioner on a real kube-apiserver with Gantry's scheduler: one
## check-capacity request of 1000 pods on 5000 nodes, 100 requests of 10 pods, an atomic scale-up
## of 100 nodes.
bench-provisioning: build
	go test ./autoscaler/simulator -run '^$$' -bench CheckCapacity
	go test -tags integration ./autoscaler/provisioning/integration -run '^$$' -bench 'CheckCapacity100Requests|AtomicScaleUp100Nodes' -benchtime 1x

## bench-kueue: Jobs through Kueue to Admitted with gantry-provisioner as the ProvisioningRequest
## backend, on a local cluster of its own (kueue-bench; KUEUE_KUBECONFIG= measures a cluster of
## `make up KUEUE=1` instead) of NODES kwok nodes (500 unless given), JOBS Jobs a run (default
## 100,500), COUNT runs each: admissions/s, Job → Admitted p50/p99 and Kueue's and the provisioner's
## parts. DOC=1 then measures the provisioner's check-capacity decisions/s (default and raised client
## limits) and writes docs/performance-kueue.md from every run recorded in _output/bench-kueue.
.PHONY: bench-kueue
bench-kueue: build kueue
	mkdir -p _output/bench-kueue
	jobs='$(JOBS)'; ARTIFACTS=$(abspath _output/bench-kueue) go test -tags kueue_bench ./e2e/kueue/bench -run '^$$' \
		-bench KueueAdmission -benchtime 1x -count $(COUNT) -timeout 4h -args \
		-nodes=$(if $(filter command line environment,$(origin NODES)),$(NODES),500) -jobs=$${jobs:-100,500} \
		$(if $(KUEUE_KUBECONFIG),-kubeconfig=$(abspath $(KUEUE_KUBECONFIG)))
	$(if $(DOC),ARTIFACTS=$(abspath _output/bench-kueue) go test -tags integration ./autoscaler/provisioning/integration \
		-run '^$$' -bench CheckCapacityThroughput -benchtime 1x -timeout 1h)
	$(if $(DOC),go test -tags kueue_bench ./e2e/kueue/bench -run TestWriteDoc -count 1 -args \
		-results=$(abspath _output/bench-kueue) -doc=$(abspath docs/performance-kueue.md))

## soak: Gantry and Kueue on a cluster of its own (RUNTIME=local, or RUNTIME=kind
## CONTROL_PLANE=stock for the managed overlay on upstream's control plane) under mixed tenant
## work for DURATION while their components are killed and restarted (gantry-webhook one replica
## and both, on stock), their API requests failed and delayed at a fault proxy, and nodes deleted (SEED=
## repeats a schedule); test/soak/invariants judges the cluster throughout, and the report
## (operations, faults, checks, violations, memory per component) goes to
## _output/e2e-artifacts-soak[-kind-stock]/soak-report.json, which hack/tools/perf/soakreport turns
## into docs/reliability.md. Fails on any violation, on a failed operation while kube-apiserver was
## up, or on a run that did too little.
soak: build kueue
	$(if $(filter kind,$(RUNTIME)),$(MAKE) node-image PLATFORMS=linux/$$(go env GOARCH))
	$(if $(filter kind,$(RUNTIME)),CGO_ENABLED=0 go build -trimpath -o $(BIN)/faultproxy ./test/faultproxy/cmd/faultproxy)
	rm -rf $(SOAK_ARTIFACTS) && mkdir -p $(SOAK_ARTIFACTS)
	$(GINKGO) -v --tags soak --timeout=24h --output-dir=$(SOAK_ARTIFACTS) ./e2e/soak -- \
		--artifacts=$(abspath $(SOAK_ARTIFACTS)) --runtime=$(RUNTIME) --control-plane=$(CONTROL_PLANE) \
		--soak-duration=$(DURATION) --soak-seed=$(SEED)

## soak-plants: for each family of internal/plant (PLANTS=, default all), a soak of DURATION (6m
## unless given) on binaries built with that family's planted bug; passes only when every run
## failed naming a violation of its family (hack/soak-plants.sh). On demand: a soak run each.
soak-plants:
	PLANTS="$(PLANTS)" DURATION="$(if $(filter command line,$(origin DURATION)),$(DURATION),6m)" SEED=$(SEED) hack/soak-plants.sh

## upgrade-test: the upgrade in place: the release of revision FROM (its binaries and node image,
## built in _output/upgrade/<commit>) makes a kind cluster (CONTROL_PLANE=gantry or stock) with live
## Reservations, bookings, ProvisioningRequests in every state, MetadataPolicies and gated pods;
## `gantry-cluster upgrade` moves it to this checkout step by step, each object checked after each
## step (e2e/upgrade, hack/upgrade-test.sh). On demand, not in `make test`.
upgrade-test: build
	FROM='$(FROM)' CONTROL_PLANE=$(CONTROL_PLANE) hack/upgrade-test.sh

## verify: formatting, vet, tidy modules, generated files (the README's tables included) and Bazel
## metadata in sync, component READMEs at most 150 lines, no build output in the tree, import
## direction, golangci-lint.
verify:
	hack/verify.sh

## lint: golangci-lint alone (.golangci.yml); ARGS= passes flags and packages, e.g. ARGS=./scheduler/...
lint:
	hack/lint.sh $(ARGS)

## update: regenerate everything verify checks.
update:
	hack/update.sh

## test: what CI runs (verify, unit, build, integration, e2e, e2e-kind).
test: verify unit build integration e2e e2e-kind

## clean: remove the local cluster and _output/.
clean:
	-go run ./kind down
	rm -rf _output

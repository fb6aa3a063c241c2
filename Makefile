# node-drainer: `make help` lists the targets.
SHELL := bash
GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
ARCH ?= arm64
# The version every build carries (bootstrap's first log line): the release tag,
# commits since it and the commit, "-dirty" for uncommitted changes; "dev" outside git.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BUILD_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w -X github.com/node-drainer/node-drainer/internal/version.Version=$(VERSION)'
DIST := dist
# Two modules: the product's (go.mod: what the Lambda links) and the tests'
# (test/go.mod: the harness, scenarios, simulation, bench, demo and deploy
# tests, with the libraries only they use); go.work joins them, so
# `go test ./test/...` runs from here. The product is built and unit-tested
# with its own module alone (GOWORK=off): the release links only what its
# go.mod holds.
PRODUCT_GO := GOWORK=off $(GO)
# Every Go command here compiles as the release does, without cgo (the Lambda
# binary is CGO_ENABLED=0): the tests run what ships, and vet, the unit tests,
# the test module and the harness's function binary share one set of compiled
# packages (with cgo on for vet, the function's first build recompiled its
# whole tree: 118 s of CPU on an empty cache, 6 s with the flags shared).
export CGO_ENABLED := 0

.PHONY: help build package dist tools tools-nth providers unit bubbles race integration conformance faults soak dashboard deploy-check deploy-test test-matrix test tools-all harness-bootstrap vet golangci size fmt-check bench bench-scale demo lint lint-deploy fuzz clean build-NodeDrainerFunction

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

build: ## build bootstrap for provided.al2023 (ARCH=arm64|amd64) into dist/<arch>/
	GOOS=linux GOARCH=$(ARCH) CGO_ENABLED=0 $(PRODUCT_GO) build $(BUILD_FLAGS) -o $(DIST)/$(ARCH)/bootstrap ./functions/node-drainer

package: ## zip bootstrap for both architectures: dist/node-drainer-<arch>.zip
	@for a in arm64 amd64; do \
	  $(MAKE) --no-print-directory build ARCH=$$a VERSION=$(VERSION) && \
	  python3 hack/release/zip.py $(DIST)/$$a/bootstrap $(DIST)/node-drainer-$$a.zip && \
	  ls -l $(DIST)/node-drainer-$$a.zip || exit 1; \
	done

# A release: both zips named by the version, the SAM template that deploys the
# arm64 one, its README.md and LICENSE (what SAR's ReadmeUrl and LicenseUrl name), the cluster's RBAC (three files: terraform/kubernetes/), and their checksums (cd dist && sha256sum -c
# SHA256SUMS). Two runs on one commit with one Go toolchain give byte-identical files.
RBAC_FILES := rbac.yaml rbac-lease-namespace.yaml rbac-delete-nodes.yaml
RELEASE_FILES := node-drainer-$(VERSION)-arm64.zip node-drainer-$(VERSION)-amd64.zip template.yaml README.md LICENSE $(RBAC_FILES)
dist: ## release artifacts in dist/: node-drainer-<version>-<arch>.zip (arm64, amd64), template.yaml (SAM, uses the arm64 zip), README.md and LICENSE (its ReadmeUrl and LicenseUrl, for the Serverless Application Repository), the cluster's RBAC (rbac*.yaml), SHA256SUMS
	@mkdir -p $(DIST) && rm -f $(DIST)/node-drainer-*-*.zip $(DIST)/SHA256SUMS $(DIST)/template.yaml $(DIST)/README.md $(DIST)/LICENSE $(addprefix $(DIST)/,$(RBAC_FILES))
	@for a in arm64 amd64; do \
	  $(MAKE) --no-print-directory build ARCH=$$a VERSION=$(VERSION) && \
	  python3 hack/release/zip.py $(DIST)/$$a/bootstrap $(DIST)/node-drainer-$(VERSION)-$$a.zip || exit 1; \
	done
	python3 hack/release/template.py template.yaml node-drainer-$(VERSION)-arm64.zip $(VERSION) > $(DIST)/template.yaml.tmp
	mv $(DIST)/template.yaml.tmp $(DIST)/template.yaml
	cp $(addprefix terraform/kubernetes/,$(RBAC_FILES)) README.md LICENSE $(DIST)/
	cd $(DIST) && sha256sum $(RELEASE_FILES) > SHA256SUMS
	@cd $(DIST) && ls -l $(RELEASE_FILES) SHA256SUMS

build-NodeDrainerFunction: ## called by `sam build` (ARTIFACTS_DIR set by SAM)
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(PRODUCT_GO) build $(BUILD_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/node-drainer

tools: ## build the harness's control plane, kwok (cached; ~8 min the first time)
	bash hack/tools/build.sh

# Every tool `make test` uses, into the tools cache: hack/test.sh starts this
# first, in the background (each script locks its own tool, so a stage that
# needs one waits for its build, never starts another).
# In the order make test's stages ask for them: the control plane (integration,
# conformance, and deploy-test, which starts right after vet), the providers
# (deploy-test: built last, they held it back 16 minutes in a cold run), then
# golangci-lint, tflint, actionlint, terraform-docs (golangci, deploy-check),
# and aws-node-termination-handler (faults, last: nth-beside-node-drainer).
tools-all: ## build every tool make test uses (control plane, kwok, the providers, golangci-lint, tflint, actionlint, terraform-docs, aws-node-termination-handler; cached)
	@for t in build providers golangci-lint tflint actionlint terraform-docs nth; do \
	  s=$$(date +%s); bash hack/tools/$$t.sh >/dev/null || exit 1; echo "tools: $$t ready in $$(($$(date +%s) - s)) s"; \
	done

# The function binary the harness suites run (harness.BuildBootstrap, as
# `make build` for this machine without the version and without -trimpath,
# so that it reuses the packages vet and the tests compiled: -trimpath alone
# cost 30 s more on an empty cache), built once and shared: make rebuilds it
# when a product source is newer.
HARNESS_BOOTSTRAP := $(CURDIR)/bin/harness/bootstrap
PRODUCT_SRC := go.mod go.sum $(shell find internal functions -name '*.go' ! -name '*_test.go' 2>/dev/null)
$(HARNESS_BOOTSTRAP): $(PRODUCT_SRC)
	$(PRODUCT_GO) build -tags lambda.norpc -ldflags='-s -w' -o $@ ./functions/node-drainer

harness-bootstrap: $(HARNESS_BOOTSTRAP) ## the function binary the harness suites share (bin/harness/bootstrap)

integration faults soak deploy-test demo bench bench-scale: export NODE_DRAINER_BOOTSTRAP := $(HARNESS_BOOTSTRAP)

providers: ## build the terraform providers into the tools cache as a filesystem mirror (cached; ~10 min the first time)
	bash hack/tools/providers.sh

# The product is internal/ and functions/; test/ holds the harness, the
# end-to-end scenarios, the bench and the deploy tests; hack/ the tool builds.
UNIT_PKGS := ./internal/... ./functions/...

# The tests that run synctest bubbles (hack/bubbles -tests lists them) run
# BUBBLE_COUNT times more, after the unit tier (`make test` runs them right
# after it), with its flags (their build is the tier's): a bubble that can
# stop its clock under load (a reactor of the fake clientset that blocks)
# hangs here, at its own 2-minute timeout, rather than once in a while in CI.
BUBBLE_COUNT ?= 20

unit: ## tests that need nothing but Go (no harness, no tools build), with coverage
	$(PRODUCT_GO) test -count=1 -timeout 10m -cover $(UNIT_PKGS)

bubbles: ## the unit tests that run synctest bubbles (hack/bubbles -tests lists them), BUBBLE_COUNT times each
	@set -- $$($(PRODUCT_GO) run ./hack/bubbles -tests) && [ $$# -ge 2 ] && run=$${@: -1} && set -- "$${@:1:$$#-1}" && \
	  echo "bubbles: $$run x$(BUBBLE_COUNT) in $$*" && \
	  $(PRODUCT_GO) test -count=$(BUBBLE_COUNT) -timeout 2m -cover -run "$$run" "$$@"

# The unit tier once more under the race detector, which needs cgo (the one
# Go command here built with it): its packages share no build with the
# others. -short leaves out the one test that builds the function binary
# (with cgo on it would compile the whole tree again). It found the
# keep-alive goroutine reading the invocation's logger while the node's
# lookup replaced it (hook.go, handler.go), which no other test saw.
race: ## the unit tier under the race detector (-race, cgo on, -short)
	CGO_ENABLED=1 $(PRODUCT_GO) test -race -short -count=1 -timeout 20m $(UNIT_PKGS)

# Every package of the test module is in one tier, named here on purpose: a
# new folder under test/ joins no tier until it is added to one, and `make
# size` fails meanwhile (TIER_PKGS against `go list ./test/...`).
INTEGRATION_PKGS := ./test/bench ./test/demo ./test/e2e ./test/harness/... ./test/integration ./test/soak/pick
TIER_PKGS := $(INTEGRATION_PKGS) ./test/sim ./test/conformance ./test/faults ./test/soak ./test/deploy ./test/install

integration: tools $(HARNESS_BOOTSTRAP) ## end-to-end scenarios and harness tests on the real control plane: the packages of INTEGRATION_PKGS
	$(GO) test -count=1 -timeout 60m $(INTEGRATION_PKGS)

conformance: tools ## the simulation's world held to the real harness: each behaviour asserted on both sides; prints conformance_behaviours= conformance_mismatches=
	$(GO) test -count=1 -timeout 20m -v -run '^TestConformance$$' ./test/conformance/ | grep -E '^(==|!=|XX) |^conformance_|^(--- )?(FAIL|ok|PASS)'; exit $${PIPESTATUS[0]}

# SOAK_MINUTES of random days of the simulation's plans on the real harness
# (SOAK_PARALLEL at once: a day mostly waits on its compressed clock, 8 at
# once kept 2 cores at a load average of about 1.5); a day starts only when
# it should end within SOAK_MINUTES. SEED=N (on the command line) plays one
# day again.
SOAK_MINUTES ?= 30
SOAK_PARALLEL ?= 12
soak: tools $(HARNESS_BOOTSTRAP) ## the simulation's random days on the real harness with the real bootstrap: soak_days= soak_events= soak_faults= soak_checks_I1..= soak_violations=; SEED=N replays a day
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_PARALLEL=$(SOAK_PARALLEL) $(if $(filter command line environment,$(origin SEED)),SOAK_SEED=$(SEED)) \
		$(GO) test -count=1 -timeout $$(( $(SOAK_MINUTES) + 60 ))m -v -run '^TestSoak$$' ./test/soak/ | grep --line-buffered -vE '^=== RUN|^harness: '; exit $${PIPESTATUS[0]}

faults: tools tools-nth $(HARNESS_BOOTSTRAP) ## fault-injection suite on the real harness: one line per scenario, then faults_survived=N/M
	$(GO) test -count=1 -timeout 30m -parallel 4 -v -run TestFaults ./test/faults/

# SEEDS days of the simulation from SEED; SEEDS=1 replays one seed and
# prints its plan and trace (one processor: the closest to the failing run).
SEEDS ?= 10000
SEED ?= 1
SIM_FLAGS = -test.run '^TestSim$$' -test.timeout 30m -seeds $(SEEDS) -seed $(SEED) $(if $(filter 1,$(SEEDS)),-trace)

sim: ## the deterministic simulation of bad days (test/sim): prints sim_seeds= … sim_violations=; SEEDS=1 SEED=S replays one seed with its trace
	@mkdir -p bin
	$(GO) test -c -o bin/sim.test ./test/sim
	$(if $(filter 1,$(SEEDS)),GOMAXPROCS=1) ./bin/sim.test $(SIM_FLAGS)

# The dashboard has one definition, terraform/dashboard.json.tftpl: the module
# reads it (templatefile), and template.yaml, which ships as one file, holds a
# copy written by hack/dashboard; deploy-check fails when the copy is stale.
dashboard: ## write template.yaml's dashboard body from terraform/dashboard.json.tftpl (its one definition)
	$(PRODUCT_GO) run ./hack/dashboard

deploy-check: ## the deploy descriptions: cfn-lint, terraform fmt, tflint, terraform-docs tables, SAM/terraform parity
	bash test/deploy/check.sh

deploy-test: tools providers $(HARNESS_BOOTSTRAP) ## terraform apply/destroy and the SAM stack, run for real against the emulator and the harness; prints one line of results
	$(GO) test -count=1 -timeout 30m -v -run '^TestDeploy$$' ./test/install/ -args -require-all

# The oldest Kubernetes release whose control plane the module proxy serves
# whole (1.32's kube-controller-manager, kube-scheduler, csi-translation-lib,
# endpointslice and kube-proxy modules are not served at any 1.32 patch) and
# the newest release; `make test` runs the tools module's (1.35).
MATRIX ?= v1.33.13 v1.37.2

test-matrix: ## the integration suite on each release of MATRIX (each control plane built once, ~8 min)
	@set -e; for v in $(MATRIX); do \
	  echo "== Kubernetes $$v"; \
	  NODE_DRAINER_K8S_VERSION=$$v $(MAKE) --no-print-directory integration; \
	done

# hack/test.sh: the stages in this order, the tools built in the background
# from the start, the real deploys beside integration and conformance,
# conformance beside integration, faults alone after them; a table of the
# stages' times at the end.
test: ## all tests: gofmt, vet, the size limits, unit, the bubbles again, unit under -race, the simulation (5,000 seeds), golangci-lint, deploy checks, integration, the world's conformance and faults on the real harness, the real deploys (hack/test.sh)
	MAKE='$(MAKE)' bash hack/test.sh

vet: ## go vet of both modules: the product's (alone) and the tests'
	$(PRODUCT_GO) vet ./...
	$(GO) vet ./test/...

# golangci-lint over both modules, as vet: the product's alone (GOWORK=off;
# hack/size and hack/dashboard are commands of the product's module that never
# ship) and the tests' (through go.work). hack/tools is a module of its own,
# not linted (./hack/... stops at its go.mod).
# The linters and their settings: .golangci.yml.
golangci: ## golangci-lint v2 (.golangci.yml) on the product's module and the tests'; built into the tools cache on first use (~5 min)
	@bin=$$(bash hack/tools/golangci-lint.sh) && \
	  echo "golangci-lint: product (./internal/... ./functions/... ./hack/...)" && \
	  GOWORK=off $$bin run ./internal/... ./functions/... ./hack/... && \
	  echo "golangci-lint: tests (./test/...)" && \
	  $$bin run ./test/...

size: ## the product's sizes against the limits (no type over 25 methods, no file over 500 lines, no function over 60), less the allowances of hack/size/allow.txt; every revert of hack/sim/teeth.sh still applies; no fake clientset's reactor blocks where synctest bubbles run (hack/bubbles); every test package is in a tier
	@$(PRODUCT_GO) test -count=1 ./hack/size ./hack/bubbles
	$(PRODUCT_GO) run ./hack/size
	$(PRODUCT_GO) run ./hack/bubbles
	@bash hack/sim/teeth.sh --check
	@want=$$($(GO) list $(TIER_PKGS) | sort) && have=$$($(GO) list ./test/... | sort) && \
	  extra=$$(comm -13 <(echo "$$want") <(echo "$$have")) && \
	  { [ -z "$$extra" ] || { echo "test packages in no tier (add each to a tier's list in the Makefile):"; echo "$$extra"; exit 1; }; } && \
	  echo "tiers: $$(echo "$$have" | wc -l) test packages, each in a tier"

fmt-check: ## every Go file as gofmt writes it (the files that are not are listed)
	@out=$$($(GOFMT) -l $$(git ls-files '*.go')) || exit 1; test -z "$$out" || { echo "not gofmt'd:"; echo "$$out"; exit 1; }

tools-nth: ## build aws-node-termination-handler v1.25.6, the bench's peer (cached; ~3 min the first time)
	bash hack/tools/nth.sh

# BENCH_ARGS: the bench's flags (test/bench/doc.go), e.g. -runs 3 -baseline-cap 180s
BENCH_ARGS ?=
bench: tools tools-nth $(HARNESS_BOOTSTRAP) ## the benchmark table (drain speed, PDB wait, storm, RWO failover, the peer in the same run, growth to 5,000 nodes last)
	$(GO) test -count=1 -timeout 300m -run '^$$' -bench . -benchtime 1x ./test/bench/ -args -table -plots $(CURDIR)/docs/img $(BENCH_ARGS)

# the growth alone: the drain and the failover in the small cluster (what the
# sizes are judged against), then 500, 2,000 and 5,000 nodes, 5 runs of each
# (a drain's spread from run to run on this machine is larger than the 10 %
# its lines allow); the scale nodes renew their Leases every 5 minutes,
# inside a 10-minute grace period
SCALE_ARGS ?= -runs 5 -scale-runs 5 -node-monitor-grace 10m -scale-lease 1200
bench-scale: tools $(HARNESS_BOOTSTRAP) ## the growth: sweep, 110-pod drain, launch, RWO failover at 500, 2,000, 5,000 nodes (time, requests, peak RSS; docs/img/scale-*.svg)
	$(GO) test -count=1 -timeout 180m -run '^$$' -bench '^Benchmark(Drain110Pods|RWOFailover|Scale)$$' -benchtime 1x ./test/bench/ -args -table -plots $(CURDIR)/docs/img $(SCALE_ARGS) $(BENCH_ARGS)

demo: tools $(HARNESS_BOOTSTRAP) ## play the two stories on the real harness with the real bootstrap
	$(GO) run ./test/demo

lint: lint-deploy ## gofmt, go vet, golangci-lint, the size limits, IaC checks
	$(MAKE) --no-print-directory fmt-check
	$(MAKE) --no-print-directory vet
	$(MAKE) --no-print-directory golangci
	$(MAKE) --no-print-directory size

lint-deploy: deploy-check ## alias of deploy-check

fuzz: ## fuzz the event entry point (FUZZTIME=5m)
	$(PRODUCT_GO) test ./internal/event -run '^$$' -fuzz FuzzParseInvocation -fuzztime $${FUZZTIME:-5m}

clean: ## remove build output
	rm -rf $(DIST)

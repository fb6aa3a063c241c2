# node-drainer: `make help` lists the targets.
SHELL := bash
GO ?= go
ARCH ?= arm64
BUILD_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w'
DIST := dist

.PHONY: help build package tools providers unit integration faults deploy-check deploy-test test bench demo lint lint-deploy fuzz clean build-NodeDrainerFunction

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

build: ## build bootstrap for provided.al2023 (ARCH=arm64|amd64) into dist/<arch>/
	GOOS=linux GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o $(DIST)/$(ARCH)/bootstrap ./functions/node-drainer

package: ## zip bootstrap for both architectures: dist/node-drainer-<arch>.zip
	@for a in arm64 amd64; do \
	  $(MAKE) --no-print-directory build ARCH=$$a && \
	  (cd $(DIST)/$$a && rm -f ../node-drainer-$$a.zip && python3 -c 'import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],"w",zipfile.ZIP_DEFLATED); i=zipfile.ZipInfo("bootstrap"); i.external_attr=0o755<<16; i.compress_type=zipfile.ZIP_DEFLATED; z.writestr(i,open("bootstrap","rb").read()); z.close()' ../node-drainer-$$a.zip) && \
	  ls -l $(DIST)/node-drainer-$$a.zip; \
	done

build-NodeDrainerFunction: ## called by `sam build` (ARTIFACTS_DIR set by SAM)
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/node-drainer

tools: ## build the harness's control plane, kwok (cached; ~8 min the first time)
	bash hack/tools/build.sh

providers: ## build the terraform providers into the tools cache as a filesystem mirror (cached; ~10 min the first time)
	bash hack/tools/providers.sh

# The product is internal/ and functions/; test/ holds the harness, the
# end-to-end scenarios, the bench and the deploy tests; hack/ the tool builds.
UNIT_PKGS := ./internal/... ./functions/...

unit: ## tests that need nothing but Go (no harness, no tools build), with coverage
	$(GO) test -count=1 -timeout 10m -cover $(UNIT_PKGS)

integration: tools ## end-to-end scenarios and harness tests on the real control plane (test/)
	$(GO) test -count=1 -timeout 60m $$($(GO) list ./test/... | grep -v -e /test/deploy -e /test/faults -e /test/install)

faults: tools ## fault-injection suite on the real harness: one line per scenario, then faults_survived=N/M
	$(GO) test -count=1 -timeout 30m -parallel 4 -v -run TestFaults ./test/faults/

deploy-check: ## the deploy descriptions: cfn-lint, terraform fmt, tflint, SAM/terraform parity
	bash test/deploy/check.sh

deploy-test: tools providers ## terraform apply/destroy and the SAM stack, run for real against the emulator and the harness; prints one line of results
	$(GO) test -count=1 -timeout 30m -v -run '^TestDeploy$$' ./test/install/ -args -require-all

test: ## all tests: vet, unit, deploy checks, then integration on the real harness
	$(GO) vet ./...
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory deploy-check
	$(MAKE) --no-print-directory integration
	$(MAKE) --no-print-directory faults

bench: tools ## the benchmark table (drain speed, PDB wait, RSS, zip size, RWO failover)
	$(GO) test -count=1 -timeout 60m -run '^$$' -bench . -benchtime 1x ./test/bench/ -args -table

demo: tools ## play the two stories on the real harness with the real bootstrap
	$(GO) run ./test/demo

lint: lint-deploy ## gofmt, go vet, IaC checks
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

lint-deploy: deploy-check ## alias of deploy-check

fuzz: ## fuzz the event entry point (FUZZTIME=5m)
	$(GO) test ./internal/event -run '^$$' -fuzz FuzzParseInvocation -fuzztime $${FUZZTIME:-5m}

clean: ## remove build output
	rm -rf $(DIST)

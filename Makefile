# Keyhouse: `make run` starts the whole stack, `make test` runs every test.
SHELL := /bin/bash
.DEFAULT_GOAL := help

KH_DIR    := .keyhouse
BIN_DIR   := $(KH_DIR)/bin
TOOLS_DIR := $(KH_DIR)/tools
# SemVer from the release tag (v1.2.3 -> 1.2.3; commits after it: 1.2.3-4-gabcdef0);
# untagged: 0.0.0-dev+<commit>. CHANGELOG.md says how a release is tagged.
VERSION   ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null) && echo $$v | sed "s/^v//" || \
             echo 0.0.0-dev+$$(git rev-parse --short HEAD 2>/dev/null || echo unknown))
LDFLAGS   := -X github.com/keyhouse/keyhouse/pkg/buildinfo.version=$(VERSION)
# Every module's packages (go.work lists the modules).
PKGS      := ./pkg/... ./gateway/... ./console/... ./services/billing/... ./services/licensing/... \
             ./services/activations/... ./services/releases/... ./services/storefront/... ./services/events/... ./stack/... \
             ./devinfra/... ./clients/go/...
GOTEST    := go test -count=1 -race -shuffle=on
PROTO_TOOLS := $(TOOLS_DIR)/buf $(TOOLS_DIR)/protoc-gen-go $(TOOLS_DIR)/protoc-gen-go-grpc $(TOOLS_DIR)/protoc-gen-grpc-gateway \
               $(TOOLS_DIR)/protoc-gen-openapiv2

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: deps
deps: $(TOOLS_DIR)/stripe-mock ## Install what the stack and tests need: Debian's postgresql, redis-server, nodejs, python3-cryptography, python3-stripe; stripe-mock
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	[ -f /etc/ssl/certs/ca-certificates.crt ] || missing="$$missing ca-certificates"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing="$$missing python3-pytest"; \
	/usr/bin/python3 -c 'import cryptography' >/dev/null 2>&1 || missing="$$missing python3-cryptography"; \
	/usr/bin/python3 -c 'import stripe' >/dev/null 2>&1 || missing="$$missing python3-stripe"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

.PHONY: print-version
print-version: ## Print the version a build of this checkout reports (from the v-tag)
	@echo $(VERSION)

.PHONY: build
build: ## Build every binary into .keyhouse/bin
	go build -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/ ./gateway/cmd/gateway ./services/billing/cmd/billing \
	  ./services/licensing/cmd/licensing ./services/activations/cmd/activations \
	  ./services/releases/cmd/releases ./services/storefront/cmd/storefront ./services/events/cmd/events \
	  ./stack/cmd/keyhouse-dev

# The release: static binaries and the OCI image (every process in one image, as the chart
# and compose run it) for linux/amd64 and linux/arm64, as tarballs, built with
# go-containerregistry (pinned in stack/go.mod): no Docker engine needed.
RELEASE_DIR := $(KH_DIR)/release
.PHONY: release
release: ## Build release binaries and image tarballs (linux/amd64, arm64) into .keyhouse/release
	go run ./stack/cmd/keyhouse-release -version $(VERSION) -out $(RELEASE_DIR)

.PHONY: run
run: deps build ## Run the whole stack on :8080 (Ctrl-C stops it; data stays in .keyhouse/)
	@$(BIN_DIR)/keyhouse-dev

# The -timeout is a guard against a hung test, not a budget: the e2e package takes about 9
# minutes on a 2-core VM, and took up to 77 while its log census searched every line for
# every noted secret; the guard sits well above what a slow machine needs.
.PHONY: test
test: deps lint test-clients ## Every test: unit, integration (real Postgres, Redis, NATS) and e2e
	$(GOTEST) -timeout 90m $(PKGS)

# The TypeScript SDK ships compiled JavaScript (dist/, committed, so an app installs it with
# no build step); it must be what the pinned compiler makes of src/.
JS_DIST_CHECK := $(KH_DIR)/clients-js-dist
.PHONY: test-clients
test-clients: ## The client SDKs' unit tests (shared vectors) and the TypeScript build reproduced (their live suites run in stack/e2e)
	cd clients/js && npm ci --no-audit --no-fund --prefer-offline >/dev/null
	rm -rf $(JS_DIST_CHECK) && clients/js/node_modules/.bin/tsc -p clients/js/tsconfig.json --outDir $(JS_DIST_CHECK)
	@diff -r clients/js/dist $(JS_DIST_CHECK) || { echo "clients/js/dist is stale: cd clients/js && npm run build, and commit"; exit 1; }
	cd clients/js && node --test test/
	cd clients/python && /usr/bin/python3 -m pytest -q -p no:cacheprovider

.PHONY: test-unit
test-unit: ## Unit tests only (-short: no server or binary is started)
	$(GOTEST) -short -timeout 5m $(PKGS)

.PHONY: test-e2e
test-e2e: deps ## The end-to-end suite (stack/e2e): every binary on real Postgres, Redis, NATS
	$(GOTEST) -timeout 90m ./stack/e2e/...

# Every Fuzz* target of the repository, each run for FUZZTIME (their seed corpora, in
# testdata/fuzz, also run as ordinary tests in make test). A count, not a duration: with a
# duration, Go 1.26's fuzz coordinator can report a bare "context deadline exceeded" as a
# failure when the time runs out while a worker is mid-input, with no failing input
# (golang/go#75804, fixed in Go 1.27); a count stops without that deadline, and a slow
# machine only takes longer. 5,000 inputs is about 5 s for the slowest target here.
FUZZTIME ?= 5000x
.PHONY: fuzz-smoke
fuzz-smoke: ## Run each go test -fuzz target briefly (FUZZTIME=5000x inputs each)
	@set -e; for f in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
	  dir=./$$(dirname $$f); \
	  for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz $$name in $$dir for $(FUZZTIME)"; \
	    go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$dir; \
	  done; \
	done

# Every module of go.work also builds alone: its go.mod and go.sum, without the workspace,
# load every package and test (from the module cache the workspace build filled).
.PHONY: lint
lint: ## gofmt, go vet, and every module loads alone (GOWORK=off)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)
	@for m in $$(go list -m -f '{{.Dir}}'); do \
	  (cd $$m && GOWORK=off GOFLAGS=-mod=readonly go list -deps -test ./... >/dev/null) || \
	    { echo "$$m does not build alone: cd $$m && GOWORK=off go mod tidy"; exit 1; }; \
	done

$(PROTO_TOOLS): tools/go.mod tools/go.sum
	cd tools && GOWORK=off go build -o ../$(TOOLS_DIR)/ github.com/bufbuild/buf/cmd/buf \
	  google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
	  github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway \
	  github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2

# OpenAPI: the routes of http.yaml rendered by protoc-gen-openapiv2 into .keyhouse/openapi,
# then merged with the hand-written routes and stamped with each method's rate tier and
# access level into the embedded gateway/internal/openapi/openapi.json, and the route
# reference of docs/reference/api.md from it.
OPENAPI := gateway/internal/openapi/openapi.json

# stripe-mock (Stripe's API mock, pinned in tools/go.mod): the tests' STRIPE_API_BASE,
# started by devinfra/testkit (StripeMockURL).
$(TOOLS_DIR)/stripe-mock: tools/go.mod tools/go.sum
	cd tools && GOWORK=off go build -o ../$(TOOLS_DIR)/stripe-mock github.com/stripe/stripe-mock

.PHONY: stripe-mock
stripe-mock: $(TOOLS_DIR)/stripe-mock ## Build the pinned stripe-mock into .keyhouse/tools

.PHONY: proto
proto: $(PROTO_TOOLS) ## Lint the protos, regenerate proto/gen/go and the OpenAPI document with the pinned local plugins
	PATH="$(CURDIR)/$(TOOLS_DIR):$$PATH" buf lint
	find proto/gen/go -name '*.pb.go' -o -name '*.pb.gw.go' | xargs -r rm
	rm -rf $(KH_DIR)/openapi
	PATH="$(CURDIR)/$(TOOLS_DIR):$$PATH" buf generate
	PATH="$(CURDIR)/$(TOOLS_DIR):$$PATH" buf build -o $(KH_DIR)/openapi/image.binpb
	go run ./gateway/internal/openapi/gen -swagger $(KH_DIR)/openapi/keyhouse.swagger.json \
	  -image $(KH_DIR)/openapi/image.binpb -out $(OPENAPI)

# Redocly CLI (pinned in tools/openapi-lint/package-lock.json; needs Node >= 20.19) lints
# the OpenAPI document with the checked-in ruleset tools/openapi-lint/redocly.yaml. Its
# telemetry and update check are off: lint reaches no host.
.PHONY: openapi-lint
openapi-lint: ## Lint gateway/internal/openapi/openapi.json with Redocly CLI (recommended-strict)
	cd tools/openapi-lint && npm ci --no-audit --no-fund --prefer-offline >/dev/null
	cd tools/openapi-lint && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	  node_modules/.bin/redocly lint --config redocly.yaml --format=stylish ../../$(OPENAPI)

.PHONY: proto-check
proto-check: proto ## Fail when the committed generated code differs from a fresh generation
	@git diff --exit-code --stat -- proto/gen $(OPENAPI) docs/reference/api.md || { echo "generated code is stale: run make proto and commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard proto/gen $(OPENAPI)); [ -z "$$untracked" ] || { echo "untracked generated files: $$untracked"; exit 1; }

.PHONY: bench
bench: deps ## Load benchmarks against a throwaway stack on loopback (BENCH_ARGS="-d 10s -c 32 -run verify")
	go run ./stack/cmd/keyhouse-bench $(BENCH_ARGS)

.PHONY: migrate
migrate: build ## Apply every service's migrations to DATABASE_URL
	@for s in billing licensing activations releases storefront events; do $(BIN_DIR)/$$s migrate || exit 1; done

# Helm, pinned in deploy/tools/go.mod (its own module, outside go.work). The ldflags are
# those of Helm's release builds: without the Kubernetes version, helm template assumes 1.20.
HELM := $(TOOLS_DIR)/helm
$(HELM): deploy/tools/go.mod deploy/tools/go.sum
	cd deploy/tools && helm=$$(awk '$$1=="helm.sh/helm/v3"{print $$2}' go.mod) && \
	  k8s=$$(awk '$$1=="k8s.io/client-go"{split($$2, v, "."); print v[2]}' go.mod) && \
	  GOWORK=off go build -trimpath -o ../../$(HELM) -ldflags "-s -w \
	    -X helm.sh/helm/v3/internal/version.version=$$helm \
	    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$k8s \
	    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$k8s" \
	    helm.sh/helm/v3/cmd/helm

.PHONY: deploy-check
deploy-check: $(HELM) ## Lint and render the Helm chart, validate docker-compose.yml, verify deploy/systemd's units (offline; installs Debian's docker-compose first if missing, and says so)
	HELM=$(HELM) deploy/check.sh

# A real Kubernetes API server for deploy-verify, pinned in deploy/apiserver/go.mod (its own
# module, outside go.work; the build takes several minutes and ~3 GB of module cache).
KUBE_APISERVER := $(TOOLS_DIR)/kube-apiserver
KUBECTL        := $(TOOLS_DIR)/kubectl
$(KUBE_APISERVER) $(KUBECTL) &: deploy/apiserver/go.mod deploy/apiserver/go.sum
	cd deploy/apiserver && k8s=$$(awk '$$1=="k8s.io/kubernetes"{print $$2}' go.mod) && \
	  minor=$$(echo $$k8s | cut -d. -f2) && \
	  GOWORK=off go build -trimpath -o ../../$(TOOLS_DIR)/ -ldflags "-s -w \
	    -X k8s.io/component-base/version.gitVersion=$$k8s -X k8s.io/component-base/version.gitMajor=1 \
	    -X k8s.io/component-base/version.gitMinor=$$minor -X k8s.io/component-base/version.gitTreeState=clean \
	    -X k8s.io/client-go/pkg/version.gitVersion=$$k8s -X k8s.io/client-go/pkg/version.gitMajor=1 \
	    -X k8s.io/client-go/pkg/version.gitMinor=$$minor" \
	    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl

.PHONY: deploy-verify
deploy-verify: $(HELM) $(KUBE_APISERVER) $(KUBECTL) ## Render the chart (default and hosted values) and have a real kube-apiserver + etcd accept it (kubectl apply --dry-run=server)
	HELM=$(HELM) KUBE_APISERVER=$(KUBE_APISERVER) KUBECTL=$(KUBECTL) deploy/verify.sh

.PHONY: clean
clean: ## Stop nothing, delete .keyhouse/ (local data, binaries, tools)
	rm -rf $(KH_DIR)

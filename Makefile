# sandboxd: two commands on a fresh machine — `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := bin/sandboxd
STATICCHECK_VERSION := v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
# Extra flags for `make run`, e.g. RUN_ARGS="--api-addr 127.0.0.1:9090".
RUN_ARGS ?=

.PHONY: all build run test test-short bench lint deps clean proto images check-deploy

all: build

deps:
	@./deploy/dev/install-deps.sh

build: deps
	$(GO) build -o $(BIN) ./cmd/sandboxd
	$(GO) build -o bin/sandboxctl ./cmd/sandboxctl

# Builds the runtime images (PHP 8.2, 7.4, 8.4 and MariaDB) from Debian
# packages into the image cache; cached by recipe hash, so a rebuild is instant.
images: deps
	$(GO) run ./deploy/images

# Starts everything on this machine with its embedded defaults: control plane
# (single-node Raft, data in ./.data, API on 127.0.0.1:8080), node agent
# (containerd started if none runs, MariaDB) and edge (sites on
# http://<slug>.localhost:8081). Prints SANDBOX_URL, SANDBOX_TOKEN and a curl
# line that creates a site. Needs root (containerd).
run: build images
	./$(BIN) dev $(RUN_ARGS)

# Everything, never skipped (root, containerd, MariaDB, Chromium); prints
# the ten slowest tests and the slowest packages at the end. The longest
# packages start first, three at a time, so that the two cores stay busy
# to the end; end-to-end tests run four at a time, most on one shared dev
# system.
# TEST_JSON=file keeps the go test -json stream (every test's time).
SLOW_PACKAGES := ./e2e/ ./agent/mariadb/ ./agent/toolbox/ ./agent/sites/ ./agent/runtime/ ./agent/templates/ ./controlplane/server/
TEST_JSON ?=
test: deps images
	$(GO) vet ./...
	set -o pipefail; $(GO) test -race -count=1 -timeout 40m -p 3 -parallel 4 -json $(SLOW_PACKAGES) ./... | $(GO) run ./deploy/dev/testsummary -save "$(TEST_JSON)"

# What needs neither root nor containerd: a minute or two, for the inner loop.
test-short:
	$(GO) test -short -count=1 ./...

# Checks deploy/: the alert rules (promtool check and test rules) and the
# Grafana dashboard use only registered metrics, docs/operating.md lists them,
# and the systemd units keep their hardening (systemd-analyze verify).
check-deploy:
	$(GO) test -count=1 ./deploy/

# Benchmarks report ratios against a baseline measured in the same run.
bench: deps images
	$(GO) run ./bench/raftbench
	$(GO) run ./bench/sitebench
	$(GO) run ./bench/sitebench -only-imports -sites 5
	$(GO) run ./bench/sitebench -only-access -sites 5
	$(GO) run ./bench/sitebench -only-sleep -density-sites 2000
	$(GO) run ./bench/sitebench -only-agents
	@echo "scheduler: one placement over 1,000 simulated nodes"
	@$(GO) test -run '^$$' -bench . ./scheduler | awk -f bench/ratios.awk
	@echo "candidates: one placement's view of 1,000 nodes holding 20,000 sites"
	@$(GO) test -run '^$$' -bench Candidates ./controlplane/nodes | awk -f bench/ratios.awk
	$(GO) run ./bench/fleetbench

lint: deps
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

# Regenerates protocol/ Go code with pinned protoc plugins (output is committed).
proto:
	./protocol/generate.sh

clean:
	rm -rf bin

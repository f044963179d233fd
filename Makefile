# Two commands matter to a new user: `make demo` and `make test`.
# Everything runs against PostgreSQL on 127.0.0.1:5432 and RabbitMQ on
# 127.0.0.1:5672, the MySQL inbox's tests against MariaDB or MySQL on
# 127.0.0.1:3306 (override with the variables in README.md).

GO        ?= go
# The lists follow the repository: every module of go.work, every binary
# services/<name>/cmd/<name> (e2e/registry_test.go checks both against the
# registry in contracts). A new service needs no edit here.
MODULES   := $(shell sed -n 's|^[[:space:]]*\./||p' go.work)
PKGS      := $(addprefix ./,$(addsuffix /...,$(MODULES)))
CMDS      := $(wildcard services/*/cmd/*)
# gotestsum runs `go test` and prints each test as it ends, then a summary
# ("DONE 512 tests, 1 failure in 300.1s"); pinned, fetched through the Go
# module proxy on first use. TEST_FORMAT=pkgname prints one line per package.
# TEST_JSON names a file for go test's JSON events (.ci/run counts them).
GOTESTSUM ?= $(GO) run gotest.tools/gotestsum@v1.13.0
TEST_FORMAT ?= testname
TEST_JSON ?=

.PHONY: all generate check-generated build test drills unit e2e model lint demo screenshot bench chaos up down up-ha down-ha compose-test clean tidy tools fork service

all: lint test

# VERSION is what `<binary> --version` prints before the Go version.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X example.com/shop/platform/cli.version=$(VERSION)

## generate: derive every list of services and events from the registry (contracts/registry.go)
## and the schemas (contracts/schemas): contracts/events.go, the compose files, deploy/, AsyncAPI
generate:
	cd contracts && $(GO) generate ./...
	cd e2e && $(GO) run ./cmd/generate -root ..

## check-generated: fail, naming the file and `make generate`, when a generated file is not
## what the registry and the schemas make (make test runs it first)
check-generated:
	@rc=0; (cd contracts && $(GO) run ./internal/genevents -check) || rc=1; \
	(cd e2e && $(GO) run ./cmd/generate -root .. -check) || rc=1; exit $$rc

## build: compile bin/<name> for every services/<name>/cmd/<name> (order, stock, shipping, auditor)
build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/ $(addprefix ./,$(CMDS))

## test: the tools, lint, then every unit, integration and end-to-end test with the race detector
test: tools lint check-generated build
	$(GOTESTSUM) --format $(TEST_FORMAT) $(if $(TEST_JSON),--jsonfile $(TEST_JSON)) -- -race -count=1 -timeout 25m $(PKGS)

## drills: the fault drills (e2e/fault_test.go, build tag drills): every fault of docs/reliability.md
## raised under load on a running system, each ending in the ledger check (10 to 15 minutes)
drills: tools build
	$(GOTESTSUM) --format $(TEST_FORMAT) $(if $(TEST_JSON),--jsonfile $(TEST_JSON)) -- -race -count=1 -tags drills -run '^TestFault' -timeout 40m ./e2e/

## unit: the same tests without the end-to-end suite
unit:
	$(GOTESTSUM) --format $(TEST_FORMAT) $(if $(TEST_JSON),--jsonfile $(TEST_JSON)) -- -race -count=1 -timeout 15m $(filter-out ./e2e/...,$(PKGS))

## e2e: the end-to-end suite on the real binaries
e2e: tools build
	$(GO) test -race -count=1 -timeout 15m -v ./e2e/...

## model: check model/journey.pml with spin: the model holds, every mutant is refuted (docs/model.md)
model:
	@command -v spin >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 && [ -e /usr/include/stdio.h ] || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing: spin gcc (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends spin gcc libc6-dev >/dev/null; \
	else echo "make model needs spin and gcc: sudo apt-get install -y spin gcc" >&2; exit 1; fi
	$(GO) test -count=1 -v -timeout 10m -run 'TestModel' ./e2e/model/

## tools: what the tests need besides Go and the servers, all system packages:
## Chromium (the live page's tests), promtool (the alert rules' tests), spin and a
## C compiler (the model's check, docs/model.md). Installed
## when make runs as root on Debian or Ubuntu, else make stops and prints the command.
tools:
	@missing=; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  command -v google-chrome >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v spin >/dev/null 2>&1 || missing="$$missing spin"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	[ -e /usr/include/stdio.h ] || missing="$$missing libc6-dev"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing:$$missing (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else \
	  echo "The tests need Chromium, promtool, spin and gcc. Install them, then run make test again:" >&2; \
	  echo "  sudo apt-get install -y$$missing    (Debian, Ubuntu)" >&2; \
	  exit 1; \
	fi

## lint: gofmt and go vet over every module, the files behind build tags included
lint:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags drills,compose $(PKGS)

## demo: run the whole system on real input and print what happened (KEEP=1 keeps it and the live page running)
# Built, not `go run`: go run exits 1 when Ctrl-C ends a kept demo that stopped cleanly.
demo: build
	$(GO) build -trimpath -o bin/demo ./e2e/cmd/demo
	bin/demo $(if $(KEEP),-keep)

## screenshot: docs/auditor.png, the live page of a running `make demo KEEP=1` (its auditor on
## :8085) in headless Chromium; ORDER=<order id> opens that order's journey beside the table
CHROMIUM  ?= $(firstword $(shell command -v chromium chromium-browser google-chrome 2>/dev/null))
screenshot:
	$(CHROMIUM) --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=5000 \
	  --window-size=1920,1080 --screenshot=docs/auditor.png 'http://localhost:8085/$(if $(ORDER),#order=$(ORDER))'

## bench: throughput and latency benchmarks; writes bench/out/latest.json
bench: build
	$(GO) run ./e2e/cmd/bench

## chaos: a seeded soak of $(CHAOS_ORDERS) orders under random faults; CHAOS_SEED=N replays a run.
## make chaos TOPOLOGY=cluster: the same on three RabbitMQ nodes and a PostgreSQL primary/standby,
## two processes of each kind, overlapping partitions, node kills, failovers (root; docs/reliability.md)
CHAOS_ORDERS ?= 10000
TOPOLOGY     ?= single
chaos: build
	$(GO) run ./e2e/cmd/chaos -orders $(CHAOS_ORDERS) -topology $(TOPOLOGY)

## up: the whole system in Docker (needs a Docker engine with `docker compose`; README.md)
up:
	VERSION=$(VERSION) docker compose up -d --build

down:
	docker compose down -v

## up-ha: the same with three RabbitMQ nodes in one cluster (docker-compose.ha.yml); down-ha stops it
up-ha:
	VERSION=$(VERSION) docker compose -f docker-compose.yml -f docker-compose.ha.yml up -d --build

down-ha:
	docker compose -f docker-compose.yml -f docker-compose.ha.yml down -v

## compose-test: docker-compose.yml run for real: up, orders through the published ports, the live page, the ledger, the demo, a relay crash, down
# deploy/compose-test.sh starts dockerd, builds the compose tool and the base images
# this machine cannot pull when they are missing, then runs the test on its own ports.
compose-test: tools
	deploy/compose-test.sh $(GOTESTSUM) --format $(TEST_FORMAT) $(if $(TEST_JSON),--jsonfile $(TEST_JSON)) -- -tags compose -count=1 -timeout 45m ./e2e/composeup/

## fork: copy the repository to DIR under MODULE and NAME (docs/fork.md), e.g. make fork MODULE=github.com/acme/orders NAME=acme [WITHOUT=mysqlinbox,watermillinbox]
fork:
	$(GO) run ./e2e/cmd/fork -module '$(MODULE)' $(if $(NAME),-name '$(NAME)') $(if $(DIR),-dir '$(DIR)') $(if $(WITHOUT),-without '$(WITHOUT)')

## service: add services/NAME from the recipe of docs/architecture.md (KIND=consumer, the default, producer or both)
service:
	$(GO) run ./e2e/cmd/service -name '$(NAME)' -kind '$(or $(KIND),consumer)'

tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

clean:
	rm -rf bin bench/out

# TaskForge — common tasks. `make run` and `make test` need only Go plus the local
# PostgreSQL and Redis server binaries (Debian: postgresql, redis-server). `make
# test` also runs the Python SDK's pytest suite and mypy, the TypeScript SDK's
# node --test suite, and the cross-language conformance scenario from Go tests
# (sdk/conformance), with Debian's python3, python3-venv, python3-setuptools,
# python3-wheel, python3-pytest and python3-mypy, and node with npm; without them
# those tests skip (and fail under CI=true).

GO          ?= go
BIN         := bin/taskforge
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 15m

.PHONY: all build run test lint fmt bench clean openapi

all: build

build: ## Build the taskforge binary into bin/
	$(GO) build -o $(BIN) ./cmd/taskforge

run: build ## Start TaskForge with embedded PostgreSQL and Redis, a demo worker and the dashboard
	./$(BIN) dev

test: ## Run the whole suite against real PostgreSQL and Redis (local ones, or throwaway)
	$(GO) test $(TEST_FLAGS) ./...
	cd client && $(GO) test $(TEST_FLAGS) ./...

lint: ## gofmt, go vet and staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd client && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd internal/bench/peers && $(GO) vet ./...

openapi: ## Check that api/openapi.yaml is valid OpenAPI 3.1 (no database needed; `make test` also checks routes and traffic against it)
	$(GO) test -count=1 -run '^TestLoad$$' ./internal/contract

fmt:
	gofmt -w $$(git ls-files '*.go')

bench: ## Go benchmarks of the hot paths (enqueue, dispatch, claim, ack, Lua pop)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./storage/... ./buffer/... ./ratelimit/... ./api/...

clean:
	rm -rf bin

# docker compose deployment (compose/): PostgreSQL, Redis, two replicas behind
# HAProxy on 127.0.0.1:8080, and the reference worker. Settings: compose/.env.
COMPOSE ?= docker compose -f compose/docker-compose.yml

.PHONY: compose-up compose-down compose-test compose-test-down

compose-up: ## Build the image and start the compose deployment; waits until it is healthy
	$(COMPOSE) up -d --build --wait

compose-down: ## Stop the compose deployment, keeping its volumes (COMPOSE_DOWN_FLAGS=-v deletes them)
	$(COMPOSE) down $(COMPOSE_DOWN_FLAGS)

# The deployment run for real on this machine, as root: compose/test/stack.sh starts a
# private dockerd (no bridge, loopback only), builds every image locally and runs the
# stack with compose/docker-compose.test.yml. Not in .ci/run: a cold run takes ~20 min.
compose-test: ## Build and run the compose deployment on a private Docker engine and test it (root; ~20 min cold, ~2 warm)
	TASKFORGE_COMPOSE_TEST=1 go test -count=1 -v -timeout 60m -run '^TestComposeDeployment$$' ./compose/

compose-test-down: ## Take down what an interrupted compose-test left (keeps the cached base image)
	compose/test/stack.sh down

# End-to-end benchmarks (internal/bench/, docs/benchmarks.md): `taskforge bench` starts its own
# serve and reference worker processes against a throwaway PostgreSQL configured as
# production runs it (autovacuum and fsync on) and a throwaway Redis, or against
# DATABASE_URL and REDIS_URL when both are set, each step in a fresh database. About 15 minutes with the
# defaults; BENCH_FLAGS="--runs 1 --experiments e1,latency" for a quick look.
BENCH_JSON  ?= bin/bench-results.json
BENCH_FLAGS ?=

.PHONY: bench-e2e

bench-e2e: build ## End-to-end benchmarks E1, E2, latency, E5, E6; table on stdout, figures in $(BENCH_JSON)
	./$(BIN) bench --json $(BENCH_JSON) $(BENCH_FLAGS)

# Fault-injection suite (chaos/, docs/reliability.md): three serve replicas, eight
# reference workers, throwaway PostgreSQL and Redis, a seeded fault schedule, then a
# verifier over PostgreSQL. `make test` runs a bounded version (2,000 tasks, 90 s of
# faults); this is the long one: 100,000 tasks under 60 min of faults, about 71 min
# with the build and the verification (docs/reliability.md records its figures by
# fault). TASKFORGE_CHAOS_SEED=N replays a schedule; CHAOS_REPORT=file.md also writes
# the figures to a file.
CHAOS_TASKS    ?= 100000
CHAOS_DURATION ?= 60m
CHAOS_REPORT   ?=
# Each of the eight workers runs this many tasks at once (the bounded run: 4).
CHAOS_WORKER_CONCURRENCY ?= 8

.PHONY: chaos

chaos: ## Long fault-injection run: CHAOS_TASKS tasks under CHAOS_DURATION of seeded faults; prints every figure
	TASKFORGE_CHAOS_TASKS=$(CHAOS_TASKS) TASKFORGE_CHAOS_DURATION=$(CHAOS_DURATION) TASKFORGE_CHAOS_REPORT=$(CHAOS_REPORT) \
	  TASKFORGE_CHAOS_WORKER_CONCURRENCY=$(CHAOS_WORKER_CONCURRENCY) \
	  $(GO) test -count=1 -timeout 90m -v -run '^TestChaosLosesNothing$$' ./chaos

# The mover of an older release's finished tasks into history (internal/backfill) on a
# million tasks beside a live queue; `make test` runs it on 20,000. It logs the rate and
# the live calls' p50, p99 and max.
BACKFILL_TASKS ?= 1000000

.PHONY: backfill-test

backfill-test: ## Move BACKFILL_TASKS finished tasks into history beside a live queue; check every count, log the live latencies
	TASKFORGE_BACKFILL_TASKS=$(BACKFILL_TASKS) $(GO) test -count=1 -timeout 30m -v -run '^TestMoveBesideALiveQueue$$' ./internal/backfill

# Fuzz the request decoders and the buffer's score / pop arguments, FUZZTIME each
# (their seed corpora, testdata/fuzz, also run in every `go test`).
FUZZTIME ?= 10s
API_FUZZ    := FuzzEnqueueBody FuzzBatchBody FuzzPollBody FuzzQueueSettings FuzzCursor
BUFFER_FUZZ := FuzzScore FuzzPopArguments

.PHONY: fuzz

fuzz: ## Run every fuzz target for FUZZTIME (default 10s) each
	@set -e; for t in $(API_FUZZ); do $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./api/; done; \
	  for t in $(BUFFER_FUZZ); do $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./buffer/; done

# River and Asynq on E1, E2, latency and enqueue round trips (internal/bench/peers, a module
# of its own so that TaskForge never depends on them), on the same PostgreSQL and
# Redis (throwaway ones, as for bench-e2e, unless DATABASE_URL and REDIS_URL are set). bench-compare runs both sides round after round and prints
# TaskForge / best-peer ratios; bench-peers runs the peers alone.
PEERS_JSON    ?= bin/peers-results.json
PEERS_FLAGS   ?=
COMPARE_JSON  ?= bin/compare-results.json
COMPARE_FLAGS ?=

# LANGUAGES picks the SDKs compared, each against its language's peers: go (River,
# Asynq), typescript (graphile-worker, BullMQ: npm packages pinned by
# internal/bench/peers/node/package-lock.json) and python (Celery, RQ: Debian's
# python3-celery and python3-rq).
LANGUAGES     ?= go,typescript,python

.PHONY: bench-peers bench-compare bench-compare-quick peers peers-node peers-python sdk-bench

peers: ## Build the River/Asynq peers program into bin/peers
	mkdir -p bin
	cd internal/bench/peers && $(GO) build -o $(CURDIR)/bin/peers .

peers-node: ## Install graphile-worker and BullMQ for the Node.js peers (internal/bench/peers/node, from its lockfile)
	cd internal/bench/peers/node && npm ci --no-audit --no-fund

peers-python: ## Install Debian's python3-celery and python3-rq for the Python peers (internal/bench/peers/python) when missing
	/usr/bin/python3 -c 'import celery, rq' 2>/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-celery python3-rq)

sdk-bench: ## Build the TypeScript SDK and its benchmark worker (sdk/typescript/dist)
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run build

bench-peers: peers ## River and Asynq on TaskForge's workloads; table on stdout, figures in $(PEERS_JSON)
	./bin/peers --json $(PEERS_JSON) $(PEERS_FLAGS)

bench-compare: build peers peers-node peers-python sdk-bench ## Each SDK of LANGUAGES against its language's peers, 3 rounds; ratios on stdout, figures in $(COMPARE_JSON)
	./$(BIN) bench compare --peers bin/peers --languages $(LANGUAGES) --json $(COMPARE_JSON) $(COMPARE_FLAGS)

bench-compare-quick: build peers peers-node peers-python sdk-bench ## bench-compare at small sizes, one round (a few minutes): a first look, not figures to publish
	./$(BIN) bench compare --peers bin/peers --languages $(LANGUAGES) --rounds 1 --tasks 2000 --e2-tasks 320 \
	  --latency-tasks 300 --enqueue-tasks 200 --json $(COMPARE_JSON) $(COMPARE_FLAGS)

# The two commands: `make run` and `make test`. Both find a PostgreSQL server
# or start a throwaway one (scripts/pg.sh); `make test` also installs Chromium
# when it is missing (scripts/chromium.sh), for api/browser_test.go.
SHELL := /bin/bash
GO ?= go
BIN := .tierq/bin

.PHONY: run test fuzz chaos build lint bench bench-routing screenshots pg-stop

## run: migrate, start both workers, the scheduler and the API, run the demo and a mix of real analyses, watch the queues (Ctrl-C stops everything)
run:
	@scripts/run.sh

## test: vet and race-test everything against real PostgreSQL, River UI in headless Chromium (scripts/chromium.sh installs it), the Kubernetes manifests (deploy/kubernetes, a module of its own), and a team's service from docs/library.md run end to end (examples/invoices, a module of its own)
test:
	@scripts/chromium.sh
	@eval "$$(scripts/pg.sh test)" && \
	  { $(GO) vet ./... && $(GO) test -race -count=1 ./... && \
	    (cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -race -count=1 ./...) && \
	    (cd examples/invoices && $(GO) vet ./... && $(GO) test -race -count=1 ./...); status=$$?; \
	    if [ "$${TIERQ_PG_STARTED:-}" = 1 ]; then scripts/pg.sh stop; fi; exit $$status; }

## fuzz: run each of the API's request-decoder fuzz targets for FUZZTIME (default 30s) against real PostgreSQL; `make test` runs only their seed corpora
FUZZTIME ?= 30s
FUZZ_TARGETS := FuzzParseCreateJob FuzzCheckText FuzzCreateJobRequest FuzzPatchJobRequest FuzzReplayRequest FuzzBulkReplayRequest FuzzDeadLetterQuery FuzzQueuePath FuzzEscalationQuery FuzzLimitsRequest
fuzz:
	@eval "$$(scripts/pg.sh test)" && \
	  { status=0; for target in $(FUZZ_TARGETS); do \
	      $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./api/ || { status=1; break; }; \
	    done; \
	    if [ "$${TIERQ_PG_STARTED:-}" = 1 ]; then scripts/pg.sh stop; fi; exit $$status; }

## chaos: the reliability suite (docs/reliability.md): the real binaries against a PostgreSQL cluster of its own (and a pg_auto_failover formation: scripts/ha.sh), under faults; about 7 minutes
chaos:
	@eval "$$(scripts/pg.sh bindir)" && \
	  $(GO) vet -tags chaos ./chaos/ && \
	  $(GO) test -tags chaos -count=1 -v -timeout 20m ./chaos/

## build: the binaries (worker, scheduler, tierctl) into .tierq/bin
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## bench: micro-benchmarks (-benchmem), then every tierctl bench scenario (fairness included); BENCH_FLAGS=--quick for about a minute each
BENCH_FLAGS ?=
bench:
	$(GO) test -run '^$$' -bench 'SelectQueue|InsertOpts|Parse|Effective' -benchmem ./routing/ ./tiers/ ./aging/
	@eval "$$(scripts/pg.sh bench)" && \
	  { $(GO) run ./cmd/tierctl bench all $(BENCH_FLAGS); status=$$?; \
	    if [ "$${TIERQ_PG_STARTED:-}" = 1 ]; then scripts/pg.sh stop; fi; exit $$status; }

## bench-routing: SelectQueue ns/op and allocations
bench-routing:
	$(GO) test -run '^$$' -bench SelectQueue -benchmem ./routing/

## screenshots: regenerate the screenshots in docs/img (River UI's riverui-*.png, the operator console's console-*.png) from the headless-Chromium tests that take them (api/browser_test.go, api/console_browser_test.go), against real PostgreSQL
screenshots:
	@scripts/chromium.sh
	@eval "$$(scripts/pg.sh test)" && \
	  { TIERQ_SCREENSHOT_DIR=$(CURDIR)/docs/img $(GO) test -count=1 -run '^(TestBrowserRiverUI|TestBrowserConsole|TestBrowserConsolePages|TestBrowserConsoleBulkReplay|TestBrowserConsoleEscalations)$$' ./api/; status=$$?; \
	    if [ "$${TIERQ_PG_STARTED:-}" = 1 ]; then scripts/pg.sh stop; fi; exit $$status; }

## pg-stop: stop the throwaway PostgreSQL cluster, if one was started
pg-stop:
	@scripts/pg.sh stop

# ratelane — developer tasks. `make test` is what the README and CI run.
GO ?= go
export RATELANE_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: test test-short lint bench bench-peers build

# test runs every test under the race detector, on SQLite and PostgreSQL.
# -p 1: one package at a time, so the tests that measure pacing over real
# time are not starved by another package's load on a 2-core machine.
test:
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

# test-short skips the subprocess and multi-second tests.
test-short:
	$(GO) test -short -count=1 ./...

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20000x .

# bench-peers runs the throughput, paced and flood workloads on ratelane and
# its peers (River, asynq, BullMQ) and prints one table; see
# bench/peers/README.md. Needs PostgreSQL, Redis (db 9 is flushed) and, for
# BullMQ, `npm ci` in bench/peers/bullmq. Pass flags with PEERS_FLAGS, e.g.
# make bench-peers PEERS_FLAGS="--runs 3 --workloads paced".
bench-peers:
	cd bench/peers && $(GO) run . $(PEERS_FLAGS)

build:
	$(GO) build -o bin/ratelane ./cmd/ratelane

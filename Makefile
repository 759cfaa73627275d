# ratelane — developer tasks. `make test` is what the README and CI run.
GO ?= go
export RATELANE_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: test test-sqlite-cgo test-short lint fuzz vulncheck bench bench-measure bench-peers build

# test runs every test under the race detector, on SQLite and PostgreSQL:
# every package but internal/realtime first, several at a time (the go
# command's default), then internal/realtime alone. Its few tests measure
# pacing over real time, so they must not share a 2-core machine with
# another package's load; the rest depend on no machine's speed (fake
# clocks, testing/synctest, waits with a deadline: internal/testkit).
test:
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/internal/realtime$$')
	$(GO) test -race -count=1 -timeout 30m ./internal/realtime/

# test-sqlite-cgo runs the SQLite driver's tests, the conformance suite and
# the model test on the cgo build of the store (-tags sqlite_cgo:
# github.com/mattn/go-sqlite3; docs/architecture.md, "The SQLite driver").
# It needs a C compiler; `make test` covers the default, pure-Go build.
test-sqlite-cgo:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m -tags sqlite_cgo ./internal/store/sqlite/

# test-short skips the subprocess and multi-second tests.
test-short:
	$(GO) test -short -count=1 ./...

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# fuzz runs every Fuzz target for FUZZTIME each (default 10s; the webhook
# signature verifiers FUZZTIME_SIGNATURE, default 30s), one instrumented
# test binary per package (go test -c -fuzz) for all its targets; see .ci/fuzz.
fuzz:
	.ci/fuzz

# vulncheck runs govulncheck (pinned) over ./...; any reachable finding
# fails. See .ci/vulncheck for where the database comes from.
vulncheck:
	.ci/vulncheck

bench:
	$(GO) test -run '^$$' -bench EndToEnd -benchtime 20000x .

# bench-measure runs the multi-second measurements behind docs/benchmarks.md
# (webhook fan-out, publish to 10,000 subscribers, review latency), once
# each; they report their figures as benchmark metrics.
bench-measure:
	$(GO) test -run '^$$' -bench 'WebhookFanout|Publish10k|ReviewMeasure' -benchtime 1x -timeout 30m .

# bench-peers runs the throughput, paced and flood workloads on ratelane and
# its peers (River, asynq, BullMQ) and prints one table; see
# bench/peers/README.md. Needs PostgreSQL, Redis (db 9 is flushed) and, for
# BullMQ, `npm ci` in bench/peers/bullmq. Pass flags with PEERS_FLAGS, e.g.
# make bench-peers PEERS_FLAGS="--runs 3 --workloads paced".
bench-peers:
	cd bench/peers && $(GO) run . $(PEERS_FLAGS)

build:
	$(GO) build -o bin/ratelane ./cmd/ratelane

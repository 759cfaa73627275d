-- The jobs table again, with the same columns, rows (rowids kept) and
-- indexes, and the state rules of 0019 as one CHECK. SQLite evaluates
-- every CHECK that names a column a statement writes on every row
-- written: the five rules on the state (a chain of seven comparisons, then
-- four rules each comparing the state again as a value) were 29-40 VM steps
-- per row, on the insert, the lease and the finish of every job; the one
-- rule tests the state until it matches and then that state's columns
-- (docs/benchmarks.md, "Session 12 (s12h4)").
-- SQLite cannot change a CHECK in place, hence the copy.
CREATE TABLE jobs_rebuilt (
    id                  TEXT    PRIMARY KEY,
    kind                TEXT    NOT NULL,
    region              TEXT    NOT NULL,
    lane                TEXT    NOT NULL CHECK (lane IN ('interactive', 'batch')),
    tenant              TEXT    NOT NULL,
    limit_keys          TEXT    NOT NULL,
    cost                INTEGER NOT NULL CHECK (cost >= 1),
    priority            INTEGER NOT NULL,
    payload             BLOB,
    idempotency_key     TEXT    NOT NULL DEFAULT '',
    deadline            INTEGER,
    budget_congestion   INTEGER NOT NULL,
    budget_transient    INTEGER NOT NULL,
    budget_schema       INTEGER NOT NULL,
    parent_id           TEXT    NOT NULL DEFAULT '',
    depth               TEXT    NOT NULL DEFAULT '',
    group_id            INTEGER NOT NULL REFERENCES job_groups (id),
    state               TEXT    NOT NULL,
    reason              TEXT    NOT NULL DEFAULT '',
    eligible_at         INTEGER NOT NULL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    attempts_congestion INTEGER NOT NULL DEFAULT 0,
    attempts_transient  INTEGER NOT NULL DEFAULT 0,
    attempts_schema     INTEGER NOT NULL DEFAULT 0,
    lease_token         TEXT,
    lease_expires_at    INTEGER,
    result              BLOB,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    history             TEXT,
    publish_claim       TEXT,
    publish_claim_until INTEGER,
    -- The state rules of 0019 as one rule: a known state; a lease token
    -- and an expiry exactly while running; a reason exactly when
    -- terminal; finished_at exactly when published or terminal. Spelled
    -- with AND and OR at the top, which SQLite codes as jumps (one step
    -- per term tested), the running state first and then the states a job
    -- is written in most (a CASE's THEN values cost three steps per term).
    CHECK (
        state = 'running' AND lease_token IS NOT NULL AND lease_expires_at IS NOT NULL AND reason = '' AND finished_at IS NULL
        OR lease_token IS NULL AND lease_expires_at IS NULL AND (
            state = 'published' AND reason = '' AND finished_at IS NOT NULL
            OR (state = 'waiting' OR state = 'validated' OR state = 'retry_scheduled' OR state = 'accepted')
                AND reason = '' AND finished_at IS NULL
            OR state = 'terminal' AND reason <> '' AND finished_at IS NOT NULL))
);
INSERT INTO jobs_rebuilt (rowid, id, kind, region, lane, tenant, limit_keys, cost, priority, payload, idempotency_key, deadline,
    budget_congestion, budget_transient, budget_schema, parent_id, depth, group_id, state, reason,
    eligible_at, attempt, attempts_congestion, attempts_transient, attempts_schema, lease_token,
    lease_expires_at, result, created_at, updated_at, finished_at, history, publish_claim,
    publish_claim_until)
SELECT rowid, id, kind, region, lane, tenant, limit_keys, cost, priority, payload, idempotency_key, deadline,
    budget_congestion, budget_transient, budget_schema, parent_id, depth, group_id, state, reason,
    eligible_at, attempt, attempts_congestion, attempts_transient, attempts_schema, lease_token,
    lease_expires_at, result, created_at, updated_at, finished_at, history, publish_claim,
    publish_claim_until
FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_rebuilt RENAME TO jobs;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX jobs_group_head ON jobs (group_id, priority DESC, eligible_at, id) WHERE state = 'waiting';
CREATE INDEX jobs_lane_ready ON jobs (lane, eligible_at) WHERE state = 'waiting';
CREATE INDEX jobs_scheduled ON jobs (eligible_at) WHERE state = 'retry_scheduled';
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_deadline ON jobs (deadline) WHERE deadline IS NOT NULL AND (state = 'accepted' OR state = 'waiting' OR state = 'retry_scheduled');
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_tenant ON jobs (tenant, id);
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id <> '';
CREATE INDEX jobs_group_scheduled ON jobs (group_id, eligible_at) WHERE state = 'retry_scheduled';
CREATE INDEX jobs_accepted_kind ON jobs (kind, id) WHERE state = 'accepted';
CREATE INDEX jobs_validated_kind ON jobs (kind, id) WHERE state = 'validated';
CREATE INDEX jobs_group_id ON jobs (group_id, id);

-- Back to 0019's rules (one CHECK per rule), same columns, rows and indexes.
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
    state               TEXT    NOT NULL CHECK (state = 'accepted' OR state = 'waiting' OR state = 'running' OR state = 'retry_scheduled'
                                    OR state = 'validated' OR state = 'published' OR state = 'terminal'),
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
    -- running <=> a lease with an expiry: no lease without expiry, and no
    -- stale lease token on a job that is not running.
    CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK ((state = 'running') OR (lease_token IS NULL AND lease_expires_at IS NULL)),
    -- a terminal job always says why; no other state carries a reason.
    CHECK ((state = 'terminal') = (reason <> '')),
    -- finished_at is set exactly when the job is final.
    CHECK ((state IN ('published', 'terminal')) = (finished_at IS NOT NULL))
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

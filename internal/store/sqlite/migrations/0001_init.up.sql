-- ratelane schema, SQLite. Times are Unix nanoseconds (INTEGER); a zero
-- means "never" where a column is NOT NULL.

CREATE TABLE limit_keys (
    name          TEXT PRIMARY KEY,
    rate          REAL    NOT NULL CHECK (rate >= 0),
    burst         REAL    NOT NULL CHECK (burst >= 0),
    concurrency   INTEGER NOT NULL CHECK (concurrency >= 0),
    adaptive      INTEGER NOT NULL CHECK (adaptive IN (0, 1)),
    min_rate      REAL    NOT NULL CHECK (min_rate >= 0),
    learned_rate  REAL    NOT NULL CHECK (learned_rate >= 0),
    tat           INTEGER NOT NULL DEFAULT 0,
    paused_until  INTEGER NOT NULL DEFAULT 0,
    in_flight     INTEGER NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    last_decrease INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- A group is the set of jobs sharing lane, tenant, kind and limit keys.
-- ready_at is a lower bound of the earliest eligible_at of its waiting jobs
-- (NULL: none); blocked_until is when its keys may admit again.
CREATE TABLE job_groups (
    id            INTEGER PRIMARY KEY,
    lane          TEXT    NOT NULL CHECK (lane IN ('interactive', 'batch')),
    tenant        TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    keys          TEXT    NOT NULL,
    ready_at      INTEGER,
    blocked_until INTEGER NOT NULL DEFAULT 0,
    served_seq    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (lane, tenant, kind, keys)
);
CREATE INDEX job_groups_round ON job_groups (lane, served_seq) WHERE ready_at IS NOT NULL;

CREATE TABLE jobs (
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
    state               TEXT    NOT NULL CHECK (state IN ('accepted', 'waiting', 'running', 'retry_scheduled', 'validated', 'published', 'terminal')),
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
    -- running <=> a lease with an expiry: no lease without expiry, and no
    -- stale lease token on a job that is not running.
    CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK ((state = 'running') OR (lease_token IS NULL AND lease_expires_at IS NULL)),
    -- a terminal job always says why; no other state carries a reason.
    CHECK ((state = 'terminal') = (reason <> '')),
    -- finished_at is set exactly when the job is final.
    CHECK ((state IN ('published', 'terminal')) = (finished_at IS NOT NULL))
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX jobs_group_head ON jobs (group_id, priority DESC, eligible_at, id) WHERE state = 'waiting';
CREATE INDEX jobs_lane_ready ON jobs (lane, eligible_at) WHERE state = 'waiting';
CREATE INDEX jobs_scheduled ON jobs (eligible_at) WHERE state = 'retry_scheduled';
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_deadline ON jobs (deadline) WHERE deadline IS NOT NULL AND state IN ('accepted', 'waiting', 'retry_scheduled');
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_tenant ON jobs (tenant, id);
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id <> '';

-- The attempt history: append-only, never payload.
CREATE TABLE job_attempts (
    job_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    record TEXT    NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

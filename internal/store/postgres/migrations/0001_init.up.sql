-- ratelane schema, PostgreSQL. Every table lives in the store's schema (one
-- schema or database per region); the driver sets search_path, so no name
-- here is schema-qualified.
--
-- Times are Unix nanoseconds (bigint), as in the SQLite driver, not
-- timestamptz: timestamptz keeps microseconds only, and the Go code compares
-- times at nanosecond precision (a token bucket's TAT moves by 1/rate
-- seconds per start; truncating it would let a bucket admit slightly early).
-- A zero means "never" where a column is NOT NULL; NULL means "none" where
-- the column is nullable. Only the informational updated_at of limit_keys
-- uses the database clock; no decision ever reads it.

-- The region this schema holds, written by the first Migrate and checked by
-- every Open and Migrate after it: wiring a region's worker to another
-- region's store fails at start-up.
CREATE TABLE store_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE limit_keys (
    name          text             PRIMARY KEY,
    rate          double precision NOT NULL CHECK (rate >= 0),
    burst         double precision NOT NULL CHECK (burst >= 0),
    concurrency   integer          NOT NULL CHECK (concurrency >= 0),
    adaptive      boolean          NOT NULL,
    min_rate      double precision NOT NULL CHECK (min_rate >= 0),
    learned_rate  double precision NOT NULL CHECK (learned_rate >= 0),
    tat           bigint           NOT NULL DEFAULT 0,
    paused_until  bigint           NOT NULL DEFAULT 0,
    in_flight     integer          NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    last_decrease bigint           NOT NULL DEFAULT 0,
    updated_at    timestamptz      NOT NULL DEFAULT now()
);

-- A group is the set of jobs sharing lane, tenant, kind and limit keys (the
-- keys sorted, so that the order a job names them in does not matter).
-- ready_at is a lower bound of the earliest eligible_at of its waiting and
-- scheduled jobs (NULL: none); blocked_until is when its keys may admit
-- again; served_seq orders the round-robin (a new group is served first).
CREATE TABLE job_groups (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lane          text   NOT NULL CHECK (lane IN ('interactive', 'batch')),
    tenant        text   NOT NULL,
    kind          text   NOT NULL,
    keys          text[] NOT NULL CHECK (cardinality(keys) BETWEEN 1 AND 4),
    ready_at      bigint,
    blocked_until bigint NOT NULL DEFAULT 0,
    served_seq    bigint NOT NULL DEFAULT 0,
    UNIQUE (lane, tenant, kind, keys)
);
CREATE INDEX job_groups_round ON job_groups (lane, served_seq) WHERE ready_at IS NOT NULL;
CREATE INDEX job_groups_keys ON job_groups USING gin (keys);

-- served_seq comes from a sequence, so every node draws from one global round.
CREATE SEQUENCE job_groups_served_seq AS bigint;

CREATE TABLE jobs (
    id                  text    PRIMARY KEY,
    kind                text    NOT NULL,
    region              text    NOT NULL,
    lane                text    NOT NULL CHECK (lane IN ('interactive', 'batch')),
    tenant              text    NOT NULL,
    limit_keys          text[]  NOT NULL CHECK (cardinality(limit_keys) BETWEEN 1 AND 4),
    cost                bigint  NOT NULL CHECK (cost >= 1),
    priority            integer NOT NULL CHECK (priority BETWEEN -100 AND 100),
    -- payload and result are the caller's JSON bytes, kept byte for byte
    -- (jsonb would re-format them).
    payload             bytea,
    idempotency_key     text    NOT NULL DEFAULT '',
    deadline            bigint,
    budget_congestion   integer NOT NULL,
    budget_transient    integer NOT NULL,
    budget_schema       integer NOT NULL,
    parent_id           text    NOT NULL DEFAULT '',
    depth               text    NOT NULL DEFAULT '',
    group_id            bigint  NOT NULL REFERENCES job_groups (id),
    state               text    NOT NULL CHECK (state IN ('accepted', 'waiting', 'running', 'retry_scheduled', 'validated', 'published', 'terminal')),
    reason              text    NOT NULL DEFAULT '',
    eligible_at         bigint  NOT NULL,
    attempt             integer NOT NULL DEFAULT 0,
    attempts_congestion integer NOT NULL DEFAULT 0,
    attempts_transient  integer NOT NULL DEFAULT 0,
    attempts_schema     integer NOT NULL DEFAULT 0,
    lease_token         text,
    lease_expires_at    bigint,
    result              bytea,
    created_at          bigint  NOT NULL,
    updated_at          bigint  NOT NULL,
    finished_at         bigint,
    -- running <=> a lease with an expiry: no lease without expiry, and no
    -- stale lease token on a job that is not running.
    CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_no_stale_lease CHECK (state = 'running' OR (lease_token IS NULL AND lease_expires_at IS NULL)),
    -- a terminal job always says why; no other state carries a reason.
    CONSTRAINT jobs_reason CHECK ((state = 'terminal') = (reason <> '')),
    -- finished_at is set exactly when the job is final.
    CONSTRAINT jobs_finished CHECK ((state IN ('published', 'terminal')) = (finished_at IS NOT NULL))
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX jobs_group_head ON jobs (group_id, priority DESC, eligible_at, id) WHERE state = 'waiting';
CREATE INDEX jobs_lane_ready ON jobs (lane, eligible_at) WHERE state = 'waiting';
CREATE INDEX jobs_scheduled ON jobs (eligible_at) WHERE state = 'retry_scheduled';
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_deadline ON jobs (deadline) WHERE deadline IS NOT NULL AND state IN ('accepted', 'waiting', 'retry_scheduled');
CREATE INDEX jobs_finished_at ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_tenant ON jobs (tenant, id);
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id <> '';
-- Backlog sums the cost of the jobs waiting on a key.
CREATE INDEX jobs_backlog ON jobs USING gin (limit_keys) WHERE state IN ('waiting', 'retry_scheduled');

-- The attempt history: append-only, never payload. json rather than jsonb
-- keeps any error text as written (jsonb refuses \u0000).
CREATE TABLE job_attempts (
    job_id text    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq    integer NOT NULL,
    record json    NOT NULL,
    PRIMARY KEY (job_id, seq)
);

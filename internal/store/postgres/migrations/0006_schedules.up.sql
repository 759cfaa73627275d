-- Periodic producers: a schedule enqueues its job template once per tick.
-- next_at is the earliest tick not yet claimed; a producer claims a tick by
-- moving it, guarded on the value it read, in the transaction that inserts
-- the tick's job, so of many nodes exactly one enqueues each tick.
CREATE TABLE schedules (
    id           text    PRIMARY KEY,
    tenant       text    NOT NULL,
    region       text    NOT NULL,
    name         text    NOT NULL,
    cron         text    NOT NULL DEFAULT '',
    every_ns     bigint  NOT NULL DEFAULT 0 CHECK (every_ns >= 0),
    anchor       bigint  NOT NULL DEFAULT 0,
    timezone     text    NOT NULL DEFAULT 'UTC',
    missed       text    NOT NULL CHECK (missed IN ('skip', 'catch_up')),
    catch_up_max bigint  NOT NULL DEFAULT 0 CHECK (catch_up_max >= 0),
    max_late_ns  bigint  NOT NULL DEFAULT 0 CHECK (max_late_ns >= 0),
    template     bytea   NOT NULL,
    kind         text    NOT NULL,
    paused       boolean NOT NULL DEFAULT false,
    next_at      bigint  NOT NULL,
    last_tick_at bigint ,
    last_job_id  text    NOT NULL DEFAULT '',
    produced     bigint  NOT NULL DEFAULT 0,
    skipped      bigint  NOT NULL DEFAULT 0,
    version      bigint  NOT NULL DEFAULT 1,
    created_at   bigint  NOT NULL,
    updated_at   bigint  NOT NULL,
    -- exactly one of a cron expression and a fixed interval
    CHECK ((cron = '') <> (every_ns = 0)),
    UNIQUE (tenant, name)
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;

-- The ledger of claimed ticks: which job each tick produced (the job view
-- shows it), and a second guard against enqueueing a tick twice.
CREATE TABLE schedule_ticks (
    schedule_id text    NOT NULL,
    tick_at     bigint  NOT NULL,
    job_id      text    NOT NULL,
    claimed_at  bigint  NOT NULL,
    PRIMARY KEY (schedule_id, tick_at)
);
CREATE INDEX schedule_ticks_job ON schedule_ticks (job_id);

-- Periodic producers: a schedule enqueues its job template once per tick.
-- next_at is the earliest tick not yet claimed; a producer claims a tick by
-- moving it, guarded on the value it read, in the transaction that inserts
-- the tick's job, so of many nodes exactly one enqueues each tick.
CREATE TABLE schedules (
    id           TEXT    PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    region       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    cron         TEXT    NOT NULL DEFAULT '',
    every_ns     INTEGER NOT NULL DEFAULT 0 CHECK (every_ns >= 0),
    anchor       INTEGER NOT NULL DEFAULT 0,
    timezone     TEXT    NOT NULL DEFAULT 'UTC',
    missed       TEXT    NOT NULL CHECK (missed IN ('skip', 'catch_up')),
    catch_up_max INTEGER NOT NULL DEFAULT 0 CHECK (catch_up_max >= 0),
    max_late_ns  INTEGER NOT NULL DEFAULT 0 CHECK (max_late_ns >= 0),
    template     BLOB    NOT NULL,
    kind         TEXT    NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    next_at      INTEGER NOT NULL,
    last_tick_at INTEGER,
    last_job_id  TEXT    NOT NULL DEFAULT '',
    produced     INTEGER NOT NULL DEFAULT 0,
    skipped      INTEGER NOT NULL DEFAULT 0,
    version      INTEGER NOT NULL DEFAULT 1,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    -- exactly one of a cron expression and a fixed interval
    CHECK ((cron = '') <> (every_ns = 0)),
    UNIQUE (tenant, name)
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE paused = 0;

-- The ledger of claimed ticks: which job each tick produced (the job view
-- shows it), and a second guard against enqueueing a tick twice.
CREATE TABLE schedule_ticks (
    schedule_id TEXT    NOT NULL,
    tick_at     INTEGER NOT NULL,
    job_id      TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, tick_at)
) WITHOUT ROWID;
CREATE INDEX schedule_ticks_job ON schedule_ticks (job_id);

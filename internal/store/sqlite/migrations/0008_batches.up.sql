-- The batch lane: a batch is a manifest of many items sent to a provider's
-- batch API in chunks (one provider batch each). Items are joined to their
-- results on custom_id; every item write is guarded on the state (and
-- chunk) it was read in, so a result delivered twice changes nothing.
CREATE TABLE batches (
    id           TEXT    PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    region       TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('running', 'canceling', 'done')),
    deadline     INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    summary      BLOB    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX batches_tenant ON batches (tenant, id);

CREATE TABLE batch_items (
    batch_id    TEXT    NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    custom_id   TEXT    NOT NULL,
    job_id      TEXT    NOT NULL,
    object_id   TEXT    NOT NULL,
    idx         INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'submitted', 'succeeded', 'failed', 'canceled')),
    attempts    INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    chunk_key   TEXT    NOT NULL DEFAULT '',
    disposition TEXT    NOT NULL DEFAULT '',
    reason      TEXT    NOT NULL DEFAULT '',
    result      BLOB,
    updated_at  INTEGER NOT NULL,
    -- an item in a chunk names it; a final item without an answer says why
    CHECK (state <> 'submitted' OR chunk_key <> ''),
    CHECK (state NOT IN ('failed', 'canceled') OR reason <> ''),
    CHECK ((state = 'succeeded') = (result IS NOT NULL)),
    PRIMARY KEY (batch_id, custom_id)
) WITHOUT ROWID;
CREATE INDEX batch_items_job ON batch_items (job_id);
CREATE INDEX batch_items_state ON batch_items (batch_id, state);

CREATE TABLE batch_chunks (
    chunk_key  TEXT    PRIMARY KEY,
    batch_id   TEXT    NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    state      TEXT    NOT NULL,
    record     BLOB    NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX batch_chunks_batch ON batch_chunks (batch_id, chunk_key);

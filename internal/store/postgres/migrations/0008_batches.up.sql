-- The batch lane: a batch is a manifest of many items sent to a provider's
-- batch API in chunks (one provider batch each). Items are joined to their
-- results on custom_id; every item write is guarded on the state (and
-- chunk) it was read in, so a result delivered twice changes nothing.
CREATE TABLE batches (
    id           text    PRIMARY KEY,
    tenant       text    NOT NULL,
    region       text    NOT NULL,
    provider     text    NOT NULL,
    state        text    NOT NULL CHECK (state IN ('running', 'canceling', 'done')),
    deadline     bigint  NOT NULL,
    max_attempts bigint  NOT NULL CHECK (max_attempts >= 1),
    summary      bytea   NOT NULL,
    created_at   bigint  NOT NULL,
    updated_at   bigint  NOT NULL
);
CREATE INDEX batches_tenant ON batches (tenant, id);

CREATE TABLE batch_items (
    batch_id    text    NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    custom_id   text    NOT NULL,
    job_id      text    NOT NULL,
    object_id   text    NOT NULL,
    idx         bigint  NOT NULL,
    state       text    NOT NULL CHECK (state IN ('pending', 'submitted', 'succeeded', 'failed', 'canceled')),
    attempts    bigint  NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    chunk_key   text    NOT NULL DEFAULT '',
    disposition text    NOT NULL DEFAULT '',
    reason      text    NOT NULL DEFAULT '',
    result      bytea,
    updated_at  bigint  NOT NULL,
    -- an item in a chunk names it; a final item without an answer says why
    CHECK (state <> 'submitted' OR chunk_key <> ''),
    CHECK (state NOT IN ('failed', 'canceled') OR reason <> ''),
    CHECK ((state = 'succeeded') = (result IS NOT NULL)),
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX batch_items_job ON batch_items (job_id);
CREATE INDEX batch_items_state ON batch_items (batch_id, state);

CREATE TABLE batch_chunks (
    chunk_key  text    PRIMARY KEY,
    batch_id   text    NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    state      text    NOT NULL,
    record     bytea   NOT NULL,
    updated_at bigint  NOT NULL
);
CREATE INDEX batch_chunks_batch ON batch_chunks (batch_id, chunk_key);

-- Small documents of the region: webhook subscribers, review diffs.
CREATE TABLE objects (
    kind       text   NOT NULL,
    id         text   NOT NULL,
    body       bytea  NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (kind, id)
);

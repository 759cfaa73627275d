-- Small documents of the region: webhook subscribers, review diffs.
CREATE TABLE objects (
    kind       TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;

CREATE TABLE job_attempts (
    job_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    record TEXT    NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO job_attempts (job_id, seq, record)
    SELECT jobs.id, h.key + 1, h.value FROM jobs, json_each(jobs.history) AS h WHERE jobs.history IS NOT NULL;
ALTER TABLE jobs DROP COLUMN history;

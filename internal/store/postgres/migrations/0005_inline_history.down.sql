CREATE TABLE job_attempts (
    job_id text    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq    integer NOT NULL,
    record json    NOT NULL,
    PRIMARY KEY (job_id, seq)
);
INSERT INTO job_attempts (job_id, seq, record)
    SELECT jobs.id, h.n, h.rec FROM jobs, json_array_elements(jobs.history::json) WITH ORDINALITY AS h(rec, n)
    WHERE jobs.history IS NOT NULL;
ALTER TABLE jobs DROP COLUMN history;

-- The attempt history moves into the job's row: one JSON array kept as
-- text (NULL: no record yet). Every transition already writes a new row
-- version; a separate job_attempts row cost one more heap tuple, one more
-- index entry and a max(seq) lookup per finished attempt, and one more
-- cascaded delete per pruned job (issue 13). Text rather than jsonb keeps
-- any error text as written (jsonb refuses \u0000) and appends without
-- parsing.
ALTER TABLE jobs ADD COLUMN history text;
UPDATE jobs SET history = h.arr
    FROM (SELECT job_id, '[' || string_agg(record::text, ',' ORDER BY seq) || ']' AS arr
          FROM job_attempts GROUP BY job_id) AS h
    WHERE jobs.id = h.job_id;
DROP TABLE job_attempts;

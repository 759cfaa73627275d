-- The attempt history moves into the job's row as one JSON array (NULL: no
-- record yet). Every transition already rewrites the row; a separate
-- job_attempts row cost one more B-tree insert (and a max(seq) lookup) per
-- finished attempt, and one more delete per pruned job (issue 13).
ALTER TABLE jobs ADD COLUMN history TEXT;
UPDATE jobs SET history = (SELECT '[' || group_concat(record, ',') || ']'
    FROM (SELECT record FROM job_attempts WHERE job_id = jobs.id ORDER BY seq))
WHERE id IN (SELECT job_id FROM job_attempts);
DROP TABLE job_attempts;

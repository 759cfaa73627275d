DROP INDEX jobs_group_id;
CREATE INDEX jobs_group_id ON jobs (group_id, id);
DROP TABLE jobs_list_mark;
ALTER TABLE jobs DROP COLUMN listed;

DROP TRIGGER jobs_group_ids_delete;
CREATE INDEX jobs_group_id ON jobs (group_id, id);
DROP TABLE jobs_list_mark;
DROP TABLE job_group_ids;

DROP INDEX job_groups_keys;
CREATE INDEX job_groups_keys ON job_groups USING gin (keys) WITH (fastupdate = off);

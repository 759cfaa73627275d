DROP INDEX jobs_group_id;

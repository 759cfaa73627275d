DROP INDEX job_groups_seq;
DROP INDEX jobs_group_scheduled;

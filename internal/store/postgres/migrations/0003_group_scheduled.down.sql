DROP INDEX jobs_group_scheduled;

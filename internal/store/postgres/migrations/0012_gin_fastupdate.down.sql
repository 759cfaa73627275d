ALTER INDEX job_groups_keys RESET (fastupdate);

DROP INDEX jobs_final_group;

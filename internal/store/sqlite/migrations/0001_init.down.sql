DROP TABLE job_attempts;
DROP TABLE jobs;
DROP TABLE job_groups;
DROP TABLE limit_keys;

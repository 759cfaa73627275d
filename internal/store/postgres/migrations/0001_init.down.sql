DROP TABLE job_attempts;
DROP TABLE jobs;
DROP SEQUENCE job_groups_served_seq;
DROP TABLE job_groups;
DROP TABLE limit_keys;
DROP TABLE store_meta;

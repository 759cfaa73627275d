ALTER TABLE jobs ADD CONSTRAINT jobs_group_id_fkey FOREIGN KEY (group_id) REFERENCES job_groups (id);

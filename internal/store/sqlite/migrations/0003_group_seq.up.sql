-- served_seq is drawn as max(served_seq) + 1 on every lease; without its
-- own index that is a scan of every group.
CREATE INDEX job_groups_seq ON job_groups (served_seq);
-- An emptied group's next ready time is looked up per group among its
-- scheduled retries too.
CREATE INDEX jobs_group_scheduled ON jobs (group_id, eligible_at) WHERE state = 'retry_scheduled';

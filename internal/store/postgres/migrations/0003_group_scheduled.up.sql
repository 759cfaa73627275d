-- An emptied group's next ready time is looked up per group among its
-- scheduled retries too; without this index that is a scan of every retry.
CREATE INDEX jobs_group_scheduled ON jobs (group_id, eligible_at) WHERE state = 'retry_scheduled';

-- The nine CHECK constraints of 0001 again, under their old names.
ALTER TABLE jobs
    ADD CONSTRAINT jobs_lane_check CHECK (lane IN ('interactive', 'batch')),
    ADD CONSTRAINT jobs_limit_keys_check CHECK (cardinality(limit_keys) BETWEEN 1 AND 4),
    ADD CONSTRAINT jobs_cost_check CHECK (cost >= 1),
    ADD CONSTRAINT jobs_priority_check CHECK (priority BETWEEN -100 AND 100),
    ADD CONSTRAINT jobs_state_check CHECK (state IN ('accepted', 'waiting', 'running', 'retry_scheduled', 'validated', 'published', 'terminal')),
    ADD CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    ADD CONSTRAINT jobs_no_stale_lease CHECK (state = 'running' OR (lease_token IS NULL AND lease_expires_at IS NULL)),
    ADD CONSTRAINT jobs_reason CHECK ((state = 'terminal') = (reason <> '')),
    ADD CONSTRAINT jobs_finished CHECK ((state IN ('published', 'terminal')) = (finished_at IS NOT NULL)),
    DROP CONSTRAINT jobs_valid;

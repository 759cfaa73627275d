DROP INDEX jobs_interactive_ready;
CREATE INDEX jobs_lane_ready ON jobs (lane, eligible_at) WHERE state = 'waiting';

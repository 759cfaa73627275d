-- The engine's sweeps list one kind's jobs in one state, page by page:
-- accepted parents whose parts may all be done (engine parts.go) and
-- validated jobs not yet published (engine publish.go). With no index on
-- kind and state, each sweep walked the primary key over the whole table,
-- published and terminal rows included, and in the usual case (nothing to
-- find) to its end. Partial on the state, these hold only the jobs in it,
-- a few in steady state, and a job gets an entry only while it is in that
-- state: a webhook delivery (running -> published) never writes one.
-- store.ListQuery writes the state as a literal so the planner can see
-- that the index applies.
CREATE INDEX jobs_accepted_kind ON jobs (kind, id) WHERE state = 'accepted';
CREATE INDEX jobs_validated_kind ON jobs (kind, id) WHERE state = 'validated';

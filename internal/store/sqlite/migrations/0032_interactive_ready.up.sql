-- jobs_lane_ready (lane, eligible_at) over every waiting job served one
-- read: the oldest ready job of a lane (the interactive lane's age in every
-- lease, both lanes' in Stats and the predictor). It cost an entry at the
-- insert and another at the lease of every job, and its predicate tested
-- on both row images of every finish: 2 of the 10 index entries a job
-- wrote, ~5 % of SQLite's bytecode steps per job (docs/benchmarks.md,
-- "Session 16 (s16h4)" and "Session 18 (s18h1)").
--
-- The interactive lane keeps an index, now partial on its lane: its age is
-- read on every lease and must not depend on how many groups it has. A
-- batch job writes no entry in it. The batch lane's oldest ready job is
-- found through jobs_group_head instead, one seek per group and priority
-- (oldestWaitingSQL in lease.go), read only by Stats and the predictor.
DROP INDEX jobs_lane_ready;
CREATE INDEX jobs_interactive_ready ON jobs (eligible_at) WHERE state = 'waiting' AND lane = 'interactive';

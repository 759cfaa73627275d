-- job_groups_keys (GIN on a group's limit keys) only serves UpsertLimit's
-- unblocking of the groups of a key it reconfigures, which looks only at
-- groups blocked until some time (blocked_until > 0). Every new version of
-- a group row got an entry all the same: a lease touches every group it
-- serves (TouchGroups draws a new served_seq, an indexed column, so the
-- update is not HOT), and a GIN insert is the costliest of the four index
-- entries a touch writes. Partial on blocked_until > 0, a touch of a group
-- that is not blocked (every group of unpaced keys, and any group with a
-- token left) writes none. Measured with pg_walinspect
-- (BenchmarkWorkPerJobConcurrent: two lessees of 16-job leases and two
-- finishers over 16 groups, one touch per job): see docs/benchmarks.md,
-- Session 9 (s9h5).
DROP INDEX job_groups_keys;
CREATE INDEX job_groups_keys ON job_groups USING gin (keys) WITH (fastupdate = off) WHERE blocked_until > 0;

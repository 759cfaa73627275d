-- Job ids and tenants compare byte by byte (COLLATE "C") rather than
-- under the database's default collation. They are compared in the jobs
-- table's busiest indexes: every lease and finish writes a new row
-- version, whose jobs_pkey entry (and, on a finish, its
-- jobs_tenant_unleased and jobs_final_group entries) is placed by
-- comparing ids, and every finish finds its jobs by id. Under a libc
-- locale each comparison went through strcoll (with its copies and
-- locale look-ups); under "C" it is a memcmp. In a throughput drain the
-- text comparisons were ~4 % of the server's CPU (docs/benchmarks.md,
-- "Session 21 (s21h3)").
--
-- The order is unchanged on a database whose collation is C.UTF-8 (code
-- point order, which is UTF-8's byte order) or C; under another locale
-- (en_US.UTF-8, say) ids and tenants now sort by their bytes, as they do
-- on SQLite (BINARY) and in Go, and every page cursor (id < $after) is
-- read in that same order. Every column that holds a job id moves
-- together (jobs.parent_id, batch_items.job_id, schedule_ticks.job_id),
-- so that a join of a job id with another (the child check's
-- pj.parent_id = jobs.id, a batch item's bi.job_id = jobs.id) compares
-- under one collation and can still read the other column's index.
-- "C" is the only non-default collation in the schema, so no comparison
-- or UNION of two columns can meet two different ones.
--
-- The columns' type is unchanged (text): no table is rewritten, but each
-- index on these columns is rebuilt, under an ACCESS EXCLUSIVE lock.
ALTER TABLE jobs ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN tenant TYPE text COLLATE "C",
    ALTER COLUMN parent_id TYPE text COLLATE "C";
ALTER TABLE batch_items ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE schedule_ticks ALTER COLUMN job_id TYPE text COLLATE "C";

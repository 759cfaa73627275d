-- A tenant's jobs were listed (GET /v1/jobs with a tenant's key) through
-- jobs_tenant (tenant, id), an index over every state: a job's lease and
-- finish are not HOT updates (state is in the partial indexes'
-- predicates), so each row version wrote an entry in it, three per job
-- run once (its insert, its lease, its finish) and two more per retry.
-- This index holds the final jobs only, the bulk of the table, and a job
-- writes one entry in it, when it finishes, as jobs_final_group (0030);
-- the live ones are listed through the tenant's groups and their states'
-- partial indexes (store.ListTenantQuery). A job run once writes two
-- index entries fewer (its insert's and its lease's): in
-- BenchmarkEngineDrain 12.0 -> 10.0 btree leaf inserts per job (insert,
-- lease and finish) and 1,540 -> 1,405
-- WAL bytes per drained job (-9 %; docs/benchmarks.md, "Session 20
-- (s20h3)"). SQLite keeps jobs_tenant: it updates an index only when the
-- index's columns change.
CREATE INDEX jobs_final_tenant ON jobs (tenant, id) WHERE finished_at IS NOT NULL;
DROP INDEX jobs_tenant;

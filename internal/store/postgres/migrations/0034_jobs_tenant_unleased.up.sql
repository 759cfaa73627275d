-- A tenant's jobs were listed (GET /v1/jobs with a tenant's key) through
-- jobs_tenant (tenant, id), an index over every state: a job's lease and
-- finish are not HOT updates (state is in the partial indexes'
-- predicates), so each row version wrote an entry in it, three per job
-- run once (its insert, its lease, its finish). This one leaves the
-- running jobs out, so a lease, which moves a job out of its predicate,
-- writes no entry in it: one index entry fewer per lease. The running
-- jobs, as many as there are workers, are listed from jobs_leases
-- (store.ListTenantQuery). In BenchmarkEngineDrain the drain's WAL fell
-- 9 % per job (docs/benchmarks.md, "Session 20 (s20h3)"). SQLite keeps
-- jobs_tenant: it updates an index only when the index's columns change.
CREATE INDEX jobs_tenant_unleased ON jobs (tenant, id) WHERE state <> 'running';
DROP INDEX jobs_tenant;

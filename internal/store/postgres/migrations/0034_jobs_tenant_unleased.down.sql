CREATE INDEX jobs_tenant ON jobs (tenant, id);
DROP INDEX jobs_tenant_unleased;

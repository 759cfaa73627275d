-- jobs_group_id (group_id, id) took an entry in every insert, and an index
-- led by group_id puts each group's newest entry on its own leaf: a writer
-- commit of the single-request intake (64 clients, a job each, up to 16
-- groups a commit) dirtied a leaf per group it touched, where the indexes
-- led by an increasing id append to one (docs/benchmarks.md, "Session 23
-- (s23h1)" and "Session 24 (s24h3)"). A job inserted by a small write now
-- leaves its entry for later: listed = 0, and every few hundred such jobs
-- the writer sets listed = 1 on all of them in one statement, whose entries
-- are a few leaves per group. Until then the key listings find them past
-- jobs_list_mark: every job with listed = 0 has an id above the mark, so a
-- listing reads the index (listed = 1) and the short run of ids above the
-- mark. A large insert, and every job before this migration, is listed
-- at once. The lease and the finish change neither column: the drain
-- writes no entry, as before.
ALTER TABLE jobs ADD COLUMN listed INTEGER NOT NULL DEFAULT 1;
CREATE TABLE jobs_list_mark (id TEXT NOT NULL);
INSERT INTO jobs_list_mark (id) SELECT coalesce(max(id), '') FROM jobs;
DROP INDEX jobs_group_id;
CREATE INDEX jobs_group_id ON jobs (group_id, id) WHERE listed = 1;

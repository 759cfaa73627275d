-- jobs_group_id (group_id, id) took an entry in every insert, and an index
-- led by group_id puts each group's newest entry on its own leaf: a writer
-- commit of the single-request intake (64 clients, a job each, up to 16
-- groups a commit) dirtied a leaf per group it touched, where the indexes
-- led by an increasing id append to one (docs/benchmarks.md, "Session 23
-- (s23h1)" and "Session 24 (s24h3)"). Its entries now live in
-- job_group_ids, a table keyed (gid, jid) = (group_id, id), which the
-- insert does not write: every few hundred inserted jobs the writer copies
-- the new jobs' pairs into it in one statement, a few to a leaf per group
-- (listUnlisted in listed.go). Until then a key listing finds them past
-- jobs_list_mark: job_group_ids holds exactly the jobs whose id is at or
-- below the mark, so a listing reads it and the short run of ids above the
-- mark. The lease and the finish write neither: the drain pays nothing.
-- A job's group_id and id never change; its pair goes with its row
-- (the trigger). A migration that rebuilds jobs must create the trigger
-- again.
CREATE TABLE job_group_ids (
    gid INTEGER NOT NULL,
    jid TEXT    NOT NULL,
    PRIMARY KEY (gid, jid)
) WITHOUT ROWID;
INSERT INTO job_group_ids (gid, jid) SELECT group_id, id FROM jobs;
CREATE TABLE jobs_list_mark (id TEXT NOT NULL);
INSERT INTO jobs_list_mark (id) SELECT coalesce(max(id), '') FROM jobs;
DROP INDEX jobs_group_id;
CREATE TRIGGER jobs_group_ids_delete AFTER DELETE ON jobs BEGIN
    DELETE FROM job_group_ids WHERE gid = old.group_id AND jid = old.id;
END;

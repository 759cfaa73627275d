-- The nine CHECK constraints of jobs as one, with the same meaning.
-- PostgreSQL checks every CHECK of a table on every row an INSERT or
-- UPDATE writes, whichever columns it sets, and before that, once per
-- statement, it reads each constraint's stored node tree back from text
-- (stringToNode) and plans it (expression_planner, which also folded each
-- ARRAY[...] of an IN list into a constant, every time). In a throughput
-- drain that compilation was ~2.7 % of the server's CPU, more than
-- checking the rows (docs/benchmarks.md, "Session 21 (s21h3)" and
-- "Session 21 (s21r1)"). One constraint is read and prepared once per
-- statement instead of nine; the IN lists are written as array constants,
-- which are stored folded; the lease rule compares the state once where
-- two constraints compared it three times. Its stored text is 6,662 bytes
-- where the nine's were 8,487, and per statement it costs ~57 K
-- instructions fewer to read and prepare (290 K -> 233 K) and ~770 fewer
-- per row to check (4.0 K -> 3.3 K).
--
-- A conjunction fails exactly when one of its terms is false, which is
-- when one of the nine failed (a NULL term passes, as a NULL CHECK did),
-- so the rows it admits are the rows they admitted. The rules:
-- a known lane; one to four limit keys; a cost of at least 1; a priority
-- in [-100, 100]; a known state; a lease token exactly while running and
-- an expiry exactly with a token (together: both exactly while running,
-- which is what jobs_lease and jobs_no_stale_lease said); a reason exactly
-- when terminal; finished_at exactly when published or terminal. A
-- violation now names jobs_valid rather than the rule it broke; nothing
-- reads the name (the store has no error of its own for it: a violation
-- is a bug), as on SQLite, whose state rules are one CHECK since its
-- migration 0028.
--
-- Adding the constraint reads the table once, under the ACCESS EXCLUSIVE
-- lock that ALTER TABLE takes anyway.
ALTER TABLE jobs
    ADD CONSTRAINT jobs_valid CHECK (
        lane = ANY ('{interactive,batch}'::text[])
        AND cardinality(limit_keys) BETWEEN 1 AND 4
        AND cost >= 1
        AND priority BETWEEN -100 AND 100
        AND state = ANY ('{accepted,waiting,running,retry_scheduled,validated,published,terminal}'::text[])
        AND (state = 'running') = (lease_token IS NOT NULL)
        AND (lease_token IS NULL) = (lease_expires_at IS NULL)
        AND (state = 'terminal') = (reason <> '')
        AND (state = ANY ('{published,terminal}'::text[])) = (finished_at IS NOT NULL)),
    DROP CONSTRAINT jobs_lane_check,
    DROP CONSTRAINT jobs_limit_keys_check,
    DROP CONSTRAINT jobs_cost_check,
    DROP CONSTRAINT jobs_priority_check,
    DROP CONSTRAINT jobs_state_check,
    DROP CONSTRAINT jobs_lease,
    DROP CONSTRAINT jobs_no_stale_lease,
    DROP CONSTRAINT jobs_reason,
    DROP CONSTRAINT jobs_finished;

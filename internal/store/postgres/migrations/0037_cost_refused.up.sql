-- cost_refused fails the statement that calls it, and so the transaction
-- around it, with SQLSTATE RLC01 naming a limit key that can never admit
-- the cost of a job being inserted. An insert checks costs inside its own
-- pipelined transaction with it (store.WithCostCheck): the check then
-- needs no round trip of its own, and a refusal rolls back the keys,
-- groups and jobs the same pipeline sent after it. The caller reads the
-- refusal's wording from the configurations afterwards (store.CheckCosts),
-- so this message is for logs only.
CREATE FUNCTION cost_refused(key text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a job''s cost can never start on limit key %', key USING ERRCODE = 'RLC01';
END
$$;

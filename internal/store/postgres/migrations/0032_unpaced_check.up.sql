-- ratelane_unpaced raises RLPAC when unpaced is false and returns true
-- otherwise: the check of a finish sent with its COMMIT in one round trip
-- (finish.go, finishKeysOneTripSQL). That finish writes no key, which is
-- right only while every key of its jobs is unpaced; a paced one must
-- abort the transaction before the COMMIT that follows it in the
-- pipeline, and an error is the only way a statement can do that.
-- VOLATILE (the default), so that the planner calls it per row and never
-- folds it.
CREATE FUNCTION ratelane_unpaced(unpaced boolean) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	IF NOT unpaced THEN
		RAISE EXCEPTION 'ratelane: a paced key in a one-trip finish' USING ERRCODE = 'RLPAC';
	END IF;
	RETURN true;
END
$$;

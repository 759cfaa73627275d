-- A limit key's window shapes (its configuration) and their live state:
-- the start logs of its windows and of limit discovery, encoded by
-- admission.State.MarshalShapes (a few hundred bytes; NULL for a key that
-- is only a token bucket). The lease locks the row, so the windows are
-- checked atomically across nodes like the bucket.
ALTER TABLE limit_keys ADD COLUMN windows jsonb NOT NULL DEFAULT '[]';
ALTER TABLE limit_keys ADD COLUMN shapes bytea;

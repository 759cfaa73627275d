-- A limit key's window shapes (its configuration, JSON) and their live
-- state: the start logs of its windows and of limit discovery, encoded by
-- admission.State.MarshalShapes (a few hundred bytes; empty for a key that
-- is only a token bucket).
ALTER TABLE limit_keys ADD COLUMN windows TEXT NOT NULL DEFAULT '[]';
ALTER TABLE limit_keys ADD COLUMN shapes BLOB;

-- The fingerprint of the declaration (store.LimitFingerprint) last applied
-- to a key by DeclareLimit: a config file's limits or a review provider's
-- rpm/tpm, applied at every start. A start whose declaration is unchanged
-- leaves the key alone, so an operator's PUT /v1/limits lasts until the
-- declaration changes. NULL for keys never declared (or declared before
-- this migration: their next start applies the declaration once).
ALTER TABLE limit_keys ADD COLUMN declared TEXT;

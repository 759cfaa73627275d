-- A limit key that counts starts rather than cost (admission.Config.PerStart):
-- a requests-per-minute key named next to a tokens-per-minute key by one job.
ALTER TABLE limit_keys ADD COLUMN per_start boolean NOT NULL DEFAULT false;

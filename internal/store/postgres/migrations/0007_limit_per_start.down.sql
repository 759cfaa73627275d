ALTER TABLE limit_keys DROP COLUMN per_start;

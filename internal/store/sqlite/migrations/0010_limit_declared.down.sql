ALTER TABLE limit_keys DROP COLUMN declared;

ALTER TABLE limit_keys DROP COLUMN shapes;
ALTER TABLE limit_keys DROP COLUMN windows;

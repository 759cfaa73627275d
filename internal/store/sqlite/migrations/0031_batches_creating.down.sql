ALTER TABLE batches DROP COLUMN creating;

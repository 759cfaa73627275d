ALTER TABLE jobs ALTER COLUMN id TYPE text COLLATE "default",
    ALTER COLUMN tenant TYPE text COLLATE "default",
    ALTER COLUMN parent_id TYPE text COLLATE "default";
ALTER TABLE batch_items ALTER COLUMN job_id TYPE text COLLATE "default";
ALTER TABLE schedule_ticks ALTER COLUMN job_id TYPE text COLLATE "default";

-- A batch whose items go in through several writes (the single-writer
-- store's pieces: store.Batches.CreateBatch) is marked creating until the
-- write holding its last item commits: readers treat it as not there yet
-- (GET /v1/batches/{id} answers 404, listings skip it, its drivers wait),
-- and one left creating by a crash is removed by its drivers
-- (store.Batches.AbandonBatch). A store that writes a batch in one
-- transaction never commits a 1 here.
ALTER TABLE batches ADD COLUMN creating INTEGER NOT NULL DEFAULT 0;

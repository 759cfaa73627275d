DROP TABLE batch_chunks;
DROP TABLE batch_items;
DROP TABLE batches;

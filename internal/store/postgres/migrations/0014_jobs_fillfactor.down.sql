ALTER TABLE jobs RESET (fillfactor);

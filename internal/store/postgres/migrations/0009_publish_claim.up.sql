-- A validated job's publication claim (store.ClaimPublish): the token of the
-- caller running the kind's publisher and when its claim runs out, so that
-- concurrent callers do not both deliver. NULL when nobody holds it; cleared
-- by the publication itself.
ALTER TABLE jobs ADD COLUMN publish_claim text;
ALTER TABLE jobs ADD COLUMN publish_claim_until bigint;

ALTER TABLE jobs DROP COLUMN publish_claim_until;
ALTER TABLE jobs DROP COLUMN publish_claim;

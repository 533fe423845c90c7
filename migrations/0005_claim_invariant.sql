-- A claimed row is exactly a 'processing' row. The settle statements rely on it: they find their rows
-- by primary key and `claimed_by` alone, without a status condition that would let the planner scan
-- the processing index (which holds a dead entry for every event since the last vacuum) instead.
-- NOT VALID then VALIDATE: the check of existing rows does not block writers.
ALTER TABLE outbox ADD CONSTRAINT outbox_claim_check
  CHECK ((status = 'processing') = (claimed_by IS NOT NULL)) NOT VALID;
ALTER TABLE outbox VALIDATE CONSTRAINT outbox_claim_check;

-- A claimed row is exactly a 'processing' row. The settle statements rely on it: they find their rows
-- by primary key and `claimed_by` alone, without a status condition that would let the planner scan
-- the processing index (which holds a dead entry for every event since the last vacuum) instead.
-- NOT VALID, committed, then VALIDATE in a transaction of its own: adding the constraint holds an
-- ACCESS EXCLUSIVE lock only for a moment, and the check of existing rows (SHARE UPDATE EXCLUSIVE)
-- does not block writers. The first transaction may run again (when the second did not commit), so
-- it tolerates the constraint being there already.
DO $$
BEGIN
  ALTER TABLE outbox ADD CONSTRAINT outbox_claim_check
    CHECK ((status = 'processing') = (claimed_by IS NOT NULL)) NOT VALID;
EXCEPTION WHEN duplicate_object THEN
  NULL;
END
$$;
-- tidings:commit
ALTER TABLE outbox VALIDATE CONSTRAINT outbox_claim_check;

-- Per-key ordered relaying and the crash-loop guard.

-- Publish attempts that finished (settled or released); `attempts` counts the ones that started.
-- A lease that expires with attempts > finished_attempts means the relay died mid-publish.
ALTER TABLE outbox ADD COLUMN finished_attempts integer NOT NULL DEFAULT 0;

-- 'suspect': its relay died while publishing it; it is retried alone, and failed after too many crashes.
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
  CHECK (status IN ('pending', 'processing', 'published', 'failed', 'suspect'));

-- Per-key order is (tx_id, seq): the writing transaction first, then append order within it. Only
-- unsettled rows are indexed, so finding a key's head stays cheap however much history remains.
CREATE INDEX outbox_key_order_idx ON outbox (ordering_key, tx_id, seq)
  WHERE status IN ('pending', 'processing', 'suspect');

CREATE INDEX outbox_suspect_idx ON outbox (seq) WHERE status = 'suspect';

-- Log mode: a partitioned, append-only event log read by groups that keep a cursor per partition.
-- Appends write one row; relays and consumers write one cursor row per partition and batch, never
-- per event. Failed events go to the outbox table (status 'failed'), so the admin views, retry and
-- discard work for both modes.

CREATE TABLE log (
  partition       integer     NOT NULL CHECK (partition >= 0),  -- FNV-1a of the ordering key mod the partition count
  tx_id           xid8        NOT NULL DEFAULT pg_current_xact_id(), -- the writing transaction: read order, then seq
  seq             bigint      GENERATED ALWAYS AS IDENTITY,
  id              uuid        NOT NULL,                          -- the event id (UUIDv7); not unique: a retried event is appended again
  aggregate_type  text        NOT NULL,
  aggregate_id    text        NOT NULL,
  ordering_key    text        NOT NULL,
  event_type      text        NOT NULL,
  event_version   integer     NOT NULL CHECK (event_version >= 1),
  payload         json        NOT NULL,
  headers         json        NOT NULL DEFAULT '{}'::json,
  occurred_at     timestamptz NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  only_groups     text[],                                        -- a retried failed event: only these groups read it again
  -- Reads walk one partition from a cursor in (tx_id, seq) order; retention deletes from its start.
  PRIMARY KEY (partition, tx_id, seq)
);

-- The stream's shape, fixed at its first use: changing the partition count would move keys between
-- partitions and break their order.
CREATE TABLE log_stream (
  id          boolean PRIMARY KEY DEFAULT true CHECK (id),
  partitions  integer NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per group and partition: the cursor (everything up to it is done), the lease, and the
-- head's bookkeeping. Updated once per batch; no indexed column changes, so updates stay HOT.
CREATE TABLE log_cursor (
  group_name     text        NOT NULL,
  partition      integer     NOT NULL,
  tx_id          xid8        NOT NULL DEFAULT '0',
  seq            bigint      NOT NULL DEFAULT 0,
  owner          text,                                  -- the member holding the lease
  epoch          bigint      NOT NULL DEFAULT 0,        -- bumped at every change of owner: fences stale writers
  lease_until    timestamptz,
  inflight_tx    xid8,                                  -- end of the batch being worked on (set by the read)
  inflight_seq   bigint,
  suspect_tx     xid8,                                  -- end of a batch whose owner died working on it
  suspect_seq    bigint,
  crashes        integer     NOT NULL DEFAULT 0,        -- crashes counted against the head
  head_attempts  integer     NOT NULL DEFAULT 0,        -- failed attempts of the head
  retry_at       timestamptz,
  last_error     text,
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_name, partition)
) WITH (fillfactor = 50);

-- Members of each group, with a heartbeat: the live ones split the partitions.
CREATE TABLE log_member (
  group_name  text        NOT NULL,
  member      text        NOT NULL,
  expires_at  timestamptz NOT NULL,
  joined_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_name, member)
) WITH (fillfactor = 50);

-- The groups that failed a log event (NULL for per-row events): a retry appends it to the log
-- again for those groups only.
ALTER TABLE outbox ADD COLUMN log_groups text[];

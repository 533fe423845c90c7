-- Inbox: one row per (message, consumer) that handled it, for exactly-once effects; and the positions
-- of projections (the last version applied per aggregate), updated in the same transactions.

CREATE TABLE inbox (
  message_id         text        NOT NULL,                 -- the message id (the outbox's UUIDv7, or the broker's message id)
  consumer           text        NOT NULL,                 -- the consumer (or projection) name
  status             text        NOT NULL DEFAULT 'processing'
                                 CHECK (status IN ('processing', 'processed', 'failed')),
  attempts           integer     NOT NULL DEFAULT 0,       -- handling attempts started (own committed write, before the handler)
  finished_attempts  integer     NOT NULL DEFAULT 0,       -- attempts that committed, or failed and rolled back
  crashes            integer     NOT NULL DEFAULT 0,       -- unfinished attempts of process instances that are gone
  started_by         text,                               -- the process instance of the last start
  received_at        timestamptz NOT NULL DEFAULT now(),
  processed_at       timestamptz,
  last_error         text,                               -- the last failure, or why it was dead-lettered
  PRIMARY KEY (message_id, consumer)
);

-- Retention deletes by age.
CREATE INDEX inbox_received_at ON inbox (received_at);

CREATE TABLE projection_position (
  projection    text   NOT NULL,
  aggregate_id  text   NOT NULL,
  position      bigint NOT NULL DEFAULT 0,                 -- the last version applied
  PRIMARY KEY (projection, aggregate_id)
);

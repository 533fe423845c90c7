// Generated from migrations/*.sql by packages/postgres/scripts/compile-migrations.ts. Do not edit.
export interface Migration {
  readonly version: number
  readonly name: string
  /** The statements, in transactions that commit one after the other (usually one). */
  readonly transactions: ReadonlyArray<ReadonlyArray<string>>
}

export const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
    name: "outbox",
    transactions: [
      [
        "CREATE TABLE outbox (\n  id              uuid        PRIMARY KEY,           \n  seq             bigint      GENERATED ALWAYS AS IDENTITY,\n  tx_id           xid8        NOT NULL DEFAULT pg_current_xact_id(), \n  aggregate_type  text        NOT NULL,\n  aggregate_id    text        NOT NULL,\n  ordering_key    text        NOT NULL,\n  event_type      text        NOT NULL,\n  event_version   integer     NOT NULL CHECK (event_version >= 1),\n  payload         json        NOT NULL,           \n  headers         json        NOT NULL DEFAULT '{}'::json,\n  occurred_at     timestamptz NOT NULL,\n  status          text        NOT NULL DEFAULT 'pending'\n                              CHECK (status IN ('pending', 'processing', 'published', 'failed')),\n  attempts        integer     NOT NULL DEFAULT 0,\n  available_at    timestamptz NOT NULL DEFAULT now(),\n  claimed_until   timestamptz,\n  claimed_by      text,\n  last_error      text,\n  created_at      timestamptz NOT NULL DEFAULT now(),\n  published_at    timestamptz\n)",
        "CREATE INDEX outbox_pending_idx ON outbox (available_at, seq) WHERE status = 'pending'",
        "CREATE INDEX outbox_processing_idx ON outbox (claimed_until) WHERE status = 'processing'",
        "CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE status = 'published'",
        "CREATE INDEX outbox_failed_idx ON outbox (created_at) WHERE status = 'failed'"
      ]
    ]
  },
  {
    version: 2,
    name: "ordering_and_crash_guard",
    transactions: [
      [
        "ALTER TABLE outbox ADD COLUMN finished_attempts integer NOT NULL DEFAULT 0",
        "ALTER TABLE outbox DROP CONSTRAINT outbox_status_check",
        "ALTER TABLE outbox ADD CONSTRAINT outbox_status_check\n  CHECK (status IN ('pending', 'processing', 'published', 'failed', 'suspect'))",
        "CREATE INDEX outbox_key_order_idx ON outbox (ordering_key, tx_id, seq)\n  WHERE status IN ('pending', 'processing', 'suspect')",
        "CREATE INDEX outbox_suspect_idx ON outbox (seq) WHERE status = 'suspect'"
      ]
    ]
  },
  {
    version: 3,
    name: "saga",
    transactions: [
      [
        "CREATE TABLE saga (\n  id             uuid        PRIMARY KEY,            \n  type           text        NOT NULL,               \n  status         text        NOT NULL DEFAULT 'running'\n                             CHECK (status IN ('running', 'completed', 'compensating', 'compensated', 'failed')),\n  input          json        NOT NULL,               \n  current_step   integer     NOT NULL DEFAULT 0,     \n  version        integer     NOT NULL DEFAULT 0,     \n  deadline       timestamptz,                        \n  error          text,                               \n  claimed_by     text,                               \n  claimed_until  timestamptz,\n  created_at     timestamptz NOT NULL DEFAULT now(),\n  updated_at     timestamptz NOT NULL DEFAULT now()\n)",
        "CREATE TABLE saga_step (\n  saga_id                uuid        NOT NULL REFERENCES saga (id) ON DELETE CASCADE,\n  index                  integer     NOT NULL CHECK (index >= 0),\n  name                   text        NOT NULL,\n  status                 text        NOT NULL DEFAULT 'pending'\n                                     CHECK (status IN ('pending', 'completed', 'failed', 'compensated', 'compensation_failed')),\n  result                 json,                       \n  error                  text,\n  attempts               integer     NOT NULL DEFAULT 0,   \n  compensation_attempts  integer     NOT NULL DEFAULT 0,   \n  started_at             timestamptz,\n  finished_at            timestamptz,\n  PRIMARY KEY (saga_id, index)\n)",
        "CREATE INDEX saga_claim_expiry_idx ON saga (claimed_until)\n  WHERE status IN ('running', 'compensating') AND claimed_until IS NOT NULL",
        "CREATE INDEX saga_deadline_idx ON saga (deadline)\n  WHERE status IN ('running', 'compensating') AND claimed_until IS NULL AND deadline IS NOT NULL",
        "CREATE INDEX saga_stuck_idx ON saga (updated_at)\n  WHERE status IN ('running', 'compensating') AND claimed_until IS NULL AND deadline IS NULL",
        "CREATE INDEX saga_type_status_idx ON saga (type, status, created_at)"
      ]
    ]
  },
  {
    version: 4,
    name: "inbox",
    transactions: [
      [
        "CREATE TABLE inbox (\n  message_id         text        NOT NULL,                 \n  consumer           text        NOT NULL,                 \n  status             text        NOT NULL DEFAULT 'processing'\n                                 CHECK (status IN ('processing', 'processed', 'failed')),\n  attempts           integer     NOT NULL DEFAULT 0,       \n  finished_attempts  integer     NOT NULL DEFAULT 0,       \n  crashes            integer     NOT NULL DEFAULT 0,       \n  started_by         text,                               \n  received_at        timestamptz NOT NULL DEFAULT now(),\n  processed_at       timestamptz,\n  last_error         text,                               \n  PRIMARY KEY (message_id, consumer)\n)",
        "CREATE INDEX inbox_received_at ON inbox (received_at)",
        "CREATE TABLE projection_position (\n  projection    text   NOT NULL,\n  aggregate_id  text   NOT NULL,\n  position      bigint NOT NULL DEFAULT 0,                 \n  PRIMARY KEY (projection, aggregate_id)\n)"
      ]
    ]
  },
  {
    version: 5,
    name: "claim_invariant",
    transactions: [
      [
        "DO $$\nBEGIN\n  ALTER TABLE outbox ADD CONSTRAINT outbox_claim_check\n    CHECK ((status = 'processing') = (claimed_by IS NOT NULL)) NOT VALID;\nEXCEPTION WHEN duplicate_object THEN\n  NULL;\nEND\n$$"
      ],
      [
        "ALTER TABLE outbox VALIDATE CONSTRAINT outbox_claim_check"
      ]
    ]
  },
  {
    version: 6,
    name: "log",
    transactions: [
      [
        "CREATE TABLE log (\n  partition       integer     NOT NULL CHECK (partition >= 0),  \n  tx_id           xid8        NOT NULL DEFAULT pg_current_xact_id(), \n  seq             bigint      GENERATED ALWAYS AS IDENTITY,\n  id              uuid        NOT NULL,                          \n  aggregate_type  text        NOT NULL,\n  aggregate_id    text        NOT NULL,\n  ordering_key    text        NOT NULL,\n  event_type      text        NOT NULL,\n  event_version   integer     NOT NULL CHECK (event_version >= 1),\n  payload         json        NOT NULL,\n  headers         json        NOT NULL DEFAULT '{}'::json,\n  occurred_at     timestamptz NOT NULL,\n  created_at      timestamptz NOT NULL DEFAULT now(),\n  only_groups     text[],                                        \n  \n  PRIMARY KEY (partition, tx_id, seq)\n)",
        "CREATE TABLE log_stream (\n  id          boolean PRIMARY KEY DEFAULT true CHECK (id),\n  partitions  integer NOT NULL CHECK (partitions BETWEEN 1 AND 4096),\n  created_at  timestamptz NOT NULL DEFAULT now()\n)",
        "CREATE TABLE log_cursor (\n  group_name     text        NOT NULL,\n  partition      integer     NOT NULL,\n  tx_id          xid8        NOT NULL DEFAULT '0',\n  seq            bigint      NOT NULL DEFAULT 0,\n  owner          text,                                  \n  epoch          bigint      NOT NULL DEFAULT 0,        \n  lease_until    timestamptz,\n  inflight_tx    xid8,                                  \n  inflight_seq   bigint,\n  suspect_tx     xid8,                                  \n  suspect_seq    bigint,\n  crashes        integer     NOT NULL DEFAULT 0,        \n  head_attempts  integer     NOT NULL DEFAULT 0,        \n  retry_at       timestamptz,\n  last_error     text,\n  updated_at     timestamptz NOT NULL DEFAULT now(),\n  PRIMARY KEY (group_name, partition)\n) WITH (fillfactor = 50)",
        "CREATE TABLE log_member (\n  group_name  text        NOT NULL,\n  member      text        NOT NULL,\n  expires_at  timestamptz NOT NULL,\n  joined_at   timestamptz NOT NULL DEFAULT now(),\n  PRIMARY KEY (group_name, member)\n) WITH (fillfactor = 50)",
        "ALTER TABLE outbox ADD COLUMN log_groups text[]"
      ]
    ]
  }
]

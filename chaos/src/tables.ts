/**
 * The database side of the run. Tidings' own tables live in the `tidings` schema (migrated once by
 * the harness); the business tables in `chaos`:
 * - `orders`: one row per committed producer transaction, written in the same transaction as its
 *   event. The ground truth of what was committed: a transaction whose commit was in doubt (the
 *   connection died during COMMIT) counts exactly when its row is there.
 * - `rollbacks`: transactions that appended an event and then rolled back on purpose, recorded after
 *   the rollback (best effort: a producer killed in between leaves none, which only lowers the count).
 * - `effects`: one row per handler run that committed, written in the inbox transaction. No unique key:
 *   an effect that happened twice shows as two rows instead of a failed insert.
 * @module
 */

export const tidingsSchema = "tidings"
export const schema = "chaos"
export const orders = `${schema}.orders`
export const rollbacks = `${schema}.rollbacks`
export const effects = `${schema}.effects`
/** The prefix of every worker's `application_name`; the harness's own connections use another. */
export const workerApplicationPrefix = "chaos-worker:"
/** The inbox consumer name the handlers record under. */
export const inboxConsumer = "chaos-effects"

/** The business tables (run once by the harness, after the Tidings migrations). */
export const ddl: ReadonlyArray<string> = [
  `CREATE SCHEMA IF NOT EXISTS ${schema}`,
  `CREATE TABLE ${orders} (
    order_id     text        PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    producer     text        NOT NULL,
    seq          integer     NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE TABLE ${rollbacks} (
    order_id     text        NOT NULL,
    event_id     uuid        NOT NULL,
    producer     text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE TABLE ${effects} (
    message_id   text        NOT NULL,
    order_id     text        NOT NULL,
    consumer     text        NOT NULL,
    pid          integer     NOT NULL,
    attempt      integer     NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE INDEX effects_message_idx ON ${effects} (message_id)`,
  `CREATE INDEX effects_order_idx ON ${effects} (order_id)`
]

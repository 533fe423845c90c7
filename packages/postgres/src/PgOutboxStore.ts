/**
 * The outbox store on Postgres, written against effect/sql's `SqlClient`: `Outbox.append` joins the
 * app's `sql.withTransaction`, whatever driver provides the client (this package's `PgClient`, or
 * `@effect/sql-pg`). Every batch operation is one statement, with its rows passed as one JSON
 * parameter so that no driver-specific array binding is needed.
 * @module
 */
import { type InvalidConfig, NotInTransaction, StoreError } from "@tidings/core/Errors"
import type { Message } from "@tidings/core/Message"
import { OutboxStore, type Service } from "@tidings/core/OutboxStore"
import { Duration, Effect, Layer, Option } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import { validateSchema } from "./internal/identifier.ts"
import { mapSqlError } from "./internal/storeError.ts"

/** Options of the Postgres outbox store. */
export interface Options {
  /** Schema holding the tables (see `Migrator`); default `tidings`. */
  readonly schema?: string
  /**
   * Send a `NOTIFY` in each appending transaction so relays in other processes wake at once
   * (see `PgWakeup`). Relays in the same process are woken after commit without it. Default false.
   */
  readonly notify?: boolean
}

/** The `NOTIFY` channel of a schema's outbox. */
export const channel = (schema: string): string => `tidings_outbox_${schema}`

interface ClaimRow {
  readonly id: string
  readonly seq: string | number
  readonly event_type: string
  readonly event_version: number
  readonly aggregate_type: string
  readonly aggregate_id: string
  readonly ordering_key: string
  readonly payload: string
  readonly headers: string
  readonly occurred_at_ms: number | string
  readonly created_at_ms: number | string
  readonly attempts: number
  readonly last_error?: string | null
}

const toMessage = (row: ClaimRow): Message => ({
  id: row.id,
  type: row.event_type,
  version: Number(row.event_version),
  aggregateType: row.aggregate_type,
  aggregateId: row.aggregate_id,
  orderingKey: row.ordering_key,
  payload: JSON.parse(row.payload) as unknown,
  headers: JSON.parse(row.headers) as Record<string, string>,
  occurredAt: new Date(Number(row.occurred_at_ms))
})

const columns = (t: string) => `${t}.id, ${t}.seq, ${t}.event_type, ${t}.event_version, ${t}.aggregate_type, ${t}.aggregate_id,
  ${t}.ordering_key, ${t}.payload::text AS payload, ${t}.headers::text AS headers,
  (extract(epoch FROM ${t}.occurred_at) * 1000)::float8 AS occurred_at_ms,
  (extract(epoch FROM ${t}.created_at) * 1000)::float8 AS created_at_ms, ${t}.attempts`

const seconds = (d: Duration.Duration) => Duration.toMillis(d) / 1000

/** Builds the store; fails with `InvalidConfig` for a bad schema name. */
export const make = (options: Options = {}): Effect.Effect<Service, InvalidConfig, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const schema = options.schema ?? "tidings"
    const invalid = validateSchema(schema)
    if (invalid) return yield* invalid
    const sql = yield* SqlClient.SqlClient
    const outbox = sql(`${schema}.outbox`)
    const notifyChannel = channel(schema)
    const lockKey = `tidings.retention.${schema}`
    const cols = sql.literal(columns("o"))
    const inTransaction = Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)

    const store: Service = {
      append: (messages) =>
        Effect.gen(function*() {
          if (!(yield* inTransaction)) {
            return yield* new NotInTransaction({
              message: "Outbox.append must run inside the caller's transaction (sql.withTransaction); it never opens its own"
            })
          }
          const rows = JSON.stringify(messages.map((m) => ({
            id: m.id,
            aggregate_type: m.aggregateType,
            aggregate_id: m.aggregateId,
            ordering_key: m.orderingKey,
            event_type: m.type,
            event_version: m.version,
            payload: m.payload,
            headers: m.headers,
            occurred_at: m.occurredAt.toISOString()
          })))
          yield* sql`INSERT INTO ${outbox} (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at)
            SELECT id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at
            FROM jsonb_to_recordset(${rows}::jsonb) AS x(id uuid, aggregate_type text, aggregate_id text, ordering_key text,
              event_type text, event_version integer, payload jsonb, headers jsonb, occurred_at timestamptz)`.pipe(mapSqlError("append"))
          if (options.notify === true) yield* sql`SELECT pg_notify(${notifyChannel}, '')`.pipe(mapSqlError("append"))
        }),

      // SqlErrors of the transaction (BEGIN/COMMIT, or the caller's own queries) become StoreErrors.
      withTransaction: (effect) =>
        sql.withTransaction(effect).pipe(
          Effect.catchIf(SqlError.isSqlError, (e) =>
            Effect.fail(new StoreError({ operation: "transaction", message: e.message, retryable: e.isRetryable, cause: e })))
        ),

      afterCommit: (effect) => sql.afterCommit(effect),

      claim: ({ batchSize, lease, relayId }) =>
        sql<ClaimRow>`WITH picked AS (
            SELECT id FROM ${outbox}
            WHERE status = 'pending' AND available_at <= now()
            ORDER BY available_at, seq
            LIMIT ${batchSize}
            FOR UPDATE SKIP LOCKED
          )
          UPDATE ${outbox} o SET status = 'processing', attempts = o.attempts + 1, claimed_by = ${relayId},
            claimed_until = now() + make_interval(secs => ${seconds(lease)})
          FROM picked WHERE o.id = picked.id
          RETURNING ${cols}`.pipe(
          Effect.map((rows) =>
            [...rows].sort((a, b) => Number(a.seq) - Number(b.seq)).map((row) => ({
              message: toMessage(row),
              attempts: Number(row.attempts),
              createdAt: new Date(Number(row.created_at_ms))
            }))
          ),
          mapSqlError("claim")
        ),

      settle: (relayId, settlement) => {
        const rows = [
          ...settlement.published.map((id) => ({ id, status: "published", delay_ms: 0, error: null })),
          ...settlement.retry.map((r) => ({ id: r.id, status: "pending", delay_ms: Duration.toMillis(r.delay), error: r.error })),
          ...settlement.failed.map((f) => ({ id: f.id, status: "failed", delay_ms: 0, error: f.error }))
        ]
        if (rows.length === 0) return Effect.succeed(0)
        return sql<{ n: number | string }>`WITH settled AS (
            UPDATE ${outbox} o SET
              status = v.status,
              published_at = CASE WHEN v.status = 'published' THEN now() ELSE o.published_at END,
              available_at = CASE WHEN v.status = 'pending' THEN now() + make_interval(secs => v.delay_ms / 1000.0) ELSE o.available_at END,
              last_error = COALESCE(v.error, o.last_error),
              claimed_by = NULL,
              claimed_until = NULL
            FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS v(id uuid, status text, delay_ms float8, error text)
            WHERE o.id = v.id AND o.status = 'processing' AND o.claimed_by = ${relayId}
            RETURNING 1
          ) SELECT count(*)::int AS n FROM settled`.pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("settle"))
      },

      release: (relayId, ids) =>
        ids.length === 0 ? Effect.succeed(0) : sql<{ n: number | string }>`WITH released AS (
            UPDATE ${outbox} SET status = 'pending', attempts = greatest(attempts - 1, 0), claimed_by = NULL, claimed_until = NULL
            WHERE id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid)
              AND status = 'processing' AND claimed_by = ${relayId}
            RETURNING 1
          ) SELECT count(*)::int AS n FROM released`.pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("release")),

      reclaimExpired: sql<{ n: number | string }>`WITH expired AS (
          UPDATE ${outbox} SET status = 'pending', claimed_by = NULL, claimed_until = NULL,
            last_error = 'lease expired: the relay holding it stopped'
          WHERE id IN (
            SELECT id FROM ${outbox} WHERE status = 'processing' AND claimed_until < now()
            LIMIT 10000 FOR UPDATE SKIP LOCKED
          )
          RETURNING 1
        ) SELECT count(*)::int AS n FROM expired`.pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("reclaim")),

      prune: ({ limit, olderThan }) =>
        sql.withTransaction(Effect.gen(function*() {
          // One pruner at a time per schema; the others skip this round.
          const [lock] = yield* sql<{ locked: boolean }>`SELECT pg_try_advisory_xact_lock(hashtext(${lockKey})) AS locked`
          if (lock?.locked !== true) return undefined
          const [row] = yield* sql<{ n: number | string }>`WITH pruned AS (
              DELETE FROM ${outbox} WHERE id IN (
                SELECT id FROM ${outbox}
                WHERE status = 'published' AND published_at < now() - make_interval(secs => ${seconds(olderThan)})
                ORDER BY published_at LIMIT ${limit}
              )
              RETURNING 1
            ) SELECT count(*)::int AS n FROM pruned`
          return Number(row?.n ?? 0)
        })).pipe(mapSqlError("prune")),

      stats: sql<{ pending: number; processing: number; published: number; failed: number; oldest_ms: number | string | null }>`SELECT
          (SELECT count(*)::int FROM ${outbox} WHERE status = 'pending') AS pending,
          (SELECT count(*)::int FROM ${outbox} WHERE status = 'processing') AS processing,
          (SELECT count(*)::int FROM ${outbox} WHERE status = 'published') AS published,
          (SELECT count(*)::int FROM ${outbox} WHERE status = 'failed') AS failed,
          (SELECT (extract(epoch FROM now() - min(created_at)) * 1000)::float8 FROM ${outbox} WHERE status = 'pending') AS oldest_ms`.pipe(
        Effect.map(([r]) => ({
          pending: Number(r?.pending ?? 0),
          processing: Number(r?.processing ?? 0),
          published: Number(r?.published ?? 0),
          failed: Number(r?.failed ?? 0),
          oldestPendingAgeMs: r?.oldest_ms === null || r?.oldest_ms === undefined ? null : Math.max(0, Number(r.oldest_ms))
        })),
        mapSqlError("stats")
      ),

      listFailed: ({ limit }) =>
        sql<ClaimRow>`SELECT ${cols}, o.last_error FROM ${outbox} o WHERE status = 'failed' ORDER BY created_at LIMIT ${limit}`.pipe(
          Effect.map((rows) =>
            rows.map((row) => ({
              message: toMessage(row),
              attempts: Number(row.attempts),
              lastError: row.last_error ?? null,
              createdAt: new Date(Number(row.created_at_ms))
            }))
          ),
          mapSqlError("listFailed")
        ),

      retryFailed: (ids) => {
        const filter = ids === undefined
          ? sql`status = 'failed'`
          : sql`status = 'failed' AND id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid)`
        return sql<{ n: number | string }>`WITH retried AS (
            UPDATE ${outbox} SET status = 'pending', attempts = 0, available_at = now() WHERE ${filter} RETURNING 1
          ) SELECT count(*)::int AS n FROM retried`.pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("retryFailed"))
      },

      discardFailed: (ids) =>
        ids.length === 0 ? Effect.succeed(0) : sql<{ n: number | string }>`WITH discarded AS (
            DELETE FROM ${outbox} WHERE status = 'failed' AND id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid)
            RETURNING 1
          ) SELECT count(*)::int AS n FROM discarded`.pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("discardFailed"))
    }
    return store
  })

/** The Postgres outbox store as a layer over the app's `SqlClient`. */
export const layer = (options: Options = {}): Layer.Layer<OutboxStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.effect(OutboxStore, make(options))

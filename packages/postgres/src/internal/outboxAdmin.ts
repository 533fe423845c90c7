/**
 * The outbox store's admin reads and writes (console, CLI): lists, one event, counts by type,
 * throughput per minute, claim holders and requeue. Kept apart from the relay's hot paths.
 */
import type { StoreError } from "@tidings/core/Errors"
import type { Holder, MinuteCount, Service, Status, StoredEvent } from "@tidings/core/OutboxStore"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { type OutboxRow, toMessage } from "./outboxRow.ts"
import { mapSqlError } from "./storeError.ts"

interface StoredRow extends OutboxRow {
  readonly status: Status
  readonly attempts: number
  readonly last_error: string | null
  readonly created_at_ms: number | string
  readonly available_at_ms: number | string
  readonly published_at_ms: number | string | null
  readonly claimed_by: string | null
  readonly claimed_until_ms: number | string | null
}

const ms = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8`

const storedColumns = `id, event_type, event_version, aggregate_type, aggregate_id, ordering_key,
  payload::text AS payload, headers::text AS headers, ${ms("occurred_at")} AS occurred_at_ms,
  status, attempts, last_error, ${ms("created_at")} AS created_at_ms, ${ms("available_at")} AS available_at_ms,
  ${ms("published_at")} AS published_at_ms, claimed_by, ${ms("claimed_until")} AS claimed_until_ms`

const toStored = (row: StoredRow): StoredEvent => ({
  message: toMessage(row),
  status: row.status,
  attempts: Number(row.attempts),
  lastError: row.last_error,
  createdAt: new Date(Number(row.created_at_ms)),
  availableAt: new Date(Number(row.available_at_ms)),
  publishedAt: row.published_at_ms === null ? null : new Date(Number(row.published_at_ms)),
  claimedBy: row.claimed_by,
  claimedUntil: row.claimed_until_ms === null ? null : new Date(Number(row.claimed_until_ms))
})

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

type Admin = Pick<Service, "list" | "get" | "countByType" | "throughput" | "holders" | "requeue">

/** The admin methods over `outbox` (the schema-qualified table). */
export const outboxAdmin = (sql: SqlClient.SqlClient, table: string): Admin => {
  const outbox = sql(table)
  const cols = sql.literal(storedColumns)
  const ids = (list: ReadonlyArray<string>) => JSON.stringify(list.filter((id) => uuid.test(id)))
  return {
    list: ({ limit, status, type }) =>
      sql<StoredRow>`SELECT ${cols} FROM ${outbox}
        WHERE ${status === undefined ? sql`TRUE` : sql`status = ${status}`} AND ${
        type === undefined ? sql`TRUE` : sql`event_type = ${type}`
      }
        ORDER BY seq DESC LIMIT ${Math.max(0, Math.floor(limit))}`.pipe(
        Effect.map((rows) => rows.map(toStored)),
        mapSqlError("outbox.list")
      ),

    get: (id) =>
      !uuid.test(id) ? Effect.succeed(undefined) : sql<StoredRow>`SELECT ${cols} FROM ${outbox} WHERE id = ${id}`.pipe(
        Effect.map((rows) => rows[0] === undefined ? undefined : toStored(rows[0])),
        mapSqlError("outbox.get")
      ),

    countByType: ({ status }) =>
      sql<{ type: string; n: number | string }>`SELECT event_type AS type, count(*)::int AS n FROM ${outbox}
        WHERE status = ${status} GROUP BY event_type ORDER BY n DESC, event_type`.pipe(
        Effect.map((rows) => rows.map((r) => ({ type: r.type, count: Number(r.n) }))),
        mapSqlError("outbox.countByType")
      ),

    // Over the partial index of published rows (published_at); minutes without events are zeros.
    throughput: ({ minutes }): Effect.Effect<ReadonlyArray<MinuteCount>, StoreError> =>
      sql<{ minute_ms: number | string; n: number | string }>`WITH span AS (
          SELECT date_trunc('minute', now()) - make_interval(mins => ${
        Math.max(1, Math.floor(minutes)) - 1
      }) AS first, date_trunc('minute', now()) AS last
        ), counts AS (
          SELECT date_trunc('minute', published_at) AS minute, count(*) AS n FROM ${outbox}, span
          WHERE status = 'published' AND published_at >= span.first GROUP BY 1
        )
        SELECT ${sql.literal(ms("m"))} AS minute_ms, coalesce(counts.n, 0)::int AS n
        FROM span, generate_series(span.first, span.last, interval '1 minute') AS m LEFT JOIN counts ON counts.minute = m
        ORDER BY m`.pipe(
        Effect.map((rows) => rows.map((r) => ({ minute: new Date(Number(r.minute_ms)), published: Number(r.n) }))),
        mapSqlError("outbox.throughput")
      ),

    holders: sql<
      { holder: string; n: number | string; until_ms: number | string }
    >`SELECT claimed_by AS holder, count(*)::int AS n,
        ${sql.literal(ms("max(claimed_until)"))} AS until_ms
      FROM ${outbox} WHERE status = 'processing' GROUP BY claimed_by ORDER BY claimed_by`.pipe(
      Effect.map((rows): ReadonlyArray<Holder> =>
        rows.map((r) => ({ holder: r.holder, events: Number(r.n), claimedUntil: new Date(Number(r.until_ms)) }))
      ),
      mapSqlError("outbox.holders")
    ),

    requeue: (list) =>
      list.length === 0 ? Effect.succeed(0) : sql<{ n: number | string }>`WITH requeued AS (
          UPDATE ${outbox} SET status = 'pending', attempts = 0, finished_attempts = 0, available_at = now(), published_at = NULL
          WHERE status IN ('published', 'failed') AND id IN (SELECT jsonb_array_elements_text(${
        ids(list)
      }::jsonb)::uuid)
          RETURNING 1
        ) SELECT count(*)::int AS n FROM requeued`.pipe(
        Effect.map((r) => Number(r[0]?.n ?? 0)),
        mapSqlError("outbox.requeue")
      )
  }
}

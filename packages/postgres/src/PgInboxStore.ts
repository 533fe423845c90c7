/**
 * The inbox store on Postgres, written against effect/sql's `SqlClient`: `markProcessed` and the
 * projection positions join the app's `sql.withTransaction`, so a handler's writes, its outbox events
 * and the inbox row commit together. Duplicates serialize on the inbox row's lock.
 * @module
 */
import { type InvalidConfig, NotInTransaction } from "@tidings/core/Errors"
import { type InboxRecord, InboxStore, type Service } from "@tidings/core/InboxStore"
import * as Settings from "@tidings/core/Settings"
import { Duration, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import * as Environment from "./internal/environment.ts"
import { resolveSchema } from "./internal/identifier.ts"
import { pruneUnderLock } from "./internal/prune.ts"
import { fromSqlError, mapSqlError } from "./internal/storeError.ts"

/**
 * Options of the Postgres inbox store.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Schema holding the tables (see `Migrator`); default `tidings`. */
  readonly schema?: string
  /**
   * Commit mode of the start and failure counts (the crash-loop bookkeeping written outside the
   * handler's transaction). Default `"async"`: those commits do not wait for the WAL flush
   * (`synchronous_commit = off` for that statement only). A database crash can lose the last few
   * milliseconds of counts, which only delays crash-loop detection; the handler's transaction (the
   * inbox mark and the handler's writes) is never affected. `"sync"` waits.
   */
  readonly bookkeepingCommit?: "async" | "sync"
}

/**
 * The options as a schema, with their defaults (the schema name is checked by the migrator's rules).
 * @since 0.1.0
 * @category settings
 */
export const OptionsSchema: Schema.Struct<{
  readonly schema: Schema.optional<Schema.String>
  readonly bookkeepingCommit: Settings.Defaulted<Schema.Literals<readonly ["async", "sync"]>>
}> = Schema.Struct({
  schema: Schema.optional(Schema.String),
  bookkeepingCommit: Schema.Literals(["async", "sync"]).pipe(
    Schema.withDecodingDefault(Effect.succeed("async" as const))
  )
})

interface Row {
  readonly message_id: string
  readonly consumer: string
  readonly status: InboxRecord["status"]
  readonly attempts: number
  readonly finished_attempts: number
  readonly crashes: number
  readonly received_at_ms: number | string
  readonly processed_at_ms: number | string | null
  readonly last_error: string | null
}

const toRecord = (r: Row): InboxRecord => ({
  messageId: r.message_id,
  consumer: r.consumer,
  status: r.status,
  attempts: Number(r.attempts),
  finishedAttempts: Number(r.finished_attempts),
  crashes: Number(r.crashes),
  receivedAt: new Date(Number(r.received_at_ms)),
  processedAt: r.processed_at_ms === null ? null : new Date(Number(r.processed_at_ms)),
  lastError: r.last_error
})

const returning = `message_id, consumer, status, attempts, finished_attempts, crashes,
  (extract(epoch FROM received_at) * 1000)::float8 AS received_at_ms,
  (extract(epoch FROM processed_at) * 1000)::float8 AS processed_at_ms, last_error`

/**
 * The advisory lock key of a projection: shared while applying events, exclusive while rebuilding.
 * @since 0.1.0
 * @category combinators
 */
export const projectionLockKey = (schema: string, projection: string): string =>
  `tidings.projection.${schema}.${projection}`

/**
 * Builds the store; fails with `InvalidConfig` for a bad schema name.
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<Service, InvalidConfig, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const settings = yield* Settings.decode(OptionsSchema, options)
    const schema = yield* resolveSchema(settings.schema)
    const sql = yield* SqlClient.SqlClient
    const inbox = sql(`${schema}.inbox`)
    const positions = sql(`${schema}.projection_position`)
    const cols = sql.literal(returning)
    const lockKey = `tidings.inbox.retention.${schema}`
    // `set_config(..., true)` lasts for the statement's own transaction, so only this commit is asynchronous.
    const commitMode = settings.bookkeepingCommit === "sync"
      ? sql.literal("commit_mode AS MATERIALIZED (SELECT 1 AS on)")
      : sql.literal("commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS on)")

    const requireTx = Effect.flatMap(Effect.serviceOption(sql.transactionService), (open) =>
      Option.isSome(open)
        ? Effect.void
        : Effect.fail(
          new NotInTransaction({
            message: "this inbox operation must run inside the caller's transaction (sql.withTransaction)"
          })
        ))

    const get = (messageId: string, consumer: string) =>
      sql<Row>`SELECT ${cols} FROM ${inbox} WHERE message_id = ${messageId} AND consumer = ${consumer}`.pipe(
        Effect.map((rows) => rows[0] === undefined ? undefined : toRecord(rows[0])),
        mapSqlError("inbox.get")
      )

    return InboxStore.of({
      withTransaction: (effect) =>
        sql.withTransaction(effect).pipe(
          Effect.catchIf(SqlError.isSqlError, (e) => Effect.fail(fromSqlError("inbox.transaction", e)))
        ),

      begin: (messageId, consumer, instance) =>
        Effect.gen(function*() {
          const [row] = yield* sql<
            Row
          >`WITH ${commitMode} INSERT INTO ${inbox} AS i (message_id, consumer, attempts, started_by)
            SELECT ${messageId}, ${consumer}, 1, ${instance} FROM commit_mode
            ON CONFLICT (message_id, consumer) DO UPDATE SET
              attempts = i.attempts + 1,
              started_by = excluded.started_by,
              crashes = i.crashes + CASE
                WHEN i.attempts > i.finished_attempts + i.crashes AND i.started_by IS DISTINCT FROM excluded.started_by THEN 1 ELSE 0 END
            WHERE i.status = 'processing'
            RETURNING ${cols}`
          if (row !== undefined) return toRecord(row)
          const [current] = yield* sql<
            Row
          >`SELECT ${cols} FROM ${inbox} WHERE message_id = ${messageId} AND consumer = ${consumer}`
          if (current === undefined) return yield* Effect.die(new Error("inbox row vanished while starting an attempt"))
          return toRecord(current)
        }).pipe(mapSqlError("inbox.begin")),

      markProcessed: (messageId, consumer) =>
        requireTx.pipe(
          Effect.andThen(
            sql<
              { n: number }
            >`INSERT INTO ${inbox} AS i (message_id, consumer, status, attempts, finished_attempts, processed_at)
            VALUES (${messageId}, ${consumer}, 'processed', 1, 1, now())
            ON CONFLICT (message_id, consumer) DO UPDATE
              SET status = 'processed', finished_attempts = i.finished_attempts + 1, processed_at = now(), last_error = NULL
              WHERE i.status = 'processing'
            RETURNING 1 AS n`.pipe(Effect.map((rows) => rows.length > 0), mapSqlError("inbox.markProcessed"))
          )
        ),

      recordFailure: (messageId, consumer, error) =>
        sql`WITH ${commitMode} UPDATE ${inbox} SET finished_attempts = finished_attempts + 1, last_error = ${error}
          FROM commit_mode WHERE message_id = ${messageId} AND consumer = ${consumer} AND status = 'processing'`.pipe(
          Effect.asVoid,
          mapSqlError("inbox.recordFailure")
        ),

      markFailed: (messageId, consumer, reason) =>
        sql`INSERT INTO ${inbox} AS i (message_id, consumer, status, last_error) VALUES (${messageId}, ${consumer}, 'failed', ${reason})
          ON CONFLICT (message_id, consumer) DO UPDATE SET status = 'failed', last_error = ${reason}`.pipe(
          Effect.asVoid,
          mapSqlError("inbox.markFailed")
        ),

      get,

      resetFailed: (messageId, consumer) =>
        sql`DELETE FROM ${inbox} WHERE message_id = ${messageId} AND consumer = ${consumer} AND status = 'failed' RETURNING 1`
          .pipe(
            Effect.map((rows) => rows.length > 0),
            mapSqlError("inbox.resetFailed")
          ),

      list: ({ consumer, limit, status }) =>
        sql<Row>`SELECT ${cols} FROM ${inbox}
          WHERE ${status === undefined ? sql`TRUE` : sql`status = ${status}`}
            AND ${consumer === undefined ? sql`TRUE` : sql`consumer = ${consumer}`}
          ORDER BY received_at DESC, message_id, consumer
          LIMIT ${Math.max(0, Math.floor(limit))}`.pipe(
          Effect.map((rows) => rows.map(toRecord)),
          mapSqlError("inbox.list")
        ),

      count: (options = {}) =>
        sql<{ status: InboxRecord["status"]; n: number }>`SELECT status, count(*)::int AS n FROM ${inbox}
          WHERE ${options.consumer === undefined ? sql`TRUE` : sql`consumer = ${options.consumer}`}
          GROUP BY status`.pipe(
          Effect.map((rows) => {
            const counts = { processing: 0, processed: 0, failed: 0 }
            for (const row of rows) counts[row.status] = Number(row.n)
            return counts
          }),
          mapSqlError("inbox.count")
        ),

      // One pruner at a time per schema; the others skip this round.
      prune: ({ limit, olderThan }) =>
        pruneUnderLock(
          sql,
          lockKey,
          "inbox.prune",
          sql`DELETE FROM ${inbox} WHERE (message_id, consumer) IN (
            SELECT message_id, consumer FROM ${inbox}
            WHERE received_at < now() - make_interval(secs => ${Duration.toMillis(olderThan) / 1000})
            ORDER BY received_at LIMIT ${limit}
            FOR UPDATE SKIP LOCKED
          )
          RETURNING 1`
        ),

      lockPosition: (projection, aggregateId) =>
        requireTx.pipe(
          // A shared lock on the projection (a rebuild takes it exclusively, see PgProjection), then the
          // no-op update takes the row lock and returns the committed position (0 for a new aggregate).
          Effect.andThen(
            sql<{ position: string | number }>`INSERT INTO ${positions} AS p (projection, aggregate_id, position)
            SELECT ${projection}, ${aggregateId}, 0 FROM (SELECT pg_advisory_xact_lock_shared(hashtext(${
              projectionLockKey(schema, projection)
            }))) AS l
            ON CONFLICT (projection, aggregate_id) DO UPDATE SET position = p.position
            RETURNING position`.pipe(
              Effect.map((rows) => Number(rows[0]?.position ?? 0)),
              mapSqlError("projection.lockPosition")
            )
          )
        ),

      setPosition: (projection, aggregateId, position) =>
        requireTx.pipe(
          Effect.andThen(
            sql`UPDATE ${positions} SET position = ${position} WHERE projection = ${projection} AND aggregate_id = ${aggregateId}`
              .pipe(
                Effect.asVoid,
                mapSqlError("projection.setPosition")
              )
          )
        ),

      position: (projection, aggregateId) =>
        sql<
          { position: string | number }
        >`SELECT position FROM ${positions} WHERE projection = ${projection} AND aggregate_id = ${aggregateId}`.pipe(
          Effect.map((rows) => Number(rows[0]?.position ?? 0)),
          mapSqlError("projection.position")
        )
    })
  })

/**
 * The inbox store as a layer (needs a `SqlClient`, e.g. `PgClient.layer`).
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<InboxStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.effect(InboxStore, make(options))

/**
 * The options as a schema (what {@link layerConfig} reads from the environment).
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema = Environment.InboxSchema

/**
 * The store's environment variables (`TIDINGS_SCHEMA`, shared by every store, and its own).
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = Environment.inbox

/**
 * {@link layer} with its options from the environment, on top of `options.defaults`; a wrong
 * variable fails with one `InvalidConfig` naming every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Options> = {}
): Layer.Layer<InboxStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), layer))

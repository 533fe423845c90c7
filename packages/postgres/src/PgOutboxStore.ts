/**
 * The outbox store on Postgres, written against effect/sql's `SqlClient`: `Outbox.append` joins the
 * app's `sql.withTransaction`, whatever driver provides the client (this package's `PgClient`, or
 * `@effect/sql-pg`). Its statements are in `internal/outboxSql.ts`.
 * @since 0.1.0
 * @module
 */
import * as EagerDispatch from "@tidings/core/EagerDispatch"
import { type InvalidConfig, NotInTransaction } from "@tidings/core/Errors"
import { OutboxStore, type Service } from "@tidings/core/OutboxStore"
import * as Settings from "@tidings/core/Settings"
import { Context, Duration, Effect, Layer, Option, Queue, type Scope } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import * as Environment from "./internal/environment.ts"
import { resolveSchema } from "./internal/identifier.ts"
import { instanceId } from "./internal/instance.ts"
import { outboxAdmin } from "./internal/outboxAdmin.ts"
import { claimedEvents, failedEvent, outboxSql, seconds, settlementRows } from "./internal/outboxSql.ts"
import { pruneUnderLock } from "./internal/prune.ts"
import { fromSqlError, mapSqlError } from "./internal/storeError.ts"

/**
 * Options of the Postgres outbox store.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Schema holding the tables (see `Migrator`); default `tidings`. */
  readonly schema?: string
  /**
   * Wake relays in other processes (see `PgWakeup`) when events are appended. Relays in the same
   * process are woken after commit without it. Default false.
   * - `true`: after the commit, one `NOTIFY` from a background fiber, coalesced: commits that land
   *   while a `NOTIFY` is in flight share the next one. Producers do not wait for it.
   * - `"in-transaction"`: a `NOTIFY` inside every appending transaction. Simplest, but on a small
   *   machine it costs saturated producers about a third of their throughput.
   */
  readonly notify?: boolean | "in-transaction"
  /**
   * Commit mode of the relay's own bookkeeping (claims, settles). Default `"async"`: those commits
   * do not wait for the WAL flush (`synchronous_commit = off` for that statement only), which takes
   * the disk flush off every batch. A database crash can then lose the last few milliseconds of
   * claims and marks, and those events are published again: at-least-once delivery, which the
   * relay gives anyway. Appends, in the app's transaction, are never affected. `"sync"` waits.
   */
  readonly bookkeepingCommit?: "async" | "sync"
}

const notifyGap = Duration.millis(5)

/**
 * The `NOTIFY` channel of a schema's outbox.
 * @since 0.1.0
 * @category constants
 */
export const channel = (schema: string): string => `tidings_outbox_${schema}`

/**
 * Builds the store; fails with `InvalidConfig` for a bad schema name.
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<Service, InvalidConfig, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const sql = yield* SqlClient.SqlClient
    const q = outboxSql(sql, schema, options.bookkeepingCommit)
    const notifyChannel = channel(schema)
    const lockKey = `tidings.retention.${schema}`

    // Coalesced cross-process wake-up: a one-slot mailbox and one fiber sending NOTIFYs outside the
    // producers' transactions. A signal during a NOTIFY in flight is kept for the next one.
    let notifier: Effect.Effect<void> | undefined
    if (options.notify === true) {
      const mailbox = yield* Queue.sliding<void>(1)
      notifier = Effect.asVoid(Queue.offer(mailbox, undefined))
      yield* Queue.take(mailbox).pipe(
        Effect.andThen(sql`SELECT pg_notify(${notifyChannel}, ${instanceId()})`),
        // At most one NOTIFY per few milliseconds: under load, commits share them.
        Effect.andThen(Effect.sleep(notifyGap)),
        Effect.catch((e) => Effect.logWarning("outbox NOTIFY failed; relays elsewhere will poll", e)),
        Effect.forever,
        Effect.forkScoped
      )
      // On shutdown, a commit still waiting for its NOTIFY gets it (best effort, bounded).
      yield* Effect.addFinalizer(() =>
        Queue.poll(mailbox).pipe(
          Effect.flatMap((pending) =>
            Option.isSome(pending)
              ? Effect.asVoid(sql`SELECT pg_notify(${notifyChannel}, ${instanceId()})`)
              : Effect.void
          ),
          Effect.timeout("1 second"),
          Effect.ignore
        )
      )
    }
    // A transaction of this client; every one is opened by effect/sql's `withTransaction`, which
    // defers after-commit work to the commit.
    const inTransaction = Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)

    const store: Service = {
      append: (messages, claim) =>
        Effect.gen(function*() {
          if (!(yield* inTransaction)) {
            return yield* new NotInTransaction({
              message:
                "Outbox.append must run inside the caller's transaction (sql.withTransaction); it never opens its own"
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
          const recordset =
            sql`json_to_recordset(${rows}::json) AS x(id uuid, aggregate_type text, aggregate_id text, ordering_key text,
              event_type text, event_version integer, payload json, headers json, occurred_at timestamptz)`
          yield* (claim === undefined
            ? sql`INSERT INTO ${q.outbox} (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at)
                SELECT id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at
                FROM ${recordset}`
            : sql`INSERT INTO ${q.outbox} (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at,
                  status, attempts, claimed_by, claimed_until)
                SELECT id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at,
                  'processing', 1, ${claim.relayId}, now() + make_interval(secs => ${seconds(claim.lease)})
                FROM ${recordset}`).pipe(mapSqlError("append"))
          // Claimed rows are this process's relay's to publish: no other relay needs waking.
          if (claim !== undefined) return
          if (options.notify === "in-transaction") {
            yield* sql`SELECT pg_notify(${notifyChannel}, ${instanceId()})`.pipe(mapSqlError("append"))
          } else if (notifier !== undefined) yield* sql.afterCommit(notifier)
        }),

      // SqlErrors of the transaction (BEGIN/COMMIT, or the caller's own queries) become StoreErrors.
      withTransaction: (effect) =>
        sql.withTransaction(effect).pipe(
          Effect.catchIf(SqlError.isSqlError, (e) => Effect.fail(fromSqlError("transaction", e)))
        ),

      afterCommit: (effect) => sql.afterCommit(effect),
      inTransaction,
      defersAfterCommit: inTransaction,

      claim: (options) =>
        q.claim(options).pipe(Effect.map((rows) => claimedEvents(rows, options.ordering)), mapSqlError("claim")),

      settle: (relayId, settlement) => {
        const rows = settlementRows(settlement)
        if (rows.length === 0) return Effect.succeed(0)
        return q.settle(relayId, rows).pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("settle"))
      },

      settleAndClaim: (relayId, settlement, next) => {
        const rows = settlementRows(settlement)
        if (rows.length === 0) return store.claim(next)
        return q.settleAndClaim(relayId, rows, next).pipe(
          Effect.map((rows) => claimedEvents(rows, next.ordering)),
          mapSqlError("settleAndClaim")
        )
      },

      release: (relayId, ids) => store.settle(relayId, { published: [], retry: [], failed: [], released: ids }),

      reclaimExpired: ({ maxCrashes }) =>
        q.reclaimExpired(maxCrashes).pipe(
          Effect.map(([r]) => ({ suspect: Number(r?.suspect ?? 0), failed: Number(r?.failed ?? 0) })),
          mapSqlError("reclaim")
        ),

      claimSuspect: ({ lease, ordering, relayId }) =>
        q.claimSuspect(relayId, lease, ordering).pipe(
          Effect.map((rows) => claimedEvents(rows)[0]),
          mapSqlError("claimSuspect")
        ),

      // One pruner at a time per schema; the others skip this round.
      prune: ({ limit, olderThan }) => pruneUnderLock(sql, lockKey, "prune", q.prune(olderThan, limit)),

      stats: q.stats.pipe(
        Effect.map(([r]) => ({
          pending: Number(r?.pending ?? 0),
          processing: Number(r?.processing ?? 0),
          published: Number(r?.published ?? 0),
          failed: Number(r?.failed ?? 0),
          suspect: Number(r?.suspect ?? 0),
          oldestPendingAgeMs: r?.oldest_ms === null || r?.oldest_ms === undefined
            ? null
            : Math.max(0, Number(r.oldest_ms))
        })),
        mapSqlError("stats")
      ),

      listFailed: ({ limit }) =>
        q.listFailed(limit).pipe(Effect.map((rows) => rows.map(failedEvent)), mapSqlError("listFailed")),

      retryFailed: (ids) =>
        q.retryFailed(ids).pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("retryFailed")),

      discardFailed: (ids) =>
        ids.length === 0
          ? Effect.succeed(0)
          : q.discardFailed(ids).pipe(Effect.map((r) => Number(r[0]?.n ?? 0)), mapSqlError("discardFailed")),

      ...outboxAdmin(sql, `${schema}.outbox`)
    }
    return store
  })

/**
 * The Postgres outbox store as a layer over the app's `SqlClient`, with its eager-dispatch registry
 * (`EagerDispatch`): an app's producers and relay built on this layer share both.
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<OutboxStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.effectContext(
    Effect.map(
      make(options),
      (store) => Context.make(OutboxStore, store).pipe(Context.add(EagerDispatch.Lanes, EagerDispatch.make()))
    )
  )

/**
 * The options as a schema, read by {@link layerConfig}.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema = Environment.OutboxSchema
/**
 * `TIDINGS_SCHEMA` (shared by every store), `TIDINGS_OUTBOX_NOTIFY`, `TIDINGS_OUTBOX_BOOKKEEPING_COMMIT`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = Environment.outbox
/**
 * {@link layer} with its options from the environment, on top of `options.defaults`.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Options> = {}
): Layer.Layer<OutboxStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), layer))

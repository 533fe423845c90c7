/**
 * Log mode on PostgreSQL (migration 0006): the `log` table, partitioned by a hash of the ordering
 * key, read by groups with a cursor per partition (`log_cursor`) and leases among their members
 * (`log_member`). The layer provides the `LogStore` for `LogRelay` and `PgLogConsumer`, and the
 * `OutboxStore` whose `append` writes into the log, in the caller's transaction: `Outbox.append` is
 * unchanged, and an app moves to log mode by swapping `PgOutboxStore.layer` for this one.
 *
 * Rows carry their writer's `xid8` (`pg_current_xact_id()`) and an identity sequence. A read
 * returns only rows with `tx_id < pg_snapshot_xmin(pg_current_snapshot())`, in `(tx_id, seq)`
 * order: every transaction below that is over, so a transaction that commits late is read in its
 * place, never skipped. A long-running transaction anywhere in the database holds reads back
 * meanwhile (`horizon` names the oldest; it needs `pg_stat_activity` access to see other roles'
 * sessions).
 *
 * Failed events are copied to the outbox table as `failed` rows (with the groups that failed them),
 * so `listFailed` and `discardFailed` are the outbox's; `retryFailed` appends them to the log again,
 * for those groups only. The per-row relay operations fail with a typed `StoreError`.
 * @since 0.1.0
 * @module
 */
import { type InvalidConfig, NotInTransaction, Rejected, StoreError } from "@tidings/core/Errors"
import * as LogStore from "@tidings/core/LogStore"
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import * as Settings from "@tidings/core/Settings"
import { Context, Duration, Effect, Layer, Option, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Environment from "./internal/environment.ts"
import { resolveSchema } from "./internal/identifier.ts"
import * as Sql from "./internal/logSql.ts"
import { coalescedNotifier } from "./internal/notifier.ts"
import { type OutboxRow, toMessage } from "./internal/outboxRow.ts"
import { pruneUnderLock } from "./internal/prune.ts"
import { mapSqlError } from "./internal/storeError.ts"
import * as PgOutboxStore from "./PgOutboxStore.ts"

/**
 * Options of the Postgres log store.
 * @since 0.1.0
 * @category config
 */
export interface Options {
  /** Schema holding the tables (see `Migrator`); default `tidings`. */
  readonly schema?: string
  /**
   * The stream's partition count, fixed when the log is first used (default 16). Given and
   * different from the stored count, the layer fails with `InvalidConfig`: changing it would move
   * keys between partitions and break their order.
   */
  readonly partitions?: number
  /** Wake readers in other processes after appends (`PgWakeup.layer` listens): a coalesced `NOTIFY` after the commit. Default false. */
  readonly notify?: boolean
  /**
   * Commit mode of the readers' own bookkeeping (in-flight marks, cursor moves, leases). Default
   * `"async"`: those commits do not wait for the WAL flush; a database crash can lose the last few
   * milliseconds of cursor moves, and those events are published again (at least once). Appends
   * and a consumer's handler transactions are never affected. `"sync"` waits.
   */
  readonly bookkeepingCommit?: "async" | "sync"
}

/**
 * The store's two faces.
 * @since 0.1.0
 * @category models
 */
export interface Stores {
  readonly log: LogStore.Service
  readonly outbox: OutboxStorePort.Service
}

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const logMode = (operation: string) =>
  Effect.fail(
    new StoreError({
      operation,
      message:
        `this outbox store writes to the log (log mode): run LogRelay, not Relay (${operation} is a per-row relay operation)`,
      reason: new Rejected()
    })
  )

/**
 * Builds the store over the app's `SqlClient`; the log must be migrated (`Migrator.run`).
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<Stores, InvalidConfig | StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    if (options.partitions !== undefined) {
      yield* Settings.decode(Settings.int(1, 4096), options.partitions, "partitions")
    }
    const sql = yield* SqlClient.SqlClient
    const t: Sql.Tables = {
      log: sql(`${schema}.log`),
      cursor: sql(`${schema}.log_cursor`),
      member: sql(`${schema}.log_member`),
      outbox: sql(`${schema}.outbox`)
    }
    const [stream] = yield* sql<{ partitions: number }>`WITH ins AS (
        INSERT INTO ${sql(`${schema}.log_stream`)} (partitions) VALUES (${
      options.partitions ?? 16
    }) ON CONFLICT (id) DO NOTHING RETURNING partitions
      ) SELECT partitions FROM ins UNION ALL SELECT partitions FROM ${sql(`${schema}.log_stream`)}`.pipe(
      mapSqlError("logStream")
    )
    const partitions = Number(stream?.partitions ?? 0)
    if (options.partitions !== undefined && partitions !== options.partitions) {
      return yield* Settings.invalid([{
        path: "partitions",
        message:
          `the log of schema ${schema} has ${partitions} partitions; it cannot change to ${options.partitions} (keys would move between partitions and lose their order)`
      }])
    }
    const inner = yield* PgOutboxStore.make({
      schema,
      ...(options.bookkeepingCommit === undefined ? {} : { bookkeepingCommit: options.bookkeepingCommit })
    })
    // At most one NOTIFY per millisecond: a relay elsewhere hears a commit about a millisecond
    // later at worst, while a busy producer process still sends far fewer NOTIFYs than commits.
    const notifier = options.notify === true
      ? yield* coalescedNotifier(sql, PgOutboxStore.channel(schema), Duration.millis(1))
      : undefined
    const inTransaction = Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)
    const commitMode = options.bookkeepingCommit === "sync"
      ? sql.literal("commit_mode AS MATERIALIZED (SELECT 1 AS on)")
      : sql.literal("commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS on)")
    const lockKey = `tidings.log.retention.${schema}`
    const ensured = new Set<string>()

    const rowsOf = (messages: ReadonlyArray<Message>, onlyGroups?: ReadonlyArray<string> | null) =>
      JSON.stringify(messages.map((m) => ({
        partition: LogStore.partitionOf(m.orderingKey, partitions),
        id: m.id,
        aggregate_type: m.aggregateType,
        aggregate_id: m.aggregateId,
        ordering_key: m.orderingKey,
        event_type: m.type,
        event_version: m.version,
        payload: m.payload,
        headers: m.headers,
        occurred_at: m.occurredAt.toISOString(),
        only_groups: onlyGroups ?? null
      })))
    const insert = (rows: string) =>
      sql`INSERT INTO ${t.log} (partition, id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at, only_groups)
        SELECT partition, id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at, only_groups
        FROM json_to_recordset(${rows}::json) AS x(partition int, id uuid, aggregate_type text, aggregate_id text, ordering_key text,
          event_type text, event_version integer, payload json, headers json, occurred_at timestamptz, only_groups text[])`

    const requeue = (ids: ReadonlyArray<string> | undefined, replay: boolean) =>
      sql.withTransaction(Effect.gen(function*() {
        const list = ids === undefined ? undefined : JSON.stringify(ids.filter((id) => uuid.test(id)))
        const filter = list === undefined
          ? sql``
          : sql`AND id IN (SELECT jsonb_array_elements_text(${list}::jsonb)::uuid)`
        const rows = yield* sql<OutboxRow & { readonly log_groups: Array<string> | null }>`DELETE FROM ${t.outbox}
          WHERE status = 'failed' ${filter}
          RETURNING id, event_type, event_version, aggregate_type, aggregate_id, ordering_key, payload::text AS payload, headers::text AS headers,
            (extract(epoch FROM occurred_at) * 1000)::float8 AS occurred_at_ms, log_groups`
        for (const r of rows) yield* insert(rowsOf([toMessage(r)], r.log_groups))
        if (notifier !== undefined) yield* sql.afterCommit(notifier)
        if (!replay || list === undefined) return rows.length
        const replayed =
          yield* sql`INSERT INTO ${t.log} (partition, id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at)
          SELECT DISTINCT ON (id) partition, id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at
          FROM ${t.log} WHERE id IN (SELECT jsonb_array_elements_text(${list}::jsonb)::uuid)
            AND id NOT IN (SELECT jsonb_array_elements_text(${JSON.stringify(rows.map((r) => r.id))}::jsonb)::uuid)
          ORDER BY id, tx_id DESC, seq DESC RETURNING 1`
        return rows.length + replayed.length
      })).pipe(mapSqlError(replay ? "requeue" : "retryFailed"))

    const log: LogStore.Service = {
      partitions,
      withTransaction: inner.withTransaction,
      join: ({ group, lease, member, startFrom }) =>
        Effect.gen(function*() {
          if (!ensured.has(group)) {
            const start = startFrom === "latest"
              ? sql`SELECT ${group}, p.p, coalesce(l.tx_id, '0'::xid8), coalesce(l.seq, 0) FROM generate_series(0, ${
                partitions - 1
              }) AS p(p)
                  LEFT JOIN LATERAL (SELECT tx_id, seq FROM ${t.log} WHERE partition = p.p AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
                    ORDER BY tx_id DESC, seq DESC LIMIT 1) l ON true`
              : sql`SELECT ${group}, p, '0'::xid8, 0 FROM generate_series(0, ${partitions - 1}) AS p`
            yield* sql`INSERT INTO ${t.cursor} (group_name, partition, tx_id, seq) ${start} ON CONFLICT DO NOTHING`
            ensured.add(group)
          }
          const rows = yield* sql<{ member: string }>`WITH up AS (
              INSERT INTO ${t.member} (group_name, member, expires_at) VALUES (${group}, ${member}, now() + make_interval(secs => ${
            Sql.seconds(lease)
          }))
              ON CONFLICT (group_name, member) DO UPDATE SET expires_at = excluded.expires_at
              RETURNING member
            ), gone AS (
              DELETE FROM ${t.member} WHERE group_name = ${group} AND expires_at < now() - interval '1 hour'
            )
            SELECT member FROM ${t.member} WHERE group_name = ${group} AND expires_at > now() AND member <> ${member}
            UNION SELECT member FROM up`
          return rows.map((r) => r.member).sort()
        }).pipe(mapSqlError("join")),
      leave: (group, member) =>
        sql`DELETE FROM ${t.member} WHERE group_name = ${group} AND member = ${member}`.pipe(
          Effect.asVoid,
          mapSqlError("leave")
        ),
      acquire: (group, member, wanted, lease) =>
        wanted.length === 0
          ? Effect.succeed([])
          : Sql.acquire(sql, t, group, member, wanted, lease).pipe(
            Effect.map((rows) => rows.map(Sql.toState)),
            mapSqlError("acquire")
          ),
      renew: (group, member, leases, lease) =>
        leases.length === 0 ? Effect.succeed([]) : sql<{ partition: number }>`WITH ${commitMode}
          UPDATE ${t.cursor} c SET lease_until = now() + make_interval(secs => ${Sql.seconds(lease)})
          FROM json_to_recordset(${JSON.stringify(leases)}::json) AS l(partition int, epoch bigint), commit_mode
          WHERE c.group_name = ${group} AND c.partition = l.partition AND c.owner = ${member} AND c.epoch = l.epoch
          RETURNING c.partition`.pipe(Effect.map((rows) => rows.map((r) => Number(r.partition))), mapSqlError("renew")),
      release: (group, member, leases) =>
        leases.length === 0 ?
          Effect.void :
          sql`UPDATE ${t.cursor} c SET owner = NULL, lease_until = NULL, inflight_tx = NULL, inflight_seq = NULL
          FROM json_to_recordset(${JSON.stringify(leases)}::json) AS l(partition int, epoch bigint)
          WHERE c.group_name = ${group} AND c.partition = l.partition AND c.owner = ${member} AND c.epoch = l.epoch`
            .pipe(Effect.asVoid, mapSqlError("release")),
      read: (group, member, requests) =>
        requests.length === 0 ?
          Effect.succeed({ events: [], lost: [], heldBack: [] }) :
          Sql.read(sql, t, commitMode, group, member, requests).pipe(
            Effect.map((rows) => {
              const events: Array<LogStore.LogEvent> = []
              const lost: Array<number> = []
              const heldBack: Array<number> = []
              let sorted = true
              for (const r of rows) {
                if (r.tx_id === null) {
                  ;(Number(r.seq) === 0 ? lost : heldBack).push(Number(r.partition))
                  continue
                }
                const e = Sql.toEvent(r)
                const last = events[events.length - 1]
                if (
                  last !== undefined && last.partition === e.partition &&
                  LogStore.compare(last.position, e.position) > 0
                ) sorted = false
                events.push(e)
              }
              // Each partition's events in (tx_id, seq) order: the statement produces them so; checked.
              if (!sorted) events.sort((a, b) => a.partition - b.partition || LogStore.compare(a.position, b.position))
              return { events, lost, heldBack }
            }),
            mapSqlError("read")
          ),
      settle: (group, member, settlements) =>
        settlements.length === 0 ? Effect.succeed([]) : Effect.flatMap(inTransaction, (inside) =>
          // In a consumer's transaction the commit is the handlers' own: never made asynchronous here.
          Sql.settle(sql, t, inside ? undefined : commitMode, group, member, settlements).pipe(
            Effect.map((rows) => rows.map(Sql.toState)),
            mapSqlError("settle")
          )),
      prune: ({ limit, olderThan }) =>
        pruneUnderLock(
          sql,
          lockKey,
          "prune",
          sql`DELETE FROM ${t.log} WHERE ctid = ANY(ARRAY(
            SELECT e.ctid FROM (
              SELECT DISTINCT ON (partition) partition, tx_id, seq FROM ${t.cursor} ORDER BY partition, tx_id, seq
            ) h CROSS JOIN LATERAL (
              SELECT l.ctid FROM ${t.log} l
              WHERE l.partition = h.partition AND (l.tx_id, l.seq) <= (h.tx_id, h.seq)
                AND l.created_at < now() - make_interval(secs => ${Sql.seconds(olderThan)})
              ORDER BY l.tx_id, l.seq LIMIT ${Math.max(1, Math.ceil(limit / partitions))}
            ) e
          )) RETURNING 1`
        ),
      horizon: sql<{ age_ms: number | string | null; detail: string | null }>`SELECT
          (extract(epoch FROM now() - a.xact_start) * 1000)::float8 AS age_ms,
          'pid ' || a.pid || coalesce(', ' || nullif(a.application_name, ''), '') || coalesce(', ' || a.state, '') AS detail
        FROM pg_stat_activity a WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
        UNION ALL
        SELECT (extract(epoch FROM now() - p.prepared) * 1000)::float8, 'prepared transaction ' || p.gid FROM pg_prepared_xacts p
        ORDER BY 1 DESC NULLS LAST LIMIT 1`.pipe(
        Effect.map(([r]) => ({
          oldestOpenTransactionAgeMs: r?.age_ms === null || r?.age_ms === undefined
            ? null
            : Math.max(0, Number(r.age_ms)),
          detail: r?.detail ?? null
        })),
        mapSqlError("horizon")
      ),
      groups: sql<
        { group_name: string; members: Array<string> | string | null; lag: number | string; retrying: number | string }
      >`SELECT c.group_name,
          (SELECT string_agg(m.member, ',' ORDER BY m.member) FROM ${t.member} m WHERE m.group_name = c.group_name AND m.expires_at > now()) AS members,
          sum((SELECT count(*) FROM (SELECT 1 FROM ${t.log} l WHERE l.partition = c.partition AND (l.tx_id, l.seq) > (c.tx_id, c.seq) LIMIT 1000000) x))::bigint AS lag,
          count(*) FILTER (WHERE c.head_attempts > 0) AS retrying
        FROM ${t.cursor} c GROUP BY c.group_name ORDER BY c.group_name`.pipe(
        Effect.map((rows) =>
          rows.map((r) => ({
            group: r.group_name,
            members: typeof r.members === "string" ? r.members.split(",") : [],
            lag: Number(r.lag),
            retrying: Number(r.retrying)
          }))
        ),
        mapSqlError("groups")
      ),
      dropGroup: (group) =>
        sql.withTransaction(Effect.gen(function*() {
          yield* sql`DELETE FROM ${t.cursor} WHERE group_name = ${group}`
          yield* sql`DELETE FROM ${t.member} WHERE group_name = ${group}`
          ensured.delete(group)
        })).pipe(mapSqlError("dropGroup"))
    }

    const outbox: OutboxStorePort.Service = {
      append: (messages) =>
        Effect.gen(function*() {
          if (!(yield* inTransaction)) {
            return yield* new NotInTransaction({
              message:
                "Outbox.append must run inside the caller's transaction (sql.withTransaction); it never opens its own"
            })
          }
          if (messages.length === 0) return
          yield* insert(rowsOf(messages)).pipe(mapSqlError("append"))
          if (notifier !== undefined) yield* sql.afterCommit(notifier)
        }),
      withTransaction: inner.withTransaction,
      afterCommit: inner.afterCommit,
      inTransaction,
      defersAfterCommit: inner.defersAfterCommit,
      claim: () => logMode("claim"),
      settle: () => logMode("settle"),
      settleAndClaim: () => logMode("settleAndClaim"),
      release: () => logMode("release"),
      reclaimExpired: () => logMode("reclaimExpired"),
      claimSuspect: () => logMode("claimSuspect"),
      // The outbox table only holds failed events (and rows from before a switch to log mode).
      prune: inner.prune,
      stats: inner.stats,
      listFailed: inner.listFailed,
      discardFailed: inner.discardFailed,
      // A retried event is appended to the log again: for the groups that failed it, or for every
      // group when it failed in per-row mode.
      retryFailed: (ids) => requeue(ids, false),
      // The admin views show the outbox table: in log mode its failed events (published events
      // stay in the log, per group, until retention).
      list: inner.list,
      get: inner.get,
      countByType: inner.countByType,
      throughput: inner.throughput,
      holders: inner.holders,
      // A replay: failed events as retryFailed; events still in the log are appended again for every group.
      requeue: (ids) => requeue(ids, true)
    }
    return { log, outbox }
  })

/**
 * The log store as a layer over the app's `SqlClient`: both the `LogStore` and the `OutboxStore`
 * (appends go to the log).
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<LogStore.LogStore | OutboxStore, InvalidConfig | StoreError, SqlClient.SqlClient> =>
  Layer.effectContext(
    Effect.map(make(options), ({ log, outbox }) =>
      Context.make(LogStore.LogStore, log).pipe(Context.add(OutboxStore, outbox)))
  )

/**
 * The store's settings schema, for settings read from the environment ({@link environment}).
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: typeof Environment.LogSchema = Environment.LogSchema

/**
 * `TIDINGS_SCHEMA` (shared by every store), `TIDINGS_LOG_PARTITIONS`, `TIDINGS_LOG_NOTIFY`,
 * `TIDINGS_LOG_BOOKKEEPING_COMMIT`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = Environment.log

/**
 * {@link layer} with its options from the environment, on top of `options.defaults`.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Options> = {}
): Layer.Layer<LogStore.LogStore | OutboxStore, InvalidConfig | StoreError, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), layer))

/**
 * Log mode in memory: a {@link LogStore.LogStore} with the semantics of `PgLogStore`, and the
 * `OutboxStore` whose `append` writes into it, for tests and demos.
 *
 * Transactions behave as PostgreSQL's do where log mode depends on it: a transaction gets its id at
 * its first append, its events become visible at its commit (and never after a rollback), and reads
 * stop before the oldest transaction still open, so an event that commits late is read in its
 * place instead of being skipped. Leases, retry delays and retention read the `Clock`, so tests run
 * on `TestClock`.
 * @since 0.1.0
 * @module
 */
import { Clock, Context, Duration, Effect, Exit, Layer, Option, Schema } from "effect"
import { type InvalidConfig, NotInTransaction, Rejected, StoreError } from "./Errors.ts"
import { memoryLogAdmin } from "./internal/memoryLogAdmin.ts"
import { type Cursor, firstAfter, MemoryLog, type Row } from "./internal/memoryLogState.ts"
import * as LogStore from "./LogStore.ts"
import type { Message } from "./Message.ts"
import * as OutboxStore from "./OutboxStore.ts"
import * as Settings from "./Settings.ts"

/**
 * Options of the memory log store.
 * @since 0.1.0
 * @category config
 */
export const ConfigSchema: Schema.Struct<{ readonly partitions: Settings.Defaulted<Settings.IntSetting> }> = Schema
  .Struct({
    /** The stream's partition count. */
    partitions: Settings.int(1, 4096).pipe(Schema.withDecodingDefault(Effect.succeed(16)))
  })

/**
 * @since 0.1.0
 * @category config
 */
export type Config = typeof ConfigSchema.Encoded

interface Transaction {
  tx: number | undefined
  readonly appends: Array<ReadonlyArray<Message>>
  readonly commits: Array<() => void>
  readonly afterCommit: Array<Effect.Effect<void>>
}

/**
 * The store's two faces: the log, and the outbox whose `append` writes into it.
 * @since 0.1.0
 * @category models
 */
export interface Stores {
  readonly log: LogStore.Service
  readonly outbox: OutboxStore.Service
}

let instances = 0

/**
 * The rows' partition by ordering key, as every log store computes it.
 * @since 0.1.0
 * @category partitioning
 */
export const partitionOf = LogStore.partitionOf

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
 * Builds a fresh memory log: its `LogStore` and its `OutboxStore` facade.
 * @since 0.1.0
 * @category constructors
 */
export const make = (config: Config = {}): Effect.Effect<Stores, InvalidConfig> =>
  Effect.gen(function*() {
    const { partitions } = yield* Settings.decode(ConfigSchema, config)
    const log = new MemoryLog(partitions)
    const Tx = Context.Service<Transaction>(`@tidings/core/MemoryLogStore/Transaction/${++instances}`)

    const commitNow = (tx: Transaction, now: number) => {
      if (tx.tx !== undefined) {
        for (const messages of tx.appends) {
          for (const message of messages) appendRow(tx.tx, message, now, null)
        }
        log.open.delete(tx.tx)
      }
      for (const apply of tx.commits) apply()
    }
    const appendRow = (tx: number, message: Message, now: number, onlyGroups: ReadonlyArray<string> | null) => {
      const partition = LogStore.partitionOf(message.orderingKey, partitions)
      const seq = ++log.seq
      const row: Row = { partition, tx, seq, position: { tx: String(tx), seq }, message, createdAt: now, onlyGroups }
      log.insert(row)
    }

    const withTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.flatMap(Effect.serviceOption(Tx), (open) => {
        if (Option.isSome(open)) return effect
        const tx: Transaction = { tx: undefined, appends: [], commits: [], afterCommit: [] }
        return Effect.provideService(effect, Tx, tx).pipe(
          Effect.onExit((exit) =>
            Effect.flatMap(Clock.currentTimeMillis, (now) => {
              if (Exit.isFailure(exit)) {
                if (tx.tx !== undefined) log.open.delete(tx.tx)
                return Effect.void
              }
              commitNow(tx, now)
              return Effect.forEach(tx.afterCommit, (f) => f, { discard: true })
            })
          )
        )
      })

    const inTx = <A>(f: (tx: Transaction, now: number) => A): Effect.Effect<Option.Option<A>> =>
      Effect.flatMap(Effect.serviceOption(Tx), (open) =>
        Option.isNone(open)
          ? Effect.succeedNone
          : Effect.map(Clock.currentTimeMillis, (now) => Option.some(f(open.value, now))))

    const append = (messages: ReadonlyArray<Message>): Effect.Effect<void, NotInTransaction> =>
      Effect.flatMap(
        inTx((tx, now) => {
          if (tx.tx === undefined) {
            tx.tx = log.nextTx++
            log.open.set(tx.tx, now)
          }
          tx.appends.push(messages)
        }),
        (done) =>
          Option.isSome(done)
            ? Effect.void
            : Effect.fail(
              new NotInTransaction({ message: "Outbox.append must run inside a transaction (withTransaction)" })
            )
      )

    const cursorsFor = (group: string, startFrom: "earliest" | "latest"): Array<Cursor> => {
      const existing = log.cursorsOf(group)
      if (existing !== undefined) {
        return existing
      }
      const created = Array.from({ length: partitions }, (_, p): Cursor => ({
        cursor: startFrom === "latest" ? log.latest(p) : LogStore.origin,
        owner: null,
        epoch: 0,
        leaseUntil: 0,
        inflight: null,
        suspect: null,
        crashes: 0,
        headAttempts: 0,
        retryAt: 0,
        lastError: null
      }))
      log.cursors.set(group, created)
      return created
    }

    const now = Clock.currentTimeMillis

    const store: LogStore.Service = {
      partitions,
      withTransaction,
      join: ({ group, lease, member, startFrom }) =>
        Effect.map(now, (t) => {
          cursorsFor(group, startFrom)
          const members = log.members.get(group) ?? new Map<string, number>()
          log.members.set(group, members)
          members.set(member, t + Duration.toMillis(lease))
          return [...members].filter(([, until]) => until > t).map(([m]) => m).sort()
        }),
      leave: (group, member) => Effect.sync(() => void log.members.get(group)?.delete(member)),
      acquire: (group, member, wanted, lease) =>
        Effect.map(now, (t) => {
          const cursors = log.cursorsOf(group)
          if (cursors === undefined) return []
          const out: Array<LogStore.PartitionState> = []
          for (const p of wanted) {
            const c = cursors[p]
            if (c === undefined || !(c.owner === null || c.owner === member || c.leaseUntil < t)) continue
            // Taken from an owner that died with a batch in flight: a crash against the head.
            if (c.inflight !== null && c.owner !== null && c.owner !== member) {
              c.crashes++
              c.suspect = c.suspect === null || LogStore.compare(c.inflight, c.suspect) > 0 ? c.inflight : c.suspect
            }
            c.inflight = null
            c.owner = member
            c.epoch++
            c.leaseUntil = t + Duration.toMillis(lease)
            out.push(log.state(p, c, t))
          }
          return out
        }),
      renew: (group, member, leases, lease) =>
        Effect.map(now, (t) =>
          leases.flatMap((l) => {
            const c = log.held(group, member, l)
            if (c === undefined) return []
            c.leaseUntil = t + Duration.toMillis(lease)
            return [l.partition]
          })),
      release: (group, member, leases) =>
        Effect.sync(() => {
          for (const l of leases) {
            const c = log.held(group, member, l)
            if (c === undefined) continue
            c.owner = null
            c.leaseUntil = 0
            c.inflight = null
          }
        }),
      read: (group, member, requests) =>
        Effect.sync(() => {
          const xmin = log.xmin()
          const events: Array<LogStore.LogEvent> = []
          const lost: Array<number> = []
          const heldBack: Array<number> = []
          for (const r of requests) {
            const c = log.held(group, member, r)
            if (c === undefined) {
              lost.push(r.partition)
              continue
            }
            const list = log.rows[r.partition]!
            let last: LogStore.Position | undefined
            let taken = 0
            for (let i = firstAfter(list, r.after); i < list.length && taken < r.limit; i++) {
              const row = list[i]!
              if (row.tx >= xmin) {
                heldBack.push(r.partition)
                break
              }
              last = row.position
              if (row.onlyGroups !== null && !row.onlyGroups.includes(group)) continue
              events.push({
                partition: row.partition,
                position: row.position,
                message: { ...row.message, headers: row.message.headers }
              })
              taken++
            }
            if (last !== undefined) c.inflight = last
          }
          return { events, lost, heldBack }
        }),
      settle: (group, member, settlements) =>
        Effect.flatMap(Effect.serviceOption(Tx), (open) =>
          Effect.map(now, (t) => {
            const accepted = settlements.flatMap((s) => {
              const c = log.held(group, member, s)
              return c === undefined ? [] : [{ s, c }]
            })
            if (Option.isNone(open)) {
              return accepted.map(({ c, s }) => {
                log.recordFailed(group, s, t)
                MemoryLog.advance(c, s, t)
                return log.state(s.partition, c, t)
              })
            }
            // In a transaction the cursors move at its commit, with the handler's writes, if the
            // leases still hold then; until then the states are what the commit will leave.
            open.value.commits.push(() => {
              for (const { c, s } of accepted) {
                if (c.owner !== member || c.epoch !== s.epoch) continue
                log.recordFailed(group, s, t)
                MemoryLog.advance(c, s, t)
              }
            })
            return accepted.map(({ c, s }) => {
              const copy: Cursor = { ...c }
              MemoryLog.advance(copy, s, t)
              return log.state(s.partition, copy, t)
            })
          })),
      prune: ({ limit, olderThan }) =>
        Effect.map(now, (t) => {
          const cutoff = t - Duration.toMillis(olderThan)
          const groups = [...log.cursors.values()]
          if (groups.length === 0) return 0
          let n = 0
          for (let p = 0; p < partitions && n < limit; p++) {
            let horizon = groups[0]![p]!.cursor
            for (const g of groups) if (LogStore.compare(g[p]!.cursor, horizon) < 0) horizon = g[p]!.cursor
            const list = log.rows[p]!
            let k = 0
            while (
              k < list.length && n + k < limit && LogStore.compare(list[k]!.position, horizon) <= 0 &&
              list[k]!.createdAt < cutoff
            ) k++
            list.splice(0, k)
            n += k
          }
          return n
        }),
      horizon: Effect.map(now, (t) => {
        let oldest: number | undefined
        for (const at of log.open.values()) if (oldest === undefined || at < oldest) oldest = at
        return {
          oldestOpenTransactionAgeMs: oldest === undefined ? null : Math.max(0, t - oldest),
          detail: oldest === undefined ? null : "a memory transaction"
        }
      }),
      groups: Effect.map(now, (t) =>
        [...log.cursors].map(([group, cursors]) => ({
          group,
          members: [...(log.members.get(group) ?? new Map<string, number>())].filter(([, until]) => until > t).map((
            [m]
          ) => m).sort(),
          lag: cursors.reduce((n, c, p) => n + log.rows[p]!.length - firstAfter(log.rows[p]!, c.cursor), 0),
          retrying: cursors.filter((c) => c.headAttempts > 0).length
        }))),
      dropGroup: (group) =>
        Effect.sync(() => {
          log.cursors.delete(group)
          log.members.delete(group)
        })
    }

    const admin = memoryLogAdmin(log, (entries, t) => {
      const tx = log.nextTx++
      for (const e of entries) appendRow(tx, e.message, t, e.onlyGroups)
    })
    const outbox: OutboxStore.Service = {
      append: (messages) => append(messages),
      withTransaction,
      afterCommit: (effect) =>
        Effect.flatMap(Effect.serviceOption(Tx), (open) =>
          Option.match(open, {
            onNone: () => effect,
            onSome: (tx) => Effect.sync(() => void tx.afterCommit.push(effect))
          })),
      inTransaction: Effect.map(Effect.serviceOption(Tx), Option.isSome),
      defersAfterCommit: Effect.map(Effect.serviceOption(Tx), Option.isSome),
      claim: () => logMode("claim"),
      settle: () => logMode("settle"),
      settleAndClaim: () => logMode("settleAndClaim"),
      release: () => logMode("release"),
      reclaimExpired: () => logMode("reclaimExpired"),
      claimSuspect: () => logMode("claimSuspect"),
      // Published rows are never kept in the outbox table in log mode: the log's own retention prunes.
      prune: () => Effect.succeed(0),
      stats: Effect.sync(() => ({
        pending: 0,
        processing: 0,
        published: 0,
        failed: log.failed.size,
        suspect: 0,
        oldestPendingAgeMs: null
      })),
      listFailed: ({ limit }) =>
        Effect.sync(() =>
          [...log.failed.values()].slice(0, limit).map((f) => ({
            message: f.message,
            attempts: f.attempts,
            lastError: f.lastError,
            createdAt: new Date(f.createdAt)
          }))
        ),
      // A retried event is appended to the log again, for the groups that failed it only.
      retryFailed: (ids) => admin.requeue((ids ?? [...log.failed.keys()]).filter((id) => log.failed.has(id))),
      discardFailed: (ids) => Effect.sync(() => ids.reduce((n, id) => n + (log.failed.delete(id) ? 1 : 0), 0)),
      ...admin
    }
    return { log: store, outbox }
  })

/**
 * A fresh memory log as both the `LogStore` and the `OutboxStore` (appends go to the log).
 * @since 0.1.0
 * @category layers
 */
export const layer = (config: Config = {}): Layer.Layer<LogStore.LogStore | OutboxStore.OutboxStore, InvalidConfig> =>
  Layer.effectContext(
    Effect.map(
      make(config),
      ({ log, outbox }) => Context.make(LogStore.LogStore, log).pipe(Context.add(OutboxStore.OutboxStore, outbox))
    )
  )

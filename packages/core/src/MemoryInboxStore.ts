/**
 * The inbox store in memory, with the semantics of the Postgres one (the same contract tests):
 * transactions run one at a time (a store-wide lock held from begin to commit, like row locks held
 * to the end) and write to an overlay that is applied on success and dropped on failure, so a failed
 * handler leaves nothing behind. For tests and demos.
 * @since 0.1.0
 * @module
 */
import { Clock, Context, Duration, Effect, Exit, Layer, Option, Semaphore } from "effect"
import { NotInTransaction } from "./Errors.ts"
import * as InboxStore from "./InboxStore.ts"
import { pruneRows } from "./internal/pruneRows.ts"

type Row = InboxStore.InboxRecord & { readonly startedBy: string | null }

const toRecord = ({ startedBy: _, ...record }: Row): InboxStore.InboxRecord => record

interface Transaction {
  readonly rows: Map<string, Row>
  /** Rows deleted in the transaction (a replay's reset), unless written again after. */
  readonly deleted: Set<string>
  readonly positions: Map<string, number>
}

let instances = 0

const key = (a: string, b: string) => JSON.stringify([a, b])

const compare = (a: string, b: string) => a < b ? -1 : a > b ? 1 : 0

/**
 * Builds a fresh in-memory inbox store (one per call).
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<InboxStore.Service> = Effect.gen(function*() {
  const Tx = Context.Service<Transaction>(`@tidings/core/MemoryInboxStore/Transaction/${++instances}`)
  const lock = yield* Semaphore.make(1)
  const rows = new Map<string, Row>()
  const positions = new Map<string, number>()

  const currentTx = Effect.serviceOption(Tx)

  /** Runs `f` with the open transaction, or alone under the lock as its own short transaction. */
  const write = <A>(f: (tx: Transaction, now: number) => A): Effect.Effect<A> =>
    withTransaction(
      Effect.flatMap(currentTx, (open) => Effect.map(Clock.currentTimeMillis, (now) => f(Option.getOrThrow(open), now)))
    )

  const readRow = (tx: Transaction | undefined, k: string) =>
    tx?.rows.get(k) ?? (tx?.deleted.has(k) === true ? undefined : rows.get(k))

  /** The committed rows, overlaid with the open transaction's writes. */
  const visible = (tx: Transaction | undefined): Array<Row> => {
    if (tx === undefined || (tx.rows.size === 0 && tx.deleted.size === 0)) return [...rows.values()]
    const merged = new Map(rows)
    for (const k of tx.deleted) merged.delete(k)
    for (const [k, row] of tx.rows) merged.set(k, row)
    return [...merged.values()]
  }

  const withTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(currentTx, (open) => {
      if (Option.isSome(open)) return effect
      const tx: Transaction = { rows: new Map(), deleted: new Set(), positions: new Map() }
      return lock.withPermits(1)(
        Effect.provideService(effect, Tx, tx).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              if (Exit.isFailure(exit)) return
              for (const k of tx.deleted) rows.delete(k)
              for (const [k, row] of tx.rows) rows.set(k, row)
              for (const [k, p] of tx.positions) positions.set(k, p)
            })
          )
        )
      )
    })

  const requireTx = Effect.flatMap(currentTx, (open) =>
    Option.match(open, {
      onNone: () =>
        Effect.fail(
          new NotInTransaction({ message: "this inbox operation must run inside a transaction (withTransaction)" })
        ),
      onSome: (tx) => Effect.succeed(tx)
    }))

  const service: InboxStore.Service = {
    withTransaction,
    begin: (messageId, consumer, instance) =>
      write((tx, now) => {
        const k = key(messageId, consumer)
        const row = readRow(tx, k)
        if (row === undefined) {
          const created: Row = {
            messageId,
            consumer,
            status: "processing",
            attempts: 1,
            finishedAttempts: 0,
            crashes: 0,
            startedBy: instance,
            receivedAt: new Date(now),
            processedAt: null,
            lastError: null
          }
          tx.rows.set(k, created)
          return toRecord(created)
        }
        if (row.status !== "processing") return toRecord(row)
        const crashed = row.attempts > row.finishedAttempts + row.crashes && row.startedBy !== instance
        const next = {
          ...row,
          attempts: row.attempts + 1,
          crashes: row.crashes + (crashed ? 1 : 0),
          startedBy: instance
        }
        tx.rows.set(k, next)
        return toRecord(next)
      }),
    markProcessed: (messageId, consumer) =>
      Effect.flatMap(requireTx, (tx) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const k = key(messageId, consumer)
          const row = readRow(tx, k)
          if (row !== undefined && row.status !== "processing") return false
          tx.rows.set(k, {
            messageId,
            consumer,
            status: "processed",
            attempts: row?.attempts ?? 1,
            finishedAttempts: (row?.finishedAttempts ?? 0) + 1,
            crashes: row?.crashes ?? 0,
            startedBy: row?.startedBy ?? null,
            receivedAt: row?.receivedAt ?? new Date(now),
            processedAt: new Date(now),
            lastError: null
          })
          return true
        })),
    recordFailure: (messageId, consumer, error) =>
      write((tx) => {
        const k = key(messageId, consumer)
        const row = readRow(tx, k)
        if (row === undefined || row.status !== "processing") return
        tx.rows.set(k, { ...row, finishedAttempts: row.finishedAttempts + 1, lastError: error })
      }),
    markFailed: (messageId, consumer, reason) =>
      write((tx, now) => {
        const k = key(messageId, consumer)
        const row = readRow(tx, k)
        tx.rows.set(k, {
          messageId,
          consumer,
          status: "failed",
          attempts: row?.attempts ?? 0,
          finishedAttempts: row?.finishedAttempts ?? 0,
          crashes: row?.crashes ?? 0,
          startedBy: row?.startedBy ?? null,
          receivedAt: row?.receivedAt ?? new Date(now),
          processedAt: row?.processedAt ?? null,
          lastError: reason
        })
      }),
    resetFailed: (messageId, consumer) =>
      write((tx) => {
        const k = key(messageId, consumer)
        if (readRow(tx, k)?.status !== "failed") return false
        tx.rows.delete(k)
        tx.deleted.add(k)
        return true
      }),
    get: (messageId, consumer) =>
      Effect.map(currentTx, (open) => {
        const row = readRow(Option.getOrUndefined(open), key(messageId, consumer))
        return row === undefined ? undefined : toRecord(row)
      }),
    list: ({ consumer, limit, status }) =>
      Effect.map(currentTx, (open) =>
        visible(Option.getOrUndefined(open))
          .filter((row) =>
            (status === undefined || row.status === status) && (consumer === undefined || row.consumer === consumer)
          )
          .sort((a, b) =>
            b.receivedAt.getTime() - a.receivedAt.getTime() || compare(a.messageId, b.messageId) ||
            compare(a.consumer, b.consumer)
          )
          .slice(0, Math.max(0, limit))
          .map(toRecord)),
    count: (options = {}) =>
      Effect.map(currentTx, (open) => {
        const counts = { processing: 0, processed: 0, failed: 0 }
        for (const row of visible(Option.getOrUndefined(open))) {
          if (options.consumer === undefined || row.consumer === options.consumer) counts[row.status]++
        }
        return counts
      }),
    prune: ({ limit, olderThan }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const cutoff = now - Duration.toMillis(olderThan)
        return pruneRows(rows, limit, (row) => row.receivedAt.getTime() < cutoff)
      }),
    lockPosition: (projection, aggregateId) =>
      Effect.map(requireTx, (tx) => {
        const k = key(projection, aggregateId)
        return tx.positions.get(k) ?? positions.get(k) ?? 0
      }),
    setPosition: (projection, aggregateId, position) =>
      Effect.map(requireTx, (tx) => void tx.positions.set(key(projection, aggregateId), position)),
    position: (projection, aggregateId) =>
      Effect.map(currentTx, (open) => {
        const k = key(projection, aggregateId)
        return (Option.isSome(open) ? open.value.positions.get(k) : undefined) ?? positions.get(k) ?? 0
      })
  }
  return service
})

/**
 * A fresh in-memory inbox store as the `InboxStore` layer.
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<InboxStore.InboxStore> = Layer.effect(InboxStore.InboxStore, make)

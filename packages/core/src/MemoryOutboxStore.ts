/**
 * The outbox store in memory, with the same semantics as the Postgres store (transactions that
 * commit or roll back, leases, suspects and the crash-loop guard, per-key order, retention), and
 * the same contract suite. Time comes from `Clock`, so tests can drive it with `TestClock`. For
 * tests, demos and the in-process examples; nothing survives the process.
 * @since 0.1.0
 * @module
 */
import { Clock, Context, Duration, Effect, Layer, Option } from "effect"
import * as EagerDispatch from "./EagerDispatch.ts"
import { NotInTransaction } from "./Errors.ts"
import { pruneRows } from "./internal/pruneRows.ts"
import type { Message } from "./Message.ts"
import * as OutboxStore from "./OutboxStore.ts"

interface Row {
  readonly message: Message
  /** Commit order: stands in for Postgres's (tx_id, seq); memory commits are atomic and ordered. */
  readonly seq: number
  status: OutboxStore.Status
  attempts: number
  finishedAttempts: number
  availableAt: number
  claimedBy: string | null
  claimedUntil: number
  lastError: string | null
  readonly createdAt: number
  publishedAt: number | null
}

interface Transaction {
  readonly appends: Array<
    { readonly messages: ReadonlyArray<Message>; readonly claim: OutboxStore.AppendClaim | undefined }
  >
  readonly afterCommit: Array<Effect.Effect<void>>
}

let instances = 0

const unsettled = (row: Row) => row.status === "pending" || row.status === "processing" || row.status === "suspect"

/**
 * Builds a fresh in-memory store (one per run). Mutations are synchronous, so each one is atomic,
 * as a statement would be.
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<OutboxStore.Service> = Effect.sync(() => {
  // One key per store instance, so two memory stores never join each other's transactions.
  const Tx = Context.Service<Transaction>(`@tidings/core/MemoryOutboxStore/Transaction/${++instances}`)
  const rows = new Map<string, Row>()
  let seq = 0

  const withTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.serviceOption(Tx), (open) => {
      if (Option.isSome(open)) return effect
      const tx: Transaction = { appends: [], afterCommit: [] }
      return Effect.provideService(effect, Tx, tx).pipe(
        Effect.tap(() =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => {
            for (const { claim, messages } of tx.appends) {
              for (const message of messages) {
                rows.set(message.id, {
                  message,
                  seq: ++seq,
                  status: claim === undefined ? "pending" : "processing",
                  attempts: claim === undefined ? 0 : 1,
                  finishedAttempts: 0,
                  availableAt: now,
                  claimedBy: claim?.relayId ?? null,
                  claimedUntil: claim === undefined ? 0 : now + Duration.toMillis(claim.lease),
                  lastError: null,
                  createdAt: now,
                  publishedAt: null
                })
              }
            }
            return Effect.forEach(tx.afterCommit, (f) => f, { discard: true })
          })
        )
      )
    })

  const inTransaction = Effect.map(Effect.serviceOption(Tx), Option.isSome)

  const claimedBy = (relayId: string, id: string): Row | undefined => {
    const row = rows.get(id)
    return row !== undefined && row.status === "processing" && row.claimedBy === relayId ? row : undefined
  }

  const take = (row: Row, relayId: string, lease: Duration.Duration, now: number): OutboxStore.ClaimedEvent => {
    row.status = "processing"
    row.attempts++
    row.claimedBy = relayId
    row.claimedUntil = now + Duration.toMillis(lease)
    return { message: row.message, attempts: row.attempts, createdAt: new Date(row.createdAt) }
  }

  const claimNow = (options: OutboxStore.ClaimOptions, now: number): Array<OutboxStore.ClaimedEvent> => {
    const { batchSize, lease, relayId } = options
    if (options.ordering !== "per-key") {
      const due: Array<Row> = []
      for (const row of rows.values()) {
        if (row.status === "pending" && row.availableAt <= now) due.push(row)
      }
      due.sort((a, b) => a.availableAt - b.availableAt || a.seq - b.seq)
      return due.slice(0, batchSize).map((row) => take(row, relayId, lease, now))
    }
    // per-key: a key is claimable when its first unsettled event is pending and due; then take the
    // consecutive due events that follow it.
    const byKey = new Map<string, Array<Row>>()
    for (const row of rows.values()) {
      if (!unsettled(row)) continue
      const list = byKey.get(row.message.orderingKey)
      if (list === undefined) byKey.set(row.message.orderingKey, [row])
      else list.push(row)
    }
    const keys = [...byKey.keys()].sort()
    const start = options.afterKey === undefined ? 0 : keys.findIndex((k) => k > options.afterKey!)
    const ordered = start <= 0 ? keys : [...keys.slice(start), ...keys.slice(0, start)]
    const out: Array<OutboxStore.ClaimedEvent> = []
    for (const key of ordered) {
      if (out.length >= batchSize) break
      const list = byKey.get(key)!.sort((a, b) => a.seq - b.seq)
      for (const row of list) {
        if (out.length >= batchSize || row.status !== "pending" || row.availableAt > now) break
        out.push(take(row, relayId, lease, now))
      }
    }
    return out
  }

  const settleNow = (relayId: string, settlement: OutboxStore.Settlement, now: number): number => {
    let n = 0
    const finish = (id: string, update: Partial<Row>) => {
      const row = claimedBy(relayId, id)
      if (row === undefined) return
      Object.assign(row, { ...update, claimedBy: null, claimedUntil: 0, finishedAttempts: row.finishedAttempts + 1 })
      n++
    }
    for (const id of settlement.published) finish(id, { status: "published", publishedAt: now })
    for (const { delay, error, id } of settlement.retry) {
      finish(id, { status: "pending", availableAt: now + Duration.toMillis(delay), lastError: error })
    }
    for (const { error, id } of settlement.failed) finish(id, { status: "failed", lastError: error })
    for (const id of settlement.released ?? []) {
      const row = claimedBy(relayId, id)
      if (row === undefined) continue
      // The claim counted the attempt as started; giving the row back takes that back. An attempt
      // still unfinished after that is an earlier crash: the row stays a suspect.
      const attempts = Math.max(0, row.attempts - 1)
      const status = attempts > row.finishedAttempts ? "suspect" : "pending"
      Object.assign(row, { status, attempts, claimedBy: null, claimedUntil: 0 })
      n++
    }
    return n
  }

  const stored = (row: Row): OutboxStore.StoredEvent => ({
    message: row.message,
    status: row.status,
    attempts: row.attempts,
    lastError: row.lastError,
    createdAt: new Date(row.createdAt),
    availableAt: new Date(row.availableAt),
    publishedAt: row.publishedAt === null ? null : new Date(row.publishedAt),
    claimedBy: row.claimedBy,
    claimedUntil: row.claimedBy === null ? null : new Date(row.claimedUntil)
  })

  const service: OutboxStore.Service = {
    append: (messages, claim) =>
      Effect.flatMap(Effect.serviceOption(Tx), (open) =>
        Option.match(open, {
          onNone: () =>
            Effect.fail(
              new NotInTransaction({ message: "Outbox.append must run inside a transaction (withTransaction)" })
            ),
          onSome: (tx) => Effect.sync(() => void tx.appends.push({ messages, claim }))
        })),
    withTransaction,
    afterCommit: (effect) =>
      Effect.flatMap(
        Effect.serviceOption(Tx),
        (open) =>
          Option.match(open, {
            onNone: () => effect,
            onSome: (tx) => Effect.sync(() => void tx.afterCommit.push(effect))
          })
      ),
    inTransaction,
    // Every transaction of this store defers its after-commit work.
    defersAfterCommit: inTransaction,
    claim: (options) => Effect.map(Clock.currentTimeMillis, (now) => claimNow(options, now)),
    settle: (relayId, settlement) => Effect.map(Clock.currentTimeMillis, (now) => settleNow(relayId, settlement, now)),
    settleAndClaim: (relayId, settlement, next) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        settleNow(relayId, settlement, now)
        return claimNow(next, now)
      }),
    release: (relayId, ids) =>
      Effect.sync(() => settleNow(relayId, { published: [], retry: [], failed: [], released: ids }, 0)),
    reclaimExpired: ({ maxCrashes }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const result = { suspect: 0, failed: 0 }
        for (const row of rows.values()) {
          if (row.status !== "processing" || row.claimedUntil >= now) continue
          const crashes = row.attempts - row.finishedAttempts
          if (crashes >= maxCrashes) {
            Object.assign(row, {
              status: "failed",
              lastError: `crash loop: ${crashes} publish attempts started and none finished`,
              claimedBy: null,
              claimedUntil: 0
            })
            result.failed++
          } else {
            Object.assign(row, {
              status: "suspect",
              lastError: "lease expired: the relay holding it stopped",
              claimedBy: null,
              claimedUntil: 0
            })
            result.suspect++
          }
        }
        return result
      }),
    claimSuspect: ({ lease, ordering, relayId }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (ordering !== "per-key") {
          let oldest: Row | undefined
          for (const row of rows.values()) {
            if (row.status === "suspect" && (oldest === undefined || row.seq < oldest.seq)) oldest = row
          }
          return oldest === undefined ? undefined : take(oldest, relayId, lease, now)
        }
        // Per key, the oldest suspect that heads its key: an earlier unsettled event of the key goes first.
        const heads = new Map<string, Row>()
        for (const row of rows.values()) {
          if (!unsettled(row)) continue
          const head = heads.get(row.message.orderingKey)
          if (head === undefined || row.seq < head.seq) heads.set(row.message.orderingKey, row)
        }
        let oldest: Row | undefined
        for (const row of heads.values()) {
          if (row.status === "suspect" && (oldest === undefined || row.seq < oldest.seq)) oldest = row
        }
        return oldest === undefined ? undefined : take(oldest, relayId, lease, now)
      }),
    prune: ({ limit, olderThan }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const cutoff = now - Duration.toMillis(olderThan)
        return pruneRows(rows, limit, (row) =>
          row.status === "published" && row.publishedAt !== null && row.publishedAt < cutoff)
      }),
    stats: Effect.map(Clock.currentTimeMillis, (now) => {
      const stats = {
        pending: 0,
        processing: 0,
        published: 0,
        failed: 0,
        suspect: 0,
        oldestPendingAgeMs: null as number | null
      }
      let oldest = Infinity
      for (const row of rows.values()) {
        stats[row.status]++
        if (row.status === "pending" && row.createdAt < oldest) oldest = row.createdAt
      }
      if (oldest !== Infinity) stats.oldestPendingAgeMs = Math.max(0, now - oldest)
      return stats
    }),
    listFailed: ({ limit }) =>
      Effect.sync(() => {
        const out: Array<OutboxStore.FailedEvent> = []
        for (const row of rows.values()) {
          if (out.length >= limit) break
          if (row.status === "failed") {
            out.push({
              message: row.message,
              attempts: row.attempts,
              lastError: row.lastError,
              createdAt: new Date(row.createdAt)
            })
          }
        }
        return out
      }),
    retryFailed: (ids) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        let n = 0
        const wanted = ids === undefined ? undefined : new Set(ids)
        for (const row of rows.values()) {
          if (row.status !== "failed" || (wanted !== undefined && !wanted.has(row.message.id))) continue
          Object.assign(row, { status: "pending", attempts: 0, finishedAttempts: 0, availableAt: now })
          n++
        }
        return n
      }),
    list: ({ limit, status, type }) =>
      Effect.sync(() =>
        [...rows.values()]
          .filter((row) =>
            (status === undefined || row.status === status) && (type === undefined || row.message.type === type)
          )
          .sort((a, b) => b.seq - a.seq)
          .slice(0, Math.max(0, limit))
          .map(stored)
      ),
    get: (id) =>
      Effect.sync(() => {
        const row = rows.get(id)
        return row === undefined ? undefined : stored(row)
      }),
    countByType: ({ status }) =>
      Effect.sync(() => {
        const counts = new Map<string, number>()
        for (const row of rows.values()) {
          if (row.status === status) counts.set(row.message.type, (counts.get(row.message.type) ?? 0) + 1)
        }
        return [...counts].map(([type, count]) => ({ type, count })).sort((a, b) =>
          b.count - a.count || (a.type < b.type ? -1 : 1)
        )
      }),
    throughput: ({ minutes }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const current = Math.floor(now / 60_000) * 60_000
        const first = current - (Math.max(1, minutes) - 1) * 60_000
        const counts = new Map<number, number>()
        for (const row of rows.values()) {
          if (row.publishedAt === null || row.publishedAt < first) continue
          const minute = Math.floor(row.publishedAt / 60_000) * 60_000
          counts.set(minute, (counts.get(minute) ?? 0) + 1)
        }
        const out: Array<OutboxStore.MinuteCount> = []
        for (let m = first; m <= current; m += 60_000) out.push({ minute: new Date(m), published: counts.get(m) ?? 0 })
        return out
      }),
    holders: Effect.sync(() => {
      const byHolder = new Map<string, { events: number; until: number }>()
      for (const row of rows.values()) {
        if (row.status !== "processing" || row.claimedBy === null) continue
        const h = byHolder.get(row.claimedBy) ?? { events: 0, until: 0 }
        byHolder.set(row.claimedBy, { events: h.events + 1, until: Math.max(h.until, row.claimedUntil) })
      }
      return [...byHolder].map(([holder, h]) => ({ holder, events: h.events, claimedUntil: new Date(h.until) })).sort((
        a,
        b
      ) => a.holder < b.holder ? -1 : 1)
    }),
    requeue: (ids) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        let n = 0
        for (const id of ids) {
          const row = rows.get(id)
          if (row === undefined || (row.status !== "published" && row.status !== "failed")) continue
          Object.assign(row, {
            status: "pending",
            attempts: 0,
            finishedAttempts: 0,
            availableAt: now,
            publishedAt: null
          })
          n++
        }
        return n
      }),
    discardFailed: (ids) =>
      Effect.sync(() => {
        let n = 0
        for (const id of ids) {
          if (rows.get(id)?.status === "failed") {
            rows.delete(id)
            n++
          }
        }
        return n
      })
  }
  return service
})

/**
 * A fresh in-memory store as a layer, with its eager-dispatch registry (`EagerDispatch`): an app's
 * producers and relay built on this layer share both.
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<OutboxStore.OutboxStore> = Layer.effectContext(
  Effect.map(
    make,
    (store) => Context.make(OutboxStore.OutboxStore, store).pipe(Context.add(EagerDispatch.Lanes, EagerDispatch.make()))
  )
)

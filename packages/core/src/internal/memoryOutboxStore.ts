import { Clock, Context, Duration, Effect, Option } from "effect"
import { NotInTransaction } from "../Errors.ts"
import type { Message } from "../Message.ts"
import type * as OutboxStore from "../OutboxStore.ts"

interface Row {
  readonly message: Message
  readonly seq: number
  status: OutboxStore.Status
  attempts: number
  availableAt: number
  claimedBy: string | null
  claimedUntil: number
  lastError: string | null
  readonly createdAt: number
  publishedAt: number | null
}

interface Transaction {
  readonly messages: Array<Message>
  readonly afterCommit: Array<Effect.Effect<void>>
}

let instances = 0

/** The in-memory store. Mutations are synchronous, so each one is atomic, as a statement would be. */
export const makeMemoryOutboxStore: Effect.Effect<OutboxStore.Service> = Effect.sync(() => {
  // One key per store instance, so two memory stores never join each other's transactions.
  const Tx = Context.Service<Transaction>(`@tidings/core/MemoryOutboxStore/Transaction/${++instances}`)
  const rows = new Map<string, Row>()
  let seq = 0
  let pruning = false

  const withTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.serviceOption(Tx), (open) => {
      if (Option.isSome(open)) return effect
      const tx: Transaction = { messages: [], afterCommit: [] }
      return Effect.provideService(effect, Tx, tx).pipe(
        Effect.tap(() =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => {
            for (const message of tx.messages) {
              rows.set(message.id, {
                message,
                seq: ++seq,
                status: "pending",
                attempts: 0,
                availableAt: now,
                claimedBy: null,
                claimedUntil: 0,
                lastError: null,
                createdAt: now,
                publishedAt: null
              })
            }
            return Effect.forEach(tx.afterCommit, (f) => f, { discard: true })
          })
        )
      )
    })

  const claimedBy = (relayId: string, id: string): Row | undefined => {
    const row = rows.get(id)
    return row !== undefined && row.status === "processing" && row.claimedBy === relayId ? row : undefined
  }

  const service: OutboxStore.Service = {
    append: (messages) =>
      Effect.flatMap(Effect.serviceOption(Tx), (open) =>
        Option.match(open, {
          onNone: () => Effect.fail(new NotInTransaction({ message: "Outbox.append must run inside a transaction (withTransaction)" })),
          onSome: (tx) => Effect.sync(() => void tx.messages.push(...messages))
        })),
    withTransaction,
    afterCommit: (effect) =>
      Effect.flatMap(Effect.serviceOption(Tx), (open) =>
        Option.match(open, { onNone: () => effect, onSome: (tx) => Effect.sync(() => void tx.afterCommit.push(effect)) })),
    claim: ({ batchSize, lease, relayId }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const due: Array<Row> = []
        for (const row of rows.values()) {
          if (row.status === "pending" && row.availableAt <= now) due.push(row)
        }
        due.sort((a, b) => a.availableAt - b.availableAt || a.seq - b.seq)
        return due.slice(0, batchSize).map((row) => {
          row.status = "processing"
          row.attempts++
          row.claimedBy = relayId
          row.claimedUntil = now + Duration.toMillis(lease)
          return { message: row.message, attempts: row.attempts, createdAt: new Date(row.createdAt) }
        })
      }),
    settle: (relayId, settlement) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        let n = 0
        for (const id of settlement.published) {
          const row = claimedBy(relayId, id)
          if (row === undefined) continue
          Object.assign(row, { status: "published", publishedAt: now, claimedBy: null, claimedUntil: 0 })
          n++
        }
        for (const { delay, error, id } of settlement.retry) {
          const row = claimedBy(relayId, id)
          if (row === undefined) continue
          Object.assign(row, { status: "pending", availableAt: now + Duration.toMillis(delay), lastError: error, claimedBy: null, claimedUntil: 0 })
          n++
        }
        for (const { error, id } of settlement.failed) {
          const row = claimedBy(relayId, id)
          if (row === undefined) continue
          Object.assign(row, { status: "failed", lastError: error, claimedBy: null, claimedUntil: 0 })
          n++
        }
        return n
      }),
    release: (relayId, ids) =>
      Effect.sync(() => {
        let n = 0
        for (const id of ids) {
          const row = claimedBy(relayId, id)
          if (row === undefined) continue
          Object.assign(row, { status: "pending", attempts: Math.max(0, row.attempts - 1), claimedBy: null, claimedUntil: 0 })
          n++
        }
        return n
      }),
    reclaimExpired: Effect.map(Clock.currentTimeMillis, (now) => {
      let n = 0
      for (const row of rows.values()) {
        if (row.status === "processing" && row.claimedUntil < now) {
          Object.assign(row, { status: "pending", claimedBy: null, claimedUntil: 0, lastError: "lease expired: the relay holding it stopped" })
          n++
        }
      }
      return n
    }),
    prune: ({ limit, olderThan }) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        if (pruning) return Effect.succeed(undefined)
        pruning = true
        let n = 0
        const cutoff = now - Duration.toMillis(olderThan)
        for (const [id, row] of rows) {
          if (n >= limit) break
          if (row.status === "published" && row.publishedAt !== null && row.publishedAt < cutoff) {
            rows.delete(id)
            n++
          }
        }
        pruning = false
        return Effect.succeed(n)
      }),
    stats: Effect.map(Clock.currentTimeMillis, (now) => {
      const stats = { pending: 0, processing: 0, published: 0, failed: 0, oldestPendingAgeMs: null as number | null }
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
            out.push({ message: row.message, attempts: row.attempts, lastError: row.lastError, createdAt: new Date(row.createdAt) })
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
          Object.assign(row, { status: "pending", attempts: 0, availableAt: now })
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

import { Clock, Effect } from "effect"
import type { Message } from "../Message.ts"
import type * as OutboxStore from "../OutboxStore.ts"
import type { Failed, MemoryLog } from "./memoryLogState.ts"

/** An event appended to the log again, for `onlyGroups` (null: every group). */
export interface Again {
  readonly message: Message
  readonly onlyGroups: ReadonlyArray<string> | null
}

type Admin = Pick<OutboxStore.Service, "list" | "get" | "countByType" | "throughput" | "holders" | "requeue">

const stored = (f: Failed): OutboxStore.StoredEvent => ({
  message: f.message,
  status: "failed",
  attempts: f.attempts,
  lastError: f.lastError,
  createdAt: new Date(f.createdAt),
  availableAt: new Date(f.createdAt),
  publishedAt: null,
  claimedBy: null,
  claimedUntil: null
})

/**
 * The admin views of a memory log's outbox face, as `PgLogStore` shows them: the outbox table of log
 * mode holds failed events only (published events stay in the log until retention, per group), so
 * lists, counts and `get` show the failed table, throughput is zeros and nothing is claimed.
 * `requeue` appends events to the log again: a failed one for the groups that failed it, one still
 * in the log for every group (a replay).
 */
export const memoryLogAdmin = (
  log: MemoryLog,
  appendAgain: (entries: ReadonlyArray<Again>, now: number) => void
): Admin => ({
  list: ({ limit, status, type }) =>
    Effect.sync(() =>
      status !== undefined && status !== "failed" ? [] : [...log.failed.values()]
        .filter((f) => type === undefined || f.message.type === type)
        .reverse()
        .slice(0, Math.max(0, limit))
        .map(stored)
    ),
  get: (id) =>
    Effect.sync(() => {
      const f = log.failed.get(id)
      return f === undefined ? undefined : stored(f)
    }),
  countByType: ({ status }) =>
    Effect.sync(() => {
      if (status !== "failed") return []
      const counts = new Map<string, number>()
      for (const f of log.failed.values()) counts.set(f.message.type, (counts.get(f.message.type) ?? 0) + 1)
      return [...counts].map(([type, count]) => ({ type, count })).sort((a, b) =>
        b.count - a.count || (a.type < b.type ? -1 : 1)
      )
    }),
  throughput: ({ minutes }) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const current = Math.floor(now / 60_000) * 60_000
      const n = Math.max(1, Math.floor(minutes))
      return Array.from({ length: n }, (_, i) => ({ minute: new Date(current - (n - 1 - i) * 60_000), published: 0 }))
    }),
  holders: Effect.succeed([]),
  requeue: (ids) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const again: Array<Again> = []
      for (const id of new Set(ids)) {
        const f = log.failed.get(id)
        if (f !== undefined) {
          log.failed.delete(id)
          again.push({ message: f.message, onlyGroups: f.groups.length === 0 ? null : f.groups })
          continue
        }
        const row = log.rows.flat().find((r) => r.message.id === id)
        if (row !== undefined) again.push({ message: row.message, onlyGroups: null })
      }
      if (again.length > 0) appendAgain(again, now)
      return again.length
    })
})

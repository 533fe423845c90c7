import { Duration } from "effect"
import type * as LogStore from "../LogStore.ts"
import { compare } from "../LogStore.ts"
import type { Message } from "../Message.ts"

/** One event in a memory log. */
export interface Row {
  readonly partition: number
  readonly tx: number
  readonly seq: number
  readonly position: LogStore.Position
  readonly message: Message
  readonly createdAt: number
  /** A retried failed event goes back only to the groups that failed it (null: every group). */
  readonly onlyGroups: ReadonlyArray<string> | null
}

/** A group's cursor row for one partition. */
export interface Cursor {
  cursor: LogStore.Position
  owner: string | null
  epoch: number
  leaseUntil: number
  inflight: LogStore.Position | null
  suspect: LogStore.Position | null
  crashes: number
  headAttempts: number
  retryAt: number
  lastError: string | null
}

/** A failed event (the memory store's failed table). */
export interface Failed {
  readonly message: Message
  readonly attempts: number
  readonly lastError: string
  readonly createdAt: number
  /** The groups that failed it; null for events failed outside the log. */
  readonly groups: ReadonlyArray<string>
}

const byPosition = (a: { readonly position: LogStore.Position }, b: { readonly position: LogStore.Position }) =>
  compare(a.position, b.position)

/** The first index in `rows` (sorted by position) whose position is after `after`. */
export const firstAfter = (rows: ReadonlyArray<Row>, after: LogStore.Position): number => {
  let lo = 0
  let hi = rows.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (compare(rows[mid]!.position, after) <= 0) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * The memory log's data: partitions of rows sorted by position, cursors per group, members, the
 * failed table, and the transactions holding transaction ids. Every method is synchronous, so each
 * is atomic, as a statement would be.
 */
export class MemoryLog {
  readonly rows: Array<Array<Row>>
  readonly cursors = new Map<string, Array<Cursor>>()
  readonly members = new Map<string, Map<string, number>>()
  readonly failed = new Map<string, Failed>()
  /** Transactions holding an id, with the time it was assigned. */
  readonly open = new Map<number, number>()
  nextTx = 1
  seq = 0

  readonly partitions: number

  constructor(partitions: number) {
    this.partitions = partitions
    this.rows = Array.from({ length: partitions }, () => [])
  }

  /** Every transaction below it has ended: what reads may return. */
  xmin(): number {
    let min = this.nextTx
    for (const tx of this.open.keys()) if (tx < min) min = tx
    return min
  }

  insert(row: Row): void {
    const list = this.rows[row.partition]!
    // Commits arrive mostly in order: append, or find the place of a late commit.
    if (list.length === 0 || byPosition(list[list.length - 1]!, row) < 0) list.push(row)
    else list.splice(firstAfter(list, row.position), 0, row)
  }

  /** The last readable position of a partition (where a group that starts from the latest begins). */
  latest(partition: number): LogStore.Position {
    const xmin = this.xmin()
    const list = this.rows[partition]!
    for (let i = list.length - 1; i >= 0; i--) if (list[i]!.tx < xmin) return list[i]!.position
    return { tx: "0", seq: 0 }
  }

  cursorsOf(group: string): Array<Cursor> | undefined {
    return this.cursors.get(group)
  }

  /** The cursor row when `member` holds its lease at `epoch`. */
  held(group: string, member: string, lease: LogStore.Lease): Cursor | undefined {
    const c = this.cursors.get(group)?.[lease.partition]
    return c !== undefined && c.owner === member && c.epoch === lease.epoch ? c : undefined
  }

  state(partition: number, c: Cursor, now: number): LogStore.PartitionState {
    return {
      partition,
      epoch: c.epoch,
      cursor: c.cursor,
      crashes: c.crashes,
      suspectUntil: c.suspect,
      headAttempts: c.headAttempts,
      retryInMs: Math.max(0, c.retryAt - now),
      lastError: c.lastError
    }
  }

  /** Records a settlement's failed events in the failed table. */
  recordFailed(group: string, s: LogStore.Settlement, now: number): void {
    for (const f of s.failed ?? []) {
      const before = this.failed.get(f.event.message.id)
      const groups = [...new Set([...(before?.groups ?? []), group])]
      this.failed.set(f.event.message.id, {
        message: f.event.message,
        attempts: f.attempts,
        lastError: f.error,
        createdAt: now,
        groups
      })
    }
  }

  /** Applies a settlement to a cursor row (the caller checked the fence). */
  static advance(c: Cursor, s: LogStore.Settlement, now: number): void {
    c.inflight = null
    if (s.cursor !== undefined && compare(s.cursor, c.cursor) > 0) {
      c.cursor = s.cursor
      c.headAttempts = 0
      c.retryAt = 0
      c.lastError = null
      const suspect = c.suspect
      // Every event of a crashed batch carries that crash until it is passed.
      c.crashes = suspect !== null && compare(s.cursor, suspect) < 0 ? 1 : 0
      if (suspect !== null && compare(s.cursor, suspect) >= 0) c.suspect = null
    }
    if (s.retry !== undefined) {
      c.headAttempts = s.retry.attempts
      c.retryAt = now + Duration.toMillis(s.retry.delay)
      c.lastError = s.retry.error
    }
  }
}

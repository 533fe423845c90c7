/**
 * The log storage port: log mode's partitioned, append-only event log, read by groups that keep a
 * cursor per partition. `Outbox.append` is unchanged for producers: a log store also provides the
 * `OutboxStore` service, whose `append` writes into the log (the store decides where rows go), so an
 * app switches modes by swapping the store layer.
 *
 * - **Partitions.** An event's partition is a stable hash of its ordering key (FNV-1a, 32 bits, over
 *   the key's UTF-8 bytes) modulo the stream's partition count: {@link partitionOf}. Events of one
 *   partition are read in the order of their writing transactions, then append order.
 * - **Positions.** Each event carries its writer's transaction id (`xid8` on PostgreSQL) and a
 *   sequence: a group's cursor per partition is such a position. Reads only return events of
 *   transactions older than every transaction still running, so an event that commits late is
 *   never skipped: the read waits for it instead.
 * - **Leases and fencing.** The instances of a group split the partitions by lease. Each lease has
 *   an epoch, bumped whenever the partition changes hands; every cursor write names the epoch it
 *   holds, so an instance that lost its lease (paused past it, partitioned away) cannot move the
 *   cursor afterwards.
 * - **Crash-loop guard.** A read marks the batch it hands out as in flight; when a partition is
 *   taken over from an owner whose lease expired with a batch in flight, that owner died (or hung)
 *   publishing it: a crash is counted against the head and the batch's events are retried one at a
 *   time, so that a poison event is found and, after too many crashes, failed.
 *
 * `@tidings/postgres` implements it (`PgLogStore`), {@link MemoryLogStore} in memory; both pass the
 * same tests.
 * @since 0.1.0
 * @module
 */
import { Context, type Duration, type Effect } from "effect"
import type { StoreError } from "./Errors.ts"
import type { Message } from "./Message.ts"

/**
 * A place in a partition: the writing transaction's id (a decimal string: an `xid8` does not fit a
 * JavaScript number in general) and the event's sequence number.
 * @since 0.1.0
 * @category models
 */
export interface Position {
  readonly tx: string
  readonly seq: number
}

/**
 * Before every event: where a new group starts reading (`startFrom: "earliest"`).
 * @since 0.1.0
 * @category constants
 */
export const origin: Position = { tx: "0", seq: 0 }

/**
 * Orders positions: negative when `a` comes first. Transaction ids are compared as integers.
 * @since 0.1.0
 * @category ordering
 */
export const compare = (a: Position, b: Position): number => {
  if (a.tx !== b.tx) return a.tx.length !== b.tx.length ? a.tx.length - b.tx.length : a.tx < b.tx ? -1 : 1
  return a.seq - b.seq
}

/**
 * FNV-1a (32 bits) of a string's UTF-8 bytes: the documented, runtime-independent hash behind
 * {@link partitionOf} (offset basis 2166136261, prime 16777619).
 * @since 0.1.0
 * @category partitioning
 */
export const fnv1a32 = (text: string): number => {
  let h = 0x811c9dc5
  const step = (byte: number) => {
    h ^= byte
    h = Math.imul(h, 0x01000193)
  }
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i)
    const low = c <= 0xdbff && i + 1 < text.length ? text.charCodeAt(i + 1) : 0
    if (c >= 0xd800 && c <= 0xdbff && low >= 0xdc00 && low <= 0xdfff) {
      c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00)
      i++
    } else if (c >= 0xd800 && c <= 0xdfff) {
      c = 0xfffd // a lone surrogate encodes as U+FFFD, as TextEncoder does
    }
    if (c < 0x80) step(c)
    else if (c < 0x800) {
      step(0xc0 | (c >> 6))
      step(0x80 | (c & 0x3f))
    } else if (c < 0x10000) {
      step(0xe0 | (c >> 12))
      step(0x80 | ((c >> 6) & 0x3f))
      step(0x80 | (c & 0x3f))
    } else {
      step(0xf0 | (c >> 18))
      step(0x80 | ((c >> 12) & 0x3f))
      step(0x80 | ((c >> 6) & 0x3f))
      step(0x80 | (c & 0x3f))
    }
  }
  return h >>> 0
}

/**
 * The partition of an ordering key in a stream of `partitions` partitions.
 * @since 0.1.0
 * @category partitioning
 */
export const partitionOf = (orderingKey: string, partitions: number): number => fnv1a32(orderingKey) % partitions

/**
 * An event read from the log.
 * @since 0.1.0
 * @category models
 */
export interface LogEvent {
  readonly partition: number
  readonly position: Position
  readonly message: Message
}

/**
 * A group's state for one partition, as the store holds it: the cursor (everything up to it is
 * done: published or failed), the lease's epoch, and the head's failure and crash bookkeeping.
 * @since 0.1.0
 * @category models
 */
export interface PartitionState {
  readonly partition: number
  /** The lease epoch this owner holds; every write names it. */
  readonly epoch: number
  readonly cursor: Position
  /** Crashes counted against the head (the first event after the cursor). */
  readonly crashes: number
  /** End of a batch whose owner died publishing it: events up to here are handled one at a time. */
  readonly suspectUntil: Position | null
  /** Failed attempts of the head so far (reset when the cursor moves). */
  readonly headAttempts: number
  /** How long until the head may be tried again (milliseconds, 0 when due). */
  readonly retryInMs: number
  readonly lastError: string | null
}

/**
 * A held lease: the partition and the epoch it was acquired with.
 * @since 0.1.0
 * @category models
 */
export interface Lease {
  readonly partition: number
  readonly epoch: number
}

/**
 * What to read from one partition: the events after `after`, at most `limit`.
 * @since 0.1.0
 * @category models
 */
export interface ReadRequest extends Lease {
  readonly after: Position
  readonly limit: number
}

/**
 * What a read returned.
 * @since 0.1.0
 * @category models
 */
export interface ReadResult {
  /** The events, each partition's in order (partitions may interleave). */
  readonly events: ReadonlyArray<LogEvent>
  /** Partitions whose lease this owner no longer holds (another took it over): drop them. */
  readonly lost: ReadonlyArray<number>
  /** Partitions with committed events that could not be read yet: an older transaction is still open. */
  readonly heldBack: ReadonlyArray<number>
}

/**
 * What became of one partition's batch, written in one step and fenced by the epoch.
 * @since 0.1.0
 * @category models
 */
export interface Settlement extends Lease {
  /** The new cursor: the last event done (published or failed). Omitted: the cursor stays. */
  readonly cursor?: Position
  /** Events moved to the failed table (`outbox` rows with status `failed`), their cursor move included in `cursor`. */
  readonly failed?: ReadonlyArray<{ readonly event: LogEvent; readonly error: string; readonly attempts: number }>
  /** The head failed and waits: its attempts so far, the delay before the next, and why. */
  readonly retry?: { readonly attempts: number; readonly delay: Duration.Duration; readonly error: string }
}

/**
 * A group's progress, for the admin views and lag metrics.
 * @since 0.1.0
 * @category models
 */
export interface GroupInfo {
  readonly group: string
  /** Live members (instances) of the group. */
  readonly members: ReadonlyArray<string>
  /** Events not yet behind the group's cursors (readable or not). */
  readonly lag: number
  /** Partitions whose head is waiting for a retry. */
  readonly retrying: number
}

/**
 * How far the log is held back by open transactions (reads stop at the oldest one).
 * @since 0.1.0
 * @category models
 */
export interface Horizon {
  /** Age of the oldest transaction still running that holds a transaction id, if any. */
  readonly oldestOpenTransactionAgeMs: number | null
  /** Something about it for an operator (e.g. the backend's pid and application name). */
  readonly detail: string | null
}

/**
 * The log storage port, used by `LogRelay` and `LogConsumer` (appends go through `OutboxStore`).
 * Every method that writes a group's state is fenced: it only acts on partitions whose lease the
 * member holds with the given epoch.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** The stream's partition count. */
  readonly partitions: number
  /** Runs an effect in a transaction of this store (joining an open one). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /**
   * Registers (or renews) `member` in `group` for `lease`, creating the group's cursors when it is
   * new (at the beginning of the log, or after its last event with `startFrom: "latest"`). Returns
   * the live members, sorted.
   */
  readonly join: (options: {
    readonly group: string
    readonly member: string
    readonly lease: Duration.Duration
    readonly startFrom: "earliest" | "latest"
  }) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /** Removes `member` from `group` (its leases are released separately). */
  readonly leave: (group: string, member: string) => Effect.Effect<void, StoreError>
  /**
   * Takes the leases of `partitions` that are free, expired, or already the member's, bumping
   * their epochs. A lease taken over from an owner that died with a batch in flight counts a crash
   * against the head. Returns the partitions acquired with their state.
   */
  readonly acquire: (
    group: string,
    member: string,
    partitions: ReadonlyArray<number>,
    lease: Duration.Duration
  ) => Effect.Effect<ReadonlyArray<PartitionState>, StoreError>
  /** Extends the member's leases; returns the partitions still held (the others were taken over). */
  readonly renew: (
    group: string,
    member: string,
    leases: ReadonlyArray<Lease>,
    lease: Duration.Duration
  ) => Effect.Effect<ReadonlyArray<number>, StoreError>
  /** Gives leases up (graceful: a batch marked in flight is not a crash). */
  readonly release: (group: string, member: string, leases: ReadonlyArray<Lease>) => Effect.Effect<void, StoreError>
  /**
   * Reads events after each request's position, readable ones only (written by transactions older
   * than every running one), in order, and marks each partition's batch as in flight. The messages
   * returned are fresh objects, the caller's own (a relay sets their `traceparent` in place).
   */
  readonly read: (
    group: string,
    member: string,
    requests: ReadonlyArray<ReadRequest>
  ) => Effect.Effect<ReadResult, StoreError>
  /**
   * Writes batches' outcomes in one step (joining the caller's transaction, if any: a consumer's
   * handlers and its cursor commit together). Returns the new state of each partition whose lease
   * still held; the others were lost, and nothing was written for them.
   */
  readonly settle: (
    group: string,
    member: string,
    settlements: ReadonlyArray<Settlement>
  ) => Effect.Effect<ReadonlyArray<PartitionState>, StoreError>
  /**
   * Deletes up to `limit` events that every group has passed and that are older than `olderThan`.
   * One instance at a time: `undefined` when another holds the retention lock.
   */
  readonly prune: (
    options: { readonly olderThan: Duration.Duration; readonly limit: number }
  ) => Effect.Effect<number | undefined, StoreError>
  /** The oldest open transaction, which holds back reads. */
  readonly horizon: Effect.Effect<Horizon, StoreError>
  /** Every group's members and lag. */
  readonly groups: Effect.Effect<ReadonlyArray<GroupInfo>, StoreError>
  /** Forgets a group for good (its cursors no longer hold retention back). */
  readonly dropGroup: (group: string) => Effect.Effect<void, StoreError>
}

const LogStoreBase: Context.ServiceClass<LogStore, "@tidings/core/LogStore", Service> = Context.Service<
  LogStore,
  Service
>()("@tidings/core/LogStore")

/**
 * The log storage service.
 * @since 0.1.0
 * @category services
 */
export class LogStore extends LogStoreBase {}

/**
 * The inbox storage port: one row per (message id, consumer), recording that a consumer handled a
 * message, so that a redelivery is recognised as a duplicate. `Inbox.handle` is written once against
 * it; `@tidings/postgres` implements it on Postgres and `MemoryInboxStore` in memory, and both pass
 * the same contract tests (`@tidings/core/testing`). The port also keeps projection positions (the last version applied per
 * aggregate), which `Projection` updates in the same transaction as the inbox row.
 * @module
 */
import { Context, type Duration, type Effect } from "effect"
import type { NotInTransaction, StoreError } from "./Errors.ts"

/**
 * `processing`: handling started and has not committed; `processed`: done; `failed`: dead-lettered (crash loop).
 * @since 0.1.0
 * @category models
 */
export type Status = "processing" | "processed" | "failed"

/**
 * One inbox row.
 * @since 0.1.0
 * @category models
 */
export interface InboxRecord {
  readonly messageId: string
  readonly consumer: string
  readonly status: Status
  /** Handling attempts started (each counted in its own committed write, before the handler runs). */
  readonly attempts: number
  /** Handling attempts that finished: committed, or failed and rolled back (recorded after the rollback). */
  readonly finishedAttempts: number
  /**
   * Attempts that never finished and were started by another process instance than the next start:
   * the process died while handling (a concurrent duplicate in the same process is not a crash).
   */
  readonly crashes: number
  readonly receivedAt: Date
  readonly processedAt: Date | null
  readonly lastError: string | null
}

/**
 * What {@link Service.list} returns.
 * @since 0.1.0
 * @category models
 */
export interface ListOptions {
  /** Only rows in this status (e.g. `failed`: the dead letters). */
  readonly status?: Status
  /** Only the rows of this consumer. */
  readonly consumer?: string
  /** At most this many rows. */
  readonly limit: number
}

/**
 * Rows by status.
 * @since 0.1.0
 * @category models
 */
export type Counts = Readonly<Record<Status, number>>

/**
 * The inbox storage port.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** Runs an effect in a transaction of this store (joining an open one). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /**
   * Counts the start of a handling attempt in a short write of its own (call it outside any
   * transaction): creates the row as `processing` with one attempt, or adds an attempt to a row still
   * `processing`. A `processed` or `failed` row is returned unchanged. When an earlier attempt is
   * unfinished (and not yet counted as a crash) and was started by another instance than `instance`,
   * it counts as a crash.
   */
  readonly begin: (messageId: string, consumer: string, instance: string) => Effect.Effect<InboxRecord, StoreError>
  /**
   * In the caller's transaction: marks the message processed (and the attempt finished). Returns
   * false when it was processed already (a concurrent duplicate committed first): the caller then
   * rolls back. Holds the row's lock until the transaction ends, so duplicates serialize.
   */
  readonly markProcessed: (messageId: string, consumer: string) => Effect.Effect<boolean, StoreError | NotInTransaction>
  /** After a failed attempt rolled back: counts it finished and keeps its error (a short write of its own). */
  readonly recordFailure: (messageId: string, consumer: string, error: string) => Effect.Effect<void, StoreError>
  /** Marks the message `failed` (dead-lettered) with the reason. */
  readonly markFailed: (messageId: string, consumer: string, reason: string) => Effect.Effect<void, StoreError>
  /**
   * Forgets a dead-lettered (`failed`) row so that the next delivery of the message is handled
   * again (a replay); false when the row is not `failed`.
   */
  readonly resetFailed: (messageId: string, consumer: string) => Effect.Effect<boolean, StoreError>
  readonly get: (messageId: string, consumer: string) => Effect.Effect<InboxRecord | undefined, StoreError>
  /** Rows for the admin views, most recently received first (ties by message id, then consumer). */
  readonly list: (options: ListOptions) => Effect.Effect<ReadonlyArray<InboxRecord>, StoreError>
  /** How many rows are in each status, over all consumers or one. */
  readonly count: (options?: { readonly consumer?: string }) => Effect.Effect<Counts, StoreError>
  /**
   * Deletes up to `limit` rows received more than `olderThan` ago. One instance prunes at a time:
   * returns `undefined` when another holds the retention lock.
   */
  readonly prune: (
    options: { readonly olderThan: Duration.Duration; readonly limit: number }
  ) => Effect.Effect<number | undefined, StoreError>
  /**
   * In the caller's transaction: the last position (version) applied by `projection` to
   * `aggregateId` (0 when none), locking it until the transaction ends.
   */
  readonly lockPosition: (
    projection: string,
    aggregateId: string
  ) => Effect.Effect<number, StoreError | NotInTransaction>
  /** In the caller's transaction: sets the position (after `lockPosition`). */
  readonly setPosition: (
    projection: string,
    aggregateId: string,
    position: number
  ) => Effect.Effect<void, StoreError | NotInTransaction>
  /** Reads a position without locking (0 when none). */
  readonly position: (projection: string, aggregateId: string) => Effect.Effect<number, StoreError>
}

const InboxStoreBase: Context.ServiceClass<InboxStore, "@tidings/core/InboxStore", Service> = Context.Service<
  InboxStore,
  Service
>()("@tidings/core/InboxStore")

/**
 * The inbox storage service.
 * @since 0.1.0
 * @category services
 */
export class InboxStore extends InboxStoreBase {}

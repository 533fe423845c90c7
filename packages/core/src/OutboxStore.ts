/**
 * The outbox storage port. The relay engine is written once against it; `@tidings/postgres`
 * implements it on Postgres and `MemoryOutboxStore` in memory, and both pass the same contract
 * suite (`outboxStoreContract` in `@tidings/core/testing`, which a third-party store runs too).
 * @since 0.1.0
 * @module
 */
import { Context, type Duration, type Effect } from "effect"
import type { NotInTransaction, StoreError } from "./Errors.ts"
import type { Message } from "./Message.ts"
import * as Messages from "./Message.ts"

/**
 * Lifecycle of an outbox row. `failed` is the dead-letter state, kept for inspection and replay;
 * `suspect` marks an event whose relay died while publishing it (retried alone, failed after too
 * many crashes).
 * @since 0.1.0
 * @category models
 */
export type Status = "pending" | "processing" | "published" | "failed" | "suspect"

/**
 * How events are claimed. `unordered` (the default, and the fastest) takes any due events.
 * `per-key` publishes the events of one ordering key strictly in order, (transaction id, append
 * order), while different keys go in parallel; every relay on a table must use the same mode.
 * @since 0.1.0
 * @category models
 */
export type Ordering = "unordered" | "per-key"

/**
 * A row claimed by a relay: the message plus how often it has been claimed (this claim included).
 * @since 0.1.0
 * @category models
 */
export interface ClaimedEvent {
  readonly message: Message
  readonly attempts: number
  readonly createdAt: Date
}

/**
 * What to claim.
 * @since 0.1.0
 * @category models
 */
export interface ClaimOptions {
  readonly relayId: string
  readonly batchSize: number
  /** How long the claim holds; after it, the row can be reclaimed by another relay. */
  readonly lease: Duration.Duration
  /** Default `unordered`. */
  readonly ordering?: Ordering
  /** `per-key`: resume the walk over keys after this one (spreads concurrent relays over the keys). */
  readonly afterKey?: string
}

/**
 * The outcome of one claimed batch, written back in one statement.
 * @since 0.1.0
 * @category models
 */
export interface Settlement {
  readonly published: ReadonlyArray<string>
  readonly retry: ReadonlyArray<{ readonly id: string; readonly delay: Duration.Duration; readonly error: string }>
  readonly failed: ReadonlyArray<{ readonly id: string; readonly error: string }>
  /**
   * Claimed but not attempted (held back behind a failed event of their key, or not sent because
   * the publisher was unavailable): given back without counting the attempt, as `release` does.
   */
  readonly released?: ReadonlyArray<string>
}

/**
 * What `reclaimExpired` did with rows whose lease expired.
 * @since 0.1.0
 * @category models
 */
export interface Reclaimed {
  /** Made claimable again, as `suspect` (retried alone). */
  readonly suspect: number
  /** Failed for good: their publish kept crashing the relay. */
  readonly failed: number
}

/**
 * Counts by status and the age of the oldest pending event.
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  readonly pending: number
  readonly processing: number
  readonly published: number
  readonly failed: number
  readonly suspect: number
  readonly oldestPendingAgeMs: number | null
}

/**
 * A failed (dead-lettered) event, for the admin views.
 * @since 0.1.0
 * @category models
 */
export interface FailedEvent {
  readonly message: Message
  readonly attempts: number
  readonly lastError: string | null
  readonly createdAt: Date
}

/**
 * An outbox row as the admin views (console, CLI) see it.
 * @since 0.1.0
 * @category models
 */
export interface StoredEvent {
  readonly message: Message
  readonly status: Status
  /** Publish attempts counted (reset by a retry). */
  readonly attempts: number
  /** The error of the last failed attempt: earlier attempts' errors are not kept. */
  readonly lastError: string | null
  readonly createdAt: Date
  /** When the event is due (a retry's backoff ends). */
  readonly availableAt: Date
  readonly publishedAt: Date | null
  /** The relay holding the claim, while `processing`. */
  readonly claimedBy: string | null
  readonly claimedUntil: Date | null
}

/**
 * An outbox row as one plain object, for JSON: the message's fields first (see `Message.toObject`),
 * then its state. What the console's API and `tidings outbox list/show --json` answer.
 * @since 0.1.0
 * @category accessors
 */
export const toObject = (e: StoredEvent): Message & Omit<StoredEvent, "message"> => ({
  ...Messages.toObject(e.message),
  status: e.status,
  attempts: e.attempts,
  lastError: e.lastError,
  createdAt: e.createdAt,
  availableAt: e.availableAt,
  publishedAt: e.publishedAt,
  claimedBy: e.claimedBy,
  claimedUntil: e.claimedUntil
})

/**
 * What {@link Service.list} returns.
 * @since 0.1.0
 * @category options
 */
export interface ListOptions {
  readonly status?: Status
  /** Only events of this type. */
  readonly type?: string
  readonly limit: number
}

/**
 * Events published in one minute.
 * @since 0.1.0
 * @category models
 */
export interface MinuteCount {
  /** The minute's start. */
  readonly minute: Date
  readonly published: number
}

/**
 * A relay (poller or relay group) holding claims right now.
 * @since 0.1.0
 * @category models
 */
export interface Holder {
  readonly holder: string
  readonly events: number
  /** When its latest lease ends. */
  readonly claimedUntil: Date
}

/**
 * Rows written already claimed (eager dispatch): `processing` for `relayId` until the lease ends,
 * their first attempt counted as started, so that the relay in the writer's process publishes them
 * right after the commit without a claim, and a crash before it settles them is recovered like any
 * other expired claim.
 * @since 0.1.0
 * @category models
 */
export interface AppendClaim {
  readonly relayId: string
  readonly lease: Duration.Duration
}

/**
 * The storage port used by `Outbox.append` and the relay.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /**
   * Writes messages in the caller's current transaction, pending or (with `claim`) already claimed;
   * fails with `NotInTransaction` outside one.
   */
  readonly append: (
    messages: ReadonlyArray<Message>,
    claim?: AppendClaim
  ) => Effect.Effect<void, StoreError | NotInTransaction>
  /** Runs an effect in a transaction of this store (joining an open one). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /** Runs `effect` after the current transaction commits (at once outside a transaction). */
  readonly afterCommit: (effect: Effect.Effect<void>) => Effect.Effect<void>
  /** Whether the current fiber is inside a transaction of this store (`append` needs one). */
  readonly inTransaction: Effect.Effect<boolean>
  /**
   * Whether `afterCommit` work waits for the commit of the current transaction (false outside a
   * transaction, or in one whose after-commit hooks would run at once). `Outbox.append` hands
   * events to a relay's eager lane only then: handing them over earlier could publish what may
   * still roll back.
   */
  readonly defersAfterCommit: Effect.Effect<boolean>
  /** Claims up to `batchSize` due events for a lease, in a short transaction of its own. */
  readonly claim: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<ClaimedEvent>, StoreError>
  /** Settles a claimed batch; rows no longer claimed by `relayId` (lease lost) are left alone. */
  readonly settle: (relayId: string, settlement: Settlement) => Effect.Effect<number, StoreError>
  /**
   * Settles one batch and claims the next in a single transaction (one commit per batch instead of
   * two). Returns the new claim.
   */
  readonly settleAndClaim: (
    relayId: string,
    settlement: Settlement,
    next: ClaimOptions
  ) => Effect.Effect<ReadonlyArray<ClaimedEvent>, StoreError>
  /**
   * Gives claimed rows back without counting the attempt (shutdown, an unavailable publisher, the
   * eager lane's overflow): the claim counted it as started, release takes that back, so the
   * crash-loop guard's count (attempts started minus attempts finished) is unchanged. A row goes
   * back to `pending`, or to `suspect` when an earlier attempt of it never finished (a suspect
   * stays isolated).
   */
  readonly release: (relayId: string, ids: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
  /**
   * Takes back rows whose lease expired (their relay died or hung mid-publish): as `suspect`, or as
   * `failed` once `maxCrashes` publish attempts started and none finished.
   */
  readonly reclaimExpired: (options: { readonly maxCrashes: number }) => Effect.Effect<Reclaimed, StoreError>
  /**
   * Claims the oldest `suspect` event, alone, so that a poison event cannot take a batch down with
   * it. `per-key`: only a suspect that heads its key (no earlier unsettled event of the key);
   * `unordered` (default): any suspect, as unordered claims take any due event.
   */
  readonly claimSuspect: (options: {
    readonly relayId: string
    readonly lease: Duration.Duration
    readonly ordering?: Ordering
  }) => Effect.Effect<ClaimedEvent | undefined, StoreError>
  /**
   * Deletes up to `limit` published rows older than `olderThan`. Only one instance prunes at a time:
   * returns `undefined` when another holds the retention lock.
   */
  readonly prune: (
    options: { readonly olderThan: Duration.Duration; readonly limit: number }
  ) => Effect.Effect<number | undefined, StoreError>
  readonly stats: Effect.Effect<Stats, StoreError>
  readonly listFailed: (options: { readonly limit: number }) => Effect.Effect<ReadonlyArray<FailedEvent>, StoreError>
  /** Puts failed events (all when `ids` is omitted) back to pending with their attempts reset. */
  readonly retryFailed: (ids?: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
  /** Deletes failed events for good. */
  readonly discardFailed: (ids: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
  /** Rows for the admin views, newest first. */
  readonly list: (options: ListOptions) => Effect.Effect<ReadonlyArray<StoredEvent>, StoreError>
  /** One row by event id; `undefined` when there is none (or it was pruned). */
  readonly get: (id: string) => Effect.Effect<StoredEvent | undefined, StoreError>
  /** How many rows of `status` each event type has, most first. */
  readonly countByType: (
    options: { readonly status: Status }
  ) => Effect.Effect<ReadonlyArray<{ readonly type: string; readonly count: number }>, StoreError>
  /** Events published per minute over the last `minutes` minutes (this one included), oldest first, zeros included. */
  readonly throughput: (options: { readonly minutes: number }) => Effect.Effect<ReadonlyArray<MinuteCount>, StoreError>
  /** The relays holding claims now, with how many events each. */
  readonly holders: Effect.Effect<ReadonlyArray<Holder>, StoreError>
  /**
   * Puts published or failed events back to pending with their attempts reset, so that the relay
   * publishes them again (a replay: consumers see a redelivery). Returns how many.
   */
  readonly requeue: (ids: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
}

const OutboxStoreBase: Context.ServiceClass<OutboxStore, "@tidings/core/OutboxStore", Service> = Context.Service<
  OutboxStore,
  Service
>()("@tidings/core/OutboxStore")

/**
 * The outbox storage service.
 * @since 0.1.0
 * @category services
 */
export class OutboxStore extends OutboxStoreBase {}

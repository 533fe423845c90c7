/**
 * The outbox storage port. The relay engine is written once against it; `@tidings/postgres`
 * implements it on Postgres and {@link layerMemory} in memory, and both pass the same contract tests.
 * @module
 */
import { Context, type Duration, type Effect, Layer } from "effect"
import type { NotInTransaction, StoreError } from "./Errors.ts"
import { makeMemoryOutboxStore } from "./internal/memoryOutboxStore.ts"
import type { Message } from "./Message.ts"

/** Lifecycle of an outbox row. `failed` is the dead-letter state, kept for inspection and replay. */
export type Status = "pending" | "processing" | "published" | "failed"

/** A row claimed by a relay: the message plus how often it has been claimed (this claim included). */
export interface ClaimedEvent {
  readonly message: Message
  readonly attempts: number
  readonly createdAt: Date
}

/** What to claim. */
export interface ClaimOptions {
  readonly relayId: string
  readonly batchSize: number
  /** How long the claim holds; after it, the row can be reclaimed by another relay. */
  readonly lease: Duration.Duration
}

/** The outcome of one claimed batch, written back in one statement. */
export interface Settlement {
  readonly published: ReadonlyArray<string>
  readonly retry: ReadonlyArray<{ readonly id: string; readonly delay: Duration.Duration; readonly error: string }>
  readonly failed: ReadonlyArray<{ readonly id: string; readonly error: string }>
}

/** Counts by status and the age of the oldest pending event. */
export interface Stats {
  readonly pending: number
  readonly processing: number
  readonly published: number
  readonly failed: number
  readonly oldestPendingAgeMs: number | null
}

/** A failed (dead-lettered) event, for the admin views. */
export interface FailedEvent {
  readonly message: Message
  readonly attempts: number
  readonly lastError: string | null
  readonly createdAt: Date
}

/** The storage port used by `Outbox.append` and the relay. */
export interface Service {
  /** Writes messages in the caller's current transaction; fails with `NotInTransaction` outside one. */
  readonly append: (messages: ReadonlyArray<Message>) => Effect.Effect<void, StoreError | NotInTransaction>
  /** Runs an effect in a transaction of this store (joining an open one). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /** Runs `effect` after the current transaction commits (at once outside a transaction). */
  readonly afterCommit: (effect: Effect.Effect<void>) => Effect.Effect<void>
  /** Claims up to `batchSize` due events for a lease, in a short transaction of its own. */
  readonly claim: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<ClaimedEvent>, StoreError>
  /** Settles a claimed batch; rows no longer claimed by `relayId` (lease lost) are left alone. */
  readonly settle: (relayId: string, settlement: Settlement) => Effect.Effect<number, StoreError>
  /** Gives claimed rows back (shutdown) without counting the attempt. */
  readonly release: (relayId: string, ids: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
  /** Makes rows whose lease expired (their relay crashed) claimable again; returns how many. */
  readonly reclaimExpired: Effect.Effect<number, StoreError>
  /**
   * Deletes up to `limit` published rows older than `olderThan`. Only one instance prunes at a time:
   * returns `undefined` when another holds the retention lock.
   */
  readonly prune: (options: { readonly olderThan: Duration.Duration; readonly limit: number }) => Effect.Effect<number | undefined, StoreError>
  readonly stats: Effect.Effect<Stats, StoreError>
  readonly listFailed: (options: { readonly limit: number }) => Effect.Effect<ReadonlyArray<FailedEvent>, StoreError>
  /** Puts failed events (all when `ids` is omitted) back to pending with their attempts reset. */
  readonly retryFailed: (ids?: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
  /** Deletes failed events for good. */
  readonly discardFailed: (ids: ReadonlyArray<string>) => Effect.Effect<number, StoreError>
}

/** The outbox storage service. */
export class OutboxStore extends Context.Service<OutboxStore, Service>()("@tidings/core/OutboxStore") {}

/** An in-memory store with the same semantics as Postgres (transactions, leases, retention). */
export const layerMemory: Layer.Layer<OutboxStore> = Layer.effect(OutboxStore, makeMemoryOutboxStore)

/** Builds a fresh in-memory store (one per call). */
export const makeMemory: Effect.Effect<Service> = makeMemoryOutboxStore

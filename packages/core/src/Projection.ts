/**
 * CQRS projections: read models kept up to date from events, exactly once and in order per aggregate.
 *
 * A {@link Definition} names the projection (also its inbox consumer name), says where an event sits
 * in its aggregate's history ({@link Position}: the aggregate id and a version counting 1, 2, 3, ...
 * per aggregate) and applies one event to the read table (an upsert). {@link handle} runs it through
 * the inbox, in one transaction with the projection's position for the aggregate:
 *
 * - a message handled before is a duplicate: nothing runs;
 * - an event at or below the aggregate's last applied version is skipped (recorded as handled);
 * - the next version is applied and the position moves to it;
 * - an event beyond the next version is a gap: it fails with the retryable {@link ProjectionGap} and
 *   nothing is written, so the consumer retries it after the missing events (never out of order).
 *
 * Read-your-writes: the write side gets the messages it appended (`Outbox.append` returns them), and
 * {@link awaitApplied} waits, bounded, until the projection has handled a given event id.
 * @module
 */
import { type Cause, Duration, Effect, Schema } from "effect"
import type { Delivery } from "./Consumer.ts"
import type { StoreError } from "./Errors.ts"
import * as Inbox from "./Inbox.ts"
import { InboxStore } from "./InboxStore.ts"
import { noStack } from "./Tracing.ts"

const ProjectionGapBase: Schema.Class<
  ProjectionGap,
  Schema.TaggedStruct<"ProjectionGap", {
    readonly projection: Schema.String
    readonly aggregateId: Schema.String
    readonly applied: Schema.Int
    readonly version: Schema.Int
  }>,
  Cause.YieldableError
> = Schema.TaggedError<ProjectionGap>()("ProjectionGap", {
  projection: Schema.String,
  aggregateId: Schema.String,
  applied: Schema.Int,
  version: Schema.Int
})

/**
 * An event arrived before the events preceding it in its aggregate were applied: retry it later.
 * @since 0.1.0
 * @category errors
 */
export class ProjectionGap extends ProjectionGapBase {
  get isRetryable(): boolean {
    return true
  }
}

const ProjectionLagBase: Schema.Class<
  ProjectionLag,
  Schema.TaggedStruct<"ProjectionLag", {
    readonly projection: Schema.String
    readonly eventId: Schema.String
    readonly timeoutMs: Schema.Finite
  }>,
  Cause.YieldableError
> = Schema.TaggedError<ProjectionLag>()("ProjectionLag", {
  projection: Schema.String,
  eventId: Schema.String,
  timeoutMs: Schema.Finite
})

/**
 * `awaitApplied` gave up: the projection had not handled the event within the timeout.
 * @since 0.1.0
 * @category errors
 */
export class ProjectionLag extends ProjectionLagBase {
  get isRetryable(): boolean {
    return true
  }
}

/**
 * Where an event sits: its aggregate and its version in that aggregate (1 for the first event).
 * @since 0.1.0
 * @category models
 */
export interface Position {
  readonly aggregateId: string
  readonly version: number
}

/**
 * Where `apply` writes: the read table's name (the live one, or a fresh one while rebuilding).
 * @since 0.1.0
 * @category models
 */
export interface Target {
  readonly table: string
}

/**
 * A projection.
 * @since 0.1.0
 * @category models
 */
export interface Definition<A, E = never, R = never> {
  /** Names the projection: its inbox consumer name and its key in the position table. */
  readonly name: string
  /** The read table it maintains (optionally schema-qualified); `apply` gets it (or the rebuild's table). */
  readonly table: string
  /** The event's aggregate and version. */
  readonly position: (event: A) => Position
  /** Applies one event to the read model, in the projection's transaction (typically an upsert). */
  readonly apply: (event: A, target: Target) => Effect.Effect<void, E, R>
}

/**
 * Declares a projection (an identity function that fixes the types).
 * @since 0.1.0
 * @category constructors
 */
export const make = <A, E = never, R = never>(definition: Definition<A, E, R>): Definition<A, E, R> => definition

/**
 * What `handle` did with an event.
 * @since 0.1.0
 * @category models
 */
export type Outcome = "applied" | "skipped" | "duplicate"

/**
 * Applies one event (message `messageId`) through the inbox, in order per aggregate (see the module
 * docs). Call it outside any open transaction.
 * @since 0.1.0
 * @category combinators
 */
export const handle = <A, E, R>(
  projection: Definition<A, E, R>,
  messageId: string,
  event: A,
  options: Inbox.Options = {}
): Effect.Effect<Outcome, E | ProjectionGap | Inbox.HandleError, R | InboxStore> =>
  Effect.gen(function*() {
    const store = yield* InboxStore
    // Cheap pre-check without a transaction: a gap fails at once (nothing to count or roll back).
    const { aggregateId, version } = projection.position(event)
    const seen = yield* store.position(projection.name, aggregateId)
    if (version > seen + 1) {
      return yield* new ProjectionGap({ projection: projection.name, aggregateId, applied: seen, version })
    }
    const result = yield* Inbox.handleIn(
      store,
      projection.name,
      messageId,
      Effect.gen(function*() {
        const applied = yield* store.lockPosition(projection.name, aggregateId)
        if (version <= applied) {
          return "skipped" as const
        }
        if (version > applied + 1) {
          return yield* new ProjectionGap({ projection: projection.name, aggregateId, applied, version })
        }
        yield* projection.apply(event, { table: projection.table })
        yield* store.setPosition(projection.name, aggregateId, version)
        return "applied" as const
      }),
      options
    )
    return result._tag === "Duplicate" ? "duplicate" : result.value
  }).pipe(
    Effect.withSpan("tidings.projection.handle", {
      attributes: { "tidings.projection": projection.name, "messaging.message.id": messageId }
    }, noStack)
  )

/**
 * A consumer handler for a projection (any consumer's `Consumer.Delivery`, whose `event` is the
 * projection's event): duplicates and stale events succeed (acked), a gap fails retryably.
 * @since 0.1.0
 * @category combinators
 */
export const handler = <A, E, R>(projection: Definition<A, E, R>, options: Inbox.Options = {}) =>
(
  delivery: Delivery<A>
): Effect.Effect<void, E | ProjectionGap | Inbox.HandleError | Inbox.MissingMessageId, R | InboxStore> =>
  delivery.messageId === undefined || delivery.messageId === ""
    ? Effect.fail(new Inbox.MissingMessageId({ consumer: projection.name }))
    : Effect.asVoid(handle(projection, delivery.messageId, delivery.event, options))

/**
 * The last version applied to an aggregate (0 when none).
 * @since 0.1.0
 * @category combinators
 */
export const appliedVersion = (
  projection: { readonly name: string },
  aggregateId: string
): Effect.Effect<number, StoreError, InboxStore> =>
  InboxStore.use((store) => store.position(projection.name, aggregateId))

/**
 * Waits until the projection has handled event `eventId` (applied it, or skipped it as already
 * covered), polling its inbox row; fails with {@link ProjectionLag} after `timeout`.
 * @since 0.1.0
 * @category combinators
 */
export const awaitApplied = (
  projection: { readonly name: string },
  eventId: string,
  timeout: Duration.Input
): Effect.Effect<void, ProjectionLag | StoreError, InboxStore> =>
  Effect.gen(function*() {
    const store = yield* InboxStore
    const timeoutMs = Duration.toMillis(Duration.fromInputUnsafe(timeout))
    let delay = 2
    const poll: Effect.Effect<void, StoreError> = Effect.gen(function*() {
      while (true) {
        const row = yield* store.get(eventId, projection.name)
        if (row?.status === "processed") return
        yield* Effect.sleep(Duration.millis(delay))
        delay = Math.min(delay * 2, 50)
      }
    })
    yield* poll.pipe(
      Effect.timeoutOrElse({
        duration: timeoutMs,
        orElse: () => Effect.fail(new ProjectionLag({ projection: projection.name, eventId, timeoutMs }))
      })
    )
  })

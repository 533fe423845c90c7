/**
 * Exactly-once effects for consumers. Delivery is at least once; `handle` makes a message's effect
 * happen once per consumer by running the handler and recording the message in the inbox in the same
 * database transaction:
 *
 * - a duplicate (the row says `processed`) runs nothing, commits nothing, and is reported as
 *   `Duplicate` (the consumer acks it);
 * - a handler failure rolls back the handler's writes and the inbox mark together, so the message
 *   can be retried;
 * - outbox events the handler appends (`Outbox.append`) commit in that same transaction, so
 *   consume → write → publish has no gap. The types say so: `handle` requires the `InboxStore` and
 *   the `OutboxStore` whose transactions it opens around the handler (the outbox's joins the inbox's:
 *   with the Postgres stores both are the app's `SqlClient` transaction; with the memory stores the
 *   outbox transaction is nested in the inbox one), and the handler's own requirements (`R`) are
 *   what its writes need.
 *
 * Crash-loop guard: the start of each attempt is counted in its own short committed write before the
 * transaction, and the finish inside it (or, for a failure, right after the rollback). When a start
 * finds an unfinished attempt of another process instance, that process died while handling: a
 * crash. A message whose handling killed the process `maxCrashes` times (starts exceed finishes by
 * that much) is not handled again: it is marked `failed` with the reason and `handle` fails with the
 * permanent {@link InboxCrashLoop}, which the consumer's decision table dead-letters. (Concurrent
 * duplicates in one process are not crashes; concurrent duplicates in two live processes can count
 * as one, so keep `maxCrashes` at 3 or more.)
 *
 * Dedupe window: inbox rows are deleted by {@link layerRetention} once older than its `olderThan`. A
 * redelivery of a message older than that is not recognised and is handled again, so keep the
 * retention well above the longest time a message can spend in queues, retry queues and DLQ replays.
 *
 * Call `handle` outside any open transaction: it opens its own (the start count must commit on its own).
 * @module
 */
import { type Cause, Duration, Effect, Exit, Layer, Metric, Schema } from "effect"
import type { Delivery } from "./Consumer.ts"
import { describeCause, type InvalidConfig, type NotInTransaction, type StoreError } from "./Errors.ts"
import { InboxStore, type Service as InboxStoreService } from "./InboxStore.ts"
import { every } from "./internal/periodic.ts"
import * as Metrics from "./Metrics.ts"
import { OutboxStore } from "./OutboxStore.ts"
import * as Settings from "./Settings.ts"
import { noStack } from "./Tracing.ts"

const InboxCrashLoopBase: Schema.Class<
  InboxCrashLoop,
  Schema.TaggedStruct<"InboxCrashLoop", {
    readonly messageId: Schema.String
    readonly consumer: Schema.String
    readonly reason: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InboxCrashLoop>()("InboxCrashLoop", {
  messageId: Schema.String,
  consumer: Schema.String,
  reason: Schema.String
})

/**
 * A message whose handling kept killing the process (or one dead-lettered that way before). Never retried.
 * @since 0.1.0
 * @category errors
 */
export class InboxCrashLoop extends InboxCrashLoopBase {
  get isRetryable(): boolean {
    return false
  }
}

const MissingMessageIdBase: Schema.Class<
  MissingMessageId,
  Schema.TaggedStruct<"MissingMessageId", {
    readonly consumer: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<MissingMessageId>()("MissingMessageId", {
  consumer: Schema.String
})

/**
 * A delivery without a message id cannot be deduplicated. Never retried.
 * @since 0.1.0
 * @category errors
 */
export class MissingMessageId extends MissingMessageIdBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * What `handle` did.
 * @since 0.1.0
 * @category models
 */
export type Result<A> =
  | { readonly _tag: "Processed"; readonly value: A }
  | { readonly _tag: "Duplicate" }

/**
 * Options of {@link handle}.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Attempts that started and never finished (the process died) before the message is dead-lettered. Default 3. */
  readonly maxCrashes?: number
  /** This process's instance id (default {@link instanceId}); tests simulate restarts with it. */
  readonly instance?: string
}

/**
 * Identifies this process (random per start). An unfinished attempt started by another instance
 * means that process died while handling; a concurrent duplicate in this process is not a crash.
 * @since 0.1.0
 * @category combinators
 */
export const instanceId: string = crypto.randomUUID()

/**
 * What `handle` can fail with besides the handler's own errors.
 * @since 0.1.0
 * @category models
 */
export type HandleError = StoreError | NotInTransaction | InboxCrashLoop

/**
 * Messages handled, by `consumer` and `outcome` (`processed`, `duplicate`, `failed`, `crash_loop`).
 * @since 0.1.0
 * @category metrics
 */
export const handled = Metrics.inbox.handled

const count = (consumer: string, outcome: string) =>
  Metric.update(Metric.withAttributes(handled, { consumer, outcome }), 1)

/**
 * Runs `handler` for `messageId` at most once per `consumer` (see the module docs). Returns
 * `Duplicate` without running it when the message was handled already. The handler's writes, the
 * outbox events it appends and the inbox row commit in one transaction: the `InboxStore`'s, joined
 * by the `OutboxStore`'s (both required).
 * @since 0.1.0
 * @category combinators
 */
export const handle = <A, E, R>(
  consumer: string,
  messageId: string,
  handler: Effect.Effect<A, E, R>,
  options: Options = {}
): Effect.Effect<Result<A>, E | HandleError, R | InboxStore | OutboxStore> =>
  Effect.gen(function*() {
    const store = yield* InboxStore
    const outbox = yield* OutboxStore
    return yield* handleIn(store, consumer, messageId, outbox.withTransaction(handler), options)
  }).pipe(
    Effect.withSpan("tidings.inbox.handle", {
      attributes: { "tidings.inbox.consumer": consumer, "messaging.message.id": messageId }
    }, noStack)
  )

/**
 * {@link handle} on a given inbox store, with `body` as the whole work of its transaction: for
 * engines that append no outbox events (projections only write read models), so need no `OutboxStore`.
 * @since 0.1.0
 * @category combinators
 */
export const handleIn = <A, E, R>(
  store: InboxStoreService,
  consumer: string,
  messageId: string,
  body: Effect.Effect<A, E, R>,
  options: Options = {}
): Effect.Effect<Result<A>, E | HandleError, R> =>
  Effect.gen(function*() {
    const maxCrashes = options.maxCrashes ?? 3
    const started = yield* store.begin(messageId, consumer, options.instance ?? instanceId)
    if (started.status === "processed") {
      yield* count(consumer, "duplicate")
      return { _tag: "Duplicate" } as const
    }
    if (started.status === "failed") {
      yield* count(consumer, "crash_loop")
      return yield* new InboxCrashLoop({ messageId, consumer, reason: started.lastError ?? "dead-lettered earlier" })
    }
    const crashes = started.crashes
    if (crashes >= maxCrashes) {
      const reason = `crash loop: ${crashes} handling attempts started and none finished`
      yield* store.markFailed(messageId, consumer, reason)
      yield* count(consumer, "crash_loop")
      yield* Effect.logWarning(`inbox: ${reason}; dead-lettering ${messageId}`)
      return yield* new InboxCrashLoop({ messageId, consumer, reason })
    }
    const result = yield* store.withTransaction(Effect.gen(function*() {
      // Taken first: the row lock makes a concurrent duplicate wait here, then see `processed`.
      if (!(yield* store.markProcessed(messageId, consumer))) return { _tag: "Duplicate" } as const
      return { _tag: "Processed", value: yield* body } as const
    })).pipe(
      // Rolled back (failure, defect or interruption): the attempt finished without killing the
      // process, so it is no crash.
      Effect.onExit((exit) =>
        Exit.isSuccess(exit)
          ? count(consumer, exit.value._tag === "Processed" ? "processed" : "duplicate")
          : store.recordFailure(messageId, consumer, describeCause(exit.cause)).pipe(
            Effect.ignore({ log: true }),
            Effect.andThen(count(consumer, "failed"))
          )
      )
    )
    return result as Result<A>
  })

/**
 * Turns a consumer handler into one that runs through the inbox (see {@link handle}), for any
 * consumer (`MemoryBroker.consume`, `AmqpConsumer`): deduplicates on the delivery's `messageId`; a
 * duplicate succeeds at once (so it is acked), a crash loop and a missing message id fail
 * permanently (dead-lettered), the handler's own errors pass through.
 * @since 0.1.0
 * @category combinators
 */
export const wrap = <A, E, R>(
  consumer: string,
  handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>,
  options: Options = {}
): (delivery: Delivery<A>) => Effect.Effect<void, E | HandleError | MissingMessageId, R | InboxStore | OutboxStore> =>
(delivery) => {
  const id = delivery.messageId
  if (id === undefined || id === "") return Effect.fail(new MissingMessageId({ consumer }))
  return Effect.asVoid(handle(consumer, id, handler(delivery), options))
}

/**
 * Options of {@link layerRetention}.
 * @since 0.1.0
 * @category models
 */
export interface RetentionOptions {
  /** Rows received longer ago are deleted: the dedupe window. */
  readonly olderThan: Duration.Input
  /** How often to prune (default 1 minute). */
  readonly interval?: Duration.Input
  /** Rows deleted per statement (default 1,000); batches repeat until a short one. */
  readonly batchSize?: number
  /** Batches per round at most (default 100), so one round stays bounded. */
  readonly maxBatches?: number
}

/**
 * {@link RetentionOptions} as a schema, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const RetentionSchema: Schema.Struct<{
  readonly olderThan: Settings.DurationSetting
  readonly interval: Settings.Defaulted<Settings.DurationSetting>
  readonly batchSize: Settings.Defaulted<Settings.IntSetting>
  readonly maxBatches: Settings.Defaulted<Settings.IntSetting>
}> = Schema.Struct({
  olderThan: Settings.duration(),
  interval: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("1 minute"))),
  batchSize: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(1000))),
  maxBatches: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(100)))
})

/**
 * Deletes old rows in bounded batches; returns how many (0 when another instance holds the lock).
 * Settings that cannot work fail with `InvalidConfig`.
 * @since 0.1.0
 * @category combinators
 */
export const pruneOnce = (options: RetentionOptions): Effect.Effect<number, StoreError | InvalidConfig, InboxStore> =>
  Effect.flatMap(Settings.decode(RetentionSchema, options, "retention"), prune)

const prune = (s: typeof RetentionSchema.Type): Effect.Effect<number, StoreError, InboxStore> =>
  Effect.gen(function*() {
    const store = yield* InboxStore
    let total = 0
    for (let i = 0; i < s.maxBatches; i++) {
      const n = yield* store.prune({ olderThan: s.olderThan, limit: s.batchSize })
      if (n === undefined) break
      total += n
      if (n < s.batchSize) break
    }
    return total
  })

/**
 * Runs {@link pruneOnce} every `interval` while the layer lives (errors are logged, never fatal);
 * building it fails with `InvalidConfig` for settings that cannot work.
 * @since 0.1.0
 * @category layers
 */
export const layerRetention = (options: RetentionOptions): Layer.Layer<never, InvalidConfig, InboxStore> =>
  Layer.effectDiscard(
    Effect.flatMap(
      Settings.decode(RetentionSchema, options, "retention"),
      (s) => Effect.forkScoped(every(s.interval, "inbox retention", prune(s)))
    )
  )

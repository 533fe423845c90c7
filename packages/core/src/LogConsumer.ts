/**
 * Consumer groups on the log (the database as the transport): a group reads the log with cursors of
 * its own and runs a handler per event, in order per partition. The handlers of a batch and the
 * cursor move commit in **one transaction of the log store**, so on PostgreSQL (`PgLogConsumer`) a
 * handler's writes take effect exactly once, with no inbox row: a crash, a lost lease or a failure
 * rolls both back, and the events are handled again by whoever holds the partition next.
 *
 * Several groups read one log independently; the instances of a group split its partitions by
 * lease, like `LogRelay`'s. What happens to an event follows the consumer decision table:
 *
 * | outcome | decision |
 * |---|---|
 * | success | ack: the cursor moves over it |
 * | transient failure (`Errors.isRetryable`), timeout, defect | retry the head after the `retry` schedule's delay; dead-letter once `maxAttempts` attempts failed |
 * | permanent failure | dead-letter: to the failed table (the outbox's `failed` rows), the cursor moves on |
 * | the database or broker is unavailable (`Errors.isUnavailable`, a lost connection) | pause and try again, counting nothing |
 * | its handling killed the process `maxCrashes` times | dead-letter |
 *
 * A failure rolls back the whole batch's transaction; the events before the failed one are then
 * handled again and committed without it, so handlers must not mind running again after a
 * rollback (only effects outside the transaction can happen twice).
 * @since 0.1.0
 * @module
 */
import { Cause, Clock, Context, Duration, Effect, Exit, Layer, Metric, Option, Schedule, Schema } from "effect"
import * as Errors from "./Errors.ts"
import type { InvalidConfig, StoreError } from "./Errors.ts"
import * as LogGroup from "./internal/logGroup.ts"
import { type Held, type Outcome as PlanOutcome, plan } from "./internal/logPlan.ts"
import { checkPoll, type GroupFields, groupFields, GroupName, memberId } from "./internal/logSettings.ts"
import * as LogSpans from "./internal/logSpans.ts"
import { type LogEvent, LogStore } from "./LogStore.ts"
import type { Message } from "./Message.ts"
import * as Metrics from "./Metrics.ts"
import * as Retry from "./Retry.ts"
import * as Decode from "./Settings.ts"
import * as Tracing from "./Tracing.ts"

/**
 * What a handler gets: the event's envelope and payload (JSON, as appended), the partition, and
 * which attempt this is. Shaped like the consumer `Delivery` of the other transports.
 * @since 0.1.0
 * @category models
 */
export interface Delivery {
  readonly id: string
  readonly type: string
  readonly version: number
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly aggregateType: string
  readonly aggregateId: string
  readonly orderingKey: string
  readonly occurredAt: Date
  /** 1 for the first attempt. */
  readonly attempt: number
  readonly partition: number
  readonly message: Message
}

/**
 * What to do with an event after its handler ran.
 * @since 0.1.0
 * @category models
 */
export type Decision = "ack" | "retry" | "dead-letter"

/**
 * How a handler run ended: the input of the decision table.
 * @since 0.1.0
 * @category models
 */
export type Outcome<E> =
  | { readonly _tag: "Success" }
  | { readonly _tag: "Failure"; readonly error: E; readonly retryable: boolean }
  | { readonly _tag: "Defect"; readonly defect: unknown }
  | { readonly _tag: "Timeout" }

/**
 * The default decision table (see the module docs); `attempt` is 1 for the first try.
 * @since 0.1.0
 * @category decisions
 */
export const defaultDecision = <E>(
  outcome: Outcome<E>,
  context: { readonly attempt: number; readonly maxAttempts: number }
): Decision => {
  const transient = (): Decision => (context.attempt >= context.maxAttempts ? "dead-letter" : "retry")
  switch (outcome._tag) {
    case "Success":
      return "ack"
    case "Failure":
      return outcome.retryable ? transient() : "dead-letter"
    case "Defect":
    case "Timeout":
      return transient()
  }
}

/**
 * The consumer's settings and their defaults (everything but the handler, `retry` and `decide`).
 * @since 0.1.0
 * @category config
 */
export const ConfigSchema: Schema.Struct<
  Omit<GroupFields, "maxAttempts"> & {
    readonly group: Schema.String
    readonly batchSize: Decode.Defaulted<Decode.IntSetting>
    readonly timeout: Schema.optional<Decode.DurationSetting>
    readonly maxAttempts: Decode.Defaulted<Decode.IntSetting>
  }
> = Schema.Struct({
  /** The consumer group: its cursors are its own; its instances share the partitions. */
  group: GroupName,
  ...groupFields,
  /** Events of a partition handled in one transaction. */
  batchSize: Decode.int(1, 10_000).pipe(Schema.withDecodingDefault(Effect.succeed(100))),
  /** A handler running longer is interrupted (a transient failure); shorter than the lease; default half the lease, at most 30 s. */
  timeout: Schema.optional(Decode.duration()),
  /** Failed attempts before an event is dead-lettered (consumers' default: 5). */
  maxAttempts: Decode.int(1, 1000).pipe(Schema.withDecodingDefault(Effect.succeed(5)))
})

/**
 * Settings of a consumer group member.
 * @since 0.1.0
 * @category config
 */
export type Config<E, R> = typeof ConfigSchema.Encoded & {
  readonly handler: (delivery: Delivery) => Effect.Effect<void, E, R>
  /** Delay before retry n (default: 1 s doubling to 5 min, jittered). */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  /** Overrides the table; return `undefined` to keep {@link defaultDecision}. */
  readonly decide?: (
    outcome: Outcome<E>,
    context: { readonly attempt: number; readonly maxAttempts: number }
  ) => Decision | undefined
}

/**
 * A running consumer group member.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly group: string
  readonly member: string
  readonly isRunning: Effect.Effect<boolean>
  /** The partitions it holds right now. */
  readonly partitions: Effect.Effect<ReadonlyArray<number>>
}

const LogConsumerBase: Context.ServiceClass<LogConsumer, "@tidings/core/LogConsumer", Service> = Context.Service<
  LogConsumer,
  Service
>()("@tidings/core/LogConsumer")

/**
 * The consumer service; present while its layer is alive.
 * @since 0.1.0
 * @category services
 */
export class LogConsumer extends LogConsumerBase {}

const isOutage = (error: unknown): boolean => {
  if (Errors.isUnavailable(error)) return true
  // A handler's own SQL against a database that went away (effect/sql's SqlError).
  const e = error as { readonly _tag?: unknown; readonly reason?: { readonly _tag?: unknown } } | null
  return typeof e === "object" && e !== null && e._tag === "SqlError" && e.reason?._tag === "ConnectionError"
}

const deliveryOf = (e: LogEvent, attempt: number): Delivery => ({
  id: e.message.id,
  type: e.message.type,
  version: e.message.version,
  get payload() {
    return e.message.payload
  },
  headers: e.message.headers,
  aggregateType: e.message.aggregateType,
  aggregateId: e.message.aggregateId,
  orderingKey: e.message.orderingKey,
  occurredAt: e.message.occurredAt,
  attempt,
  partition: e.partition,
  message: e.message
})

/** Rolls a batch's transaction back after a handler failed (never escapes). */
class Rollback extends Schema.TaggedError<Rollback>()("Rollback", {}) {}

/**
 * Starts a member of the consumer group: a lease loop and `concurrency` workers; each worker takes
 * its share of the held partitions and handles each partition's events in transactions of up to
 * `batchSize`. Closing the layer lets running transactions finish (within `shutdownTimeout`, else
 * they roll back), releases the leases and leaves the group.
 * @since 0.1.0
 * @category layers
 */
export const layer = <E, R>(
  config: Config<E, R>
): Layer.Layer<LogConsumer, InvalidConfig, LogStore | Exclude<R, import("effect").Scope.Scope>> =>
  Layer.effect(
    LogConsumer,
    Effect.gen(function*() {
      const { decide, handler, retry, ...options } = config
      const s = yield* Decode.decode(ConfigSchema, options)
      const poll = checkPoll(s.pollInterval)
      if (poll !== undefined) return yield* poll
      const timeout = s.timeout ?? Duration.millis(Math.min(30_000, Duration.toMillis(s.lease) / 2))
      if (!Duration.isLessThan(timeout, s.lease)) {
        return yield* Decode.invalid([{
          path: "timeout",
          message: "must be shorter than the lease, or another instance could take over a batch still being handled"
        }])
      }
      const store = yield* LogStore
      const context = yield* Effect.context<R>()
      const member = memberId(s.group)
      const attrs = { consumer: s.group }
      const planSettings = {
        maxAttempts: s.maxAttempts,
        maxCrashes: s.maxCrashes,
        retry: retry ?? Retry.exponentialBackoff()
      }

      /** Runs the handler for one event; its outcome as a value (never fails). */
      const handle = (e: LogEvent, attempt: number) =>
        Effect.gen(function*() {
          const parent = Tracing.parseTraceparent(e.message.headers[Tracing.traceparentHeader])
          const started = yield* Clock.currentTimeMillis
          const exit = yield* handler(deliveryOf(e, attempt)).pipe(
            Effect.timeout(timeout),
            LogSpans.process(s.group, e, attempt, parent),
            // The layer's services, under those of the running transaction (it must stay the handler's).
            Effect.updateContext((current: Context.Context<never>) => Context.merge(context, current)),
            Effect.exit
          )
          const outcome: Outcome<E> | "interrupted" = Exit.isSuccess(exit)
            ? { _tag: "Success" }
            : Option.match(Cause.findErrorOption(exit.cause), {
              onSome: (error): Outcome<E> =>
                (error as { readonly _tag?: unknown })._tag === "TimeoutError"
                  ? { _tag: "Timeout" }
                  : { _tag: "Failure", error: error as E, retryable: Errors.isRetryable(error) },
              onNone: () =>
                Cause.hasInterruptsOnly(exit.cause)
                  ? "interrupted"
                  : { _tag: "Defect", defect: Cause.squash(exit.cause) }
            })
          const ms = (yield* Clock.currentTimeMillis) - started
          if (outcome !== "interrupted") {
            yield* Metric.update(
              Metric.withAttributes(Metrics.consumer.handleDuration, { ...attrs, outcome: outcome._tag }),
              ms / 1000
            )
            if (outcome._tag === "Defect") {
              yield* Metric.update(Metric.withAttributes(Metrics.consumer.defects, attrs), 1)
            }
          }
          return outcome
        })

      /**
       * Handles `events` in one transaction that ends with the cursor's move; on a handler failure it
       * rolls back and says where. Interruption rolls back too and is passed on.
       */
      const attempt = (h: Held, events: ReadonlyArray<LogEvent>) =>
        Effect.gen(function*() {
          let stop: { readonly index: number; readonly outcome: Outcome<E> } | undefined
          const committed = yield* store.withTransaction(Effect.gen(function*() {
            for (let i = 0; i < events.length; i++) {
              const outcome = yield* handle(events[i]!, i === 0 ? h.headAttempts + 1 : 1)
              if (outcome === "interrupted") return yield* Effect.interrupt
              if (outcome._tag !== "Success") {
                stop = { index: i, outcome }
                return yield* new Rollback()
              }
            }
            return yield* store.settle(s.group, member, [{
              partition: h.partition,
              epoch: h.epoch,
              cursor: events[events.length - 1]!.position
            }]).pipe(LogSpans.settle(s.group, events.length))
          })).pipe(Effect.catchTag("Rollback", () => Effect.succeed(undefined)))
          return { committed, stop }
        })

      const processPartition = (
        restore: <A, E2, R2>(effect: Effect.Effect<A, E2, R2>) => Effect.Effect<A, E2, R2>,
        h: Held,
        events: ReadonlyArray<LogEvent>
      ) =>
        Effect.gen(function*() {
          yield* Metric.update(Metric.withAttributes(Metrics.consumer.consumed, attrs), events.length)
          // All of them; after a failure at k, the k before it on their own (they may fail earlier).
          let prefix = events
          let first: { readonly index: number; readonly outcome: Outcome<E> } | undefined
          let states: ReadonlyArray<import("./LogStore.ts").PartitionState> = []
          while (prefix.length > 0) {
            const r = yield* restore(attempt(h, prefix))
            if (r.stop === undefined) {
              states = r.committed ?? []
              if (states.length === 0) return { plan: yield* plan(planSettings, h, [], { _tag: "Done" }), states }
              break
            }
            first = r.stop
            prefix = prefix.slice(0, r.stop.index)
          }
          const acked = first === undefined ? events.length : first.index
          yield* Metric.update(Metric.withAttributes(Metrics.consumer.acked, attrs), acked)
          if (first === undefined) return { plan: yield* plan(planSettings, h, events, { _tag: "Done" }), states }
          const o = first.outcome
          const tries = (first.index === 0 ? h.headAttempts : 0) + 1
          const decision = o._tag === "Failure" && isOutage(o.error)
            ? "pause" as const
            : decide?.(o, { attempt: tries, maxAttempts: s.maxAttempts }) ??
              defaultDecision(o, { attempt: tries, maxAttempts: s.maxAttempts })
          const error = o._tag === "Failure"
            ? o.error
            : o._tag === "Defect"
            ? o.defect
            : o._tag === "Timeout"
            ? `handler timed out after ${Duration.format(timeout)}`
            : "acknowledged"
          const outcome: PlanOutcome = decision === "ack"
            ? { _tag: "Done" }
            : {
              _tag: "Stopped",
              index: first.index,
              error,
              kind: decision === "pause" ? "unavailable" : decision === "retry" ? "retry" : "fail"
            }
          // The handled prefix is committed already: the plan's cursor repeats it (or the ack'd event's).
          const p = yield* plan(
            planSettings,
            h,
            decision === "ack" ? events.slice(0, first.index + 1) : events,
            outcome
          )
          if (p.retried > 0) {
            yield* Metric.update(Metric.withAttributes(Metrics.consumer.retried, { ...attrs, mode: "delayed" }), 1)
          }
          if (p.failed > 0) {
            yield* Metric.update(
              Metric.withAttributes(Metrics.consumer.deadLettered, {
                ...attrs,
                reason: o._tag === "Failure" ? (o.retryable ? "TransientFailure" : "PermanentFailure") : o._tag
              }),
              1
            )
            yield* Effect.logWarning(
              `log consumer ${s.group}: dead-lettered ${events[first.index]!.message.id}: ${
                p.settlement.failed?.[0]?.error ?? ""
              }`
            )
          }
          const settled = yield* store.settle(s.group, member, [p.settlement])
          return { plan: p, states: settled }
        })

      const processor: LogGroup.Processor = (restore, batches) =>
        Effect.map(
          Effect.forEach(batches, (b) => processPartition(restore, b.held, b.events), { concurrency: "unbounded" }),
          (results) => ({ plans: results.map((r) => r.plan), states: results.flatMap((r) => r.states) })
        ) as Effect.Effect<LogGroup.Processed, StoreError>

      yield* Metrics.initializeLog(s.group, "consumer")
      const running = yield* LogGroup.run(
        {
          ...s,
          ...planSettings,
          member,
          margin: Duration.min(timeout, Duration.millis(Duration.toMillis(s.lease) / 4)),
          pollMin: s.pollInterval.min,
          pollBase: s.pollInterval.base,
          pollMax: s.pollInterval.max
        },
        processor,
        Effect.void
      )
      return LogConsumer.of({
        group: s.group,
        member,
        isRunning: running.isRunning,
        partitions: Effect.sync(() => [...running.ownership.held.keys()].sort((a, b) => a - b))
      })
    })
  )

/**
 * Consuming messages, whatever the transport. A consumer hands each delivery ({@link Delivery}) to a
 * handler Effect and decides from its typed outcome what becomes of the delivery. The same table
 * ({@link defaultDecision}) runs in `MemoryBroker.consume` and in `@tidings/rabbitmq`'s
 * `AmqpConsumer`, and callers can override it:
 *
 * | outcome | decision |
 * |---|---|
 * | success | ack |
 * | transient failure: `Errors.isRetryable` error, timeout, defect | retry (after a delay) — dead-letter once `maxAttempts` deliveries failed |
 * | permanent failure: any other error | dead-letter |
 * | undecodable: bad JSON, schema mismatch, a version that is not an integer ≥ 1, ... | dead-letter |
 * | delivered more than `maxAttempts` times | dead-letter without running the handler |
 * | unknown event type | ack (configurable: another service's events) |
 * | shutdown before or while the handler ran | requeue |
 *
 * Unavailability is not a message failure: a handler that fails because its database or broker
 * cannot be reached (`Errors.isUnavailable`) keeps its delivery — not acked, not requeued, its
 * attempt not counted — and runs it again after a capped backoff, while the consumer starts no new
 * delivery until one succeeds (`ConsumerRunner`, which transports run deliveries through).
 * @since 0.1.0
 * @module
 */
import { type Cause, type Duration, Effect, Schema } from "effect"
import * as Errors from "./Errors.ts"
import type { DecodeError } from "./EventRegistry.ts"
import * as Metrics from "./Metrics.ts"
import * as Settings from "./Settings.ts"

/**
 * A delivery as a handler sees it, on every transport. It is also what sagas read (`id`, `type`,
 * `payload`, `headers`) and what `Inbox.wrap` deduplicates on (`messageId`).
 * @since 0.1.0
 * @category models
 */
export interface Delivery<A = unknown> {
  /** The decoded event (with an `EventRegistry`: the current version's shape). */
  readonly event: A
  /** The message id (the event id); `undefined` when the producer set none. */
  readonly messageId: string | undefined
  /** The same as `messageId`, under the name a core `Message` uses. */
  readonly id: string | undefined
  /** The event type. */
  readonly type: string
  /** The version the producer published (`undefined`: it did not say, taken as the current one). */
  readonly version: number | undefined
  /** The payload: the decoded event's payload with a registry, the message's payload otherwise. */
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>>
  /** 1 for the first delivery; counts delayed retries and broker redeliveries. */
  readonly attempt: number
  /** Delivered before: a redelivery by the broker, or a retry of an earlier attempt (`attempt > 1`). */
  readonly redelivered: boolean
  readonly aggregateType: string | undefined
  readonly aggregateId: string | undefined
  readonly orderingKey: string | undefined
  readonly occurredAt: Date | undefined
  /** The queue it was consumed from. */
  readonly queue: string
  /** The exchange it was published to (`""` for the in-memory broker). */
  readonly exchange: string
  readonly routingKey: string
}

/**
 * What to do with a delivery. `retry` is a delayed redelivery (or a requeue where there are no
 * delays); `requeue` gives it back to the queue at once.
 * @since 0.1.0
 * @category models
 */
export type Decision = "ack" | "retry" | "requeue" | "dead-letter"

/**
 * The decisions, as a schema (for settings such as `unknownType`).
 * @since 0.1.0
 * @category models
 */
export const Decision: Schema.Literals<readonly ["ack", "retry", "requeue", "dead-letter"]> = Schema.Literals([
  "ack",
  "retry",
  "requeue",
  "dead-letter"
])

const HandlerTimeoutBase: Schema.Class<
  HandlerTimeout,
  Schema.TaggedStruct<"HandlerTimeout", {
    readonly timeoutMs: Schema.Number
  }>,
  Cause.YieldableError
> = Schema.TaggedError<HandlerTimeout>()("HandlerTimeout", {
  timeoutMs: Schema.Number
})

/**
 * A handler ran longer than the consumer's `timeout`: transient, retried.
 * @since 0.1.0
 * @category errors
 */
export class HandlerTimeout extends HandlerTimeoutBase {
  get isRetryable(): boolean {
    return true
  }
}

/**
 * How handling a delivery turned out: the input of the decision table.
 * @since 0.1.0
 * @category models
 */
export type Outcome<E> =
  | { readonly _tag: "Success" }
  | { readonly _tag: "Failure"; readonly error: E; readonly retryable: boolean }
  | { readonly _tag: "Defect"; readonly defect: unknown }
  | { readonly _tag: "Timeout"; readonly error: HandlerTimeout }
  | { readonly _tag: "DecodeFailure"; readonly error: DecodeError }
  | { readonly _tag: "UnknownType"; readonly type: string }
  | { readonly _tag: "DeliveryLimit"; readonly attempt: number }
  | { readonly _tag: "Shutdown" }

/**
 * What the decision table knows besides the outcome.
 * @since 0.1.0
 * @category models
 */
export interface DecisionContext {
  /** 1 for the first delivery. */
  readonly attempt: number
  readonly maxAttempts: number
  /** The configured decision for unknown event types. */
  readonly unknownType: Decision
}

/**
 * An override of the table: return `undefined` to keep {@link defaultDecision}.
 * @since 0.1.0
 * @category models
 */
export type Decide<E> = (outcome: Outcome<E>, context: DecisionContext) => Decision | undefined

/**
 * The default decision table (see the module docs).
 * @since 0.1.0
 * @category decisions
 */
export const defaultDecision = <E>(outcome: Outcome<E>, context: DecisionContext): Decision => {
  const transient = (): Decision => context.attempt >= context.maxAttempts ? "dead-letter" : "retry"
  switch (outcome._tag) {
    case "Success":
      return "ack"
    case "Failure":
      return outcome.retryable ? transient() : "dead-letter"
    case "Defect":
    case "Timeout":
      return transient()
    case "DecodeFailure":
    case "DeliveryLimit":
      return "dead-letter"
    case "UnknownType":
      return context.unknownType
    case "Shutdown":
      return "requeue"
  }
}

/**
 * The table with an override applied.
 * @since 0.1.0
 * @category decisions
 */
export const decide = <E>(outcome: Outcome<E>, context: DecisionContext, override?: Decide<E>): Decision =>
  override?.(outcome, context) ?? defaultDecision(outcome, context)

/**
 * An outcome's name in metrics (`reason` of dead letters, `outcome` of durations) and spans.
 * @since 0.1.0
 * @category models
 */
export type OutcomeLabel =
  | "Success"
  | "TransientFailure"
  | "PermanentFailure"
  | "Defect"
  | "Timeout"
  | "DecodeFailure"
  | "UnknownType"
  | "DeliveryLimit"
  | "Shutdown"

/**
 * @since 0.1.0
 * @category models
 */
export const label = <E>(outcome: Outcome<E>): OutcomeLabel =>
  outcome._tag === "Failure" ? (outcome.retryable ? "TransientFailure" : "PermanentFailure") : outcome._tag

/**
 * An outcome as one line of text (for logs and dead letters).
 * @since 0.1.0
 * @category models
 */
export const describeOutcome = <E>(outcome: Outcome<E>): string => {
  switch (outcome._tag) {
    case "Success":
    case "Shutdown":
      return outcome._tag
    case "Failure":
    case "Timeout":
    case "DecodeFailure":
      return Errors.describe(outcome.error)
    case "Defect":
      return Errors.describe(outcome.defect)
    case "UnknownType":
      return `unknown event type ${outcome.type}`
    case "DeliveryLimit":
      return `delivered ${outcome.attempt} times`
  }
}

/**
 * Whether a handler error deserves another delivery: THE rule (`Errors.isRetryable`).
 * @since 0.1.0
 * @category predicates
 */
export const isRetryable: (error: unknown) => boolean = Errors.isRetryable

/**
 * The consumer metrics, the same series on every transport (`Metrics.consumer`).
 * @since 0.1.0
 * @category metrics
 */
export const metrics = Metrics.consumer

/**
 * The settings every consumer shares, as schema fields (each transport adds its own): handler
 * `timeout`, `maxAttempts`, `shutdownTimeout`, `unknownType`, and the backoff while a handler finds
 * its database or broker unavailable (`unavailableDelay` doubling to `unavailableMaxDelay`).
 * @since 0.1.0
 * @category settings
 */
export const settingsFields: {
  maxAttempts: Settings.Defaulted<Settings.IntSetting>
  timeout: Settings.Defaulted<Settings.DurationSetting>
  shutdownTimeout: Settings.Defaulted<Settings.DurationSetting>
  unknownType: Settings.Defaulted<typeof Decision>
  unavailableDelay: Settings.Defaulted<Settings.DurationSetting>
  unavailableMaxDelay: Settings.Defaulted<Settings.DurationSetting>
} = {
  maxAttempts: Settings.int(1, 1000).pipe(Schema.withDecodingDefault(Effect.succeed(5))),
  timeout: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
  shutdownTimeout: Settings.duration({ allowZero: true }).pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))
  ),
  unknownType: Decision.pipe(Schema.withDecodingDefault(Effect.succeed("ack" as const))),
  unavailableDelay: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("500 millis"))),
  unavailableMaxDelay: Settings.duration().pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))
  )
}

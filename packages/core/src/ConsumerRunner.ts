/**
 * What a consumer transport runs each delivery through, so that every transport behaves alike: the
 * handler under its timeout, the hold while a dependency is unavailable (with the consumer paused),
 * core's decision table ({@link Consumer.defaultDecision} or an override), the shared metrics, logs
 * and the `process <queue>` span continuing the producer's trace. The transport decodes
 * ({@link Prepared}) and carries decisions out (`settle`); `MemoryBroker.consume` and
 * `@tidings/rabbitmq`'s `AmqpConsumer` are built on it.
 * @since 0.1.0
 * @module
 */
import { Cause, Clock, Deferred, Duration, Effect, Exit, Latch, Metric, Option } from "effect"
import {
  type Decide,
  decide,
  type Decision,
  type Delivery,
  describeOutcome,
  HandlerTimeout,
  isRetryable,
  label,
  metrics,
  type Outcome
} from "./Consumer.ts"
import * as Errors from "./Errors.ts"
import type { DecodeError, Note } from "./EventRegistry.ts"
import * as Metrics from "./Metrics.ts"
import * as Tracing from "./Tracing.ts"

/**
 * The decoded shared settings.
 * @since 0.1.0
 * @category settings
 */
export interface RunnerSettings {
  readonly maxAttempts: number
  readonly timeout: Duration.Duration
  readonly unknownType: Decision
  readonly unavailableDelay: Duration.Duration
  readonly unavailableMaxDelay: Duration.Duration
}

/**
 * A delivery made ready for the handler, or the outcome that settles it without one.
 * @since 0.1.0
 * @category runner
 */
export type Prepared<A> =
  | { readonly _tag: "Decoded"; readonly delivery: Delivery<A>; readonly note?: Note }
  | { readonly _tag: "DecodeFailure"; readonly error: DecodeError }
  | { readonly _tag: "UnknownType"; readonly type: string }

/**
 * One delivery as a transport hands it to {@link Runner.process}.
 * @since 0.1.0
 * @category runner
 */
export interface Incoming<A, E> {
  /** 1 + earlier deliveries. */
  readonly attempt: number
  readonly messageId: string | undefined
  readonly eventType: string | undefined
  readonly headers: Readonly<Record<string, unknown>>
  /** Decodes the delivery (not called for one over its delivery limit). */
  readonly prepare: () => Prepared<A>
  /** Carries the decision out (ack, delayed retry, requeue, dead-letter); runs uninterruptibly. */
  readonly settle: (decision: Decision, outcome: Outcome<E>) => Effect.Effect<void>
  /** True once the delivery can no longer be settled (its channel closed): it is not held any longer. */
  readonly gone?: () => boolean
}

/**
 * What a transport runs deliveries through: the handler with its timeout, the unavailability hold,
 * the decision table, metrics, logs and the `process <queue>` span.
 * @since 0.1.0
 * @category runner
 */
export interface Runner<E> {
  /**
   * Handles one delivery to its settlement. Interrupted, or called after `stop`, it settles the
   * delivery as `Shutdown` (requeue by default).
   */
  readonly process: <A>(
    incoming: Incoming<A, E>,
    handler: (delivery: Delivery<A>) => Effect.Effect<void, E>
  ) => Effect.Effect<void>
  /** Completes at once, or when a paused consumer may start deliveries again. */
  readonly ready: Effect.Effect<void>
  /** Paused: a handler found a dependency unavailable and its delivery is being held. */
  readonly paused: Effect.Effect<boolean>
  /** Stops holding deliveries (shutdown): held ones settle as `Shutdown` at once. */
  readonly stop: Effect.Effect<void>
}

/**
 * Builds a {@link Runner}. `name` is the consumer's name (the `consumer` attribute of every metric),
 * `system` and `queue` go on the spans.
 * @since 0.1.0
 * @category runner
 */
export const makeRunner = <E>(options: {
  readonly name: string
  readonly system: string
  readonly queue: string
  readonly settings: RunnerSettings
  readonly decide?: Decide<E> | undefined
}): Effect.Effect<Runner<E>> =>
  Effect.gen(function*() {
    const { name, settings: s } = options
    const attrs = { consumer: name }
    const count = (metric: Metric.Counter<number>, extra: Record<string, string> = {}) =>
      Metric.update(Metric.withAttributes(metric, { ...attrs, ...extra }), 1)
    const timeoutMs = Duration.toMillis(s.timeout)
    yield* Metrics.initializeConsumer(name)
    const gate = yield* Latch.make(true)
    const stopped = yield* Deferred.make<void>()
    let holders = 0

    const runOnce = <A>(handler: (delivery: Delivery<A>) => Effect.Effect<void, E>, delivery: Delivery<A>) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        // Suspended: a handler that throws instead of failing is a defect of this delivery.
        const exit = yield* Effect.suspend(() => handler(delivery)).pipe(
          Effect.timeoutOrElse({ duration: s.timeout, orElse: () => Effect.fail(new HandlerTimeout({ timeoutMs })) }),
          Effect.exit
        )
        let outcome: Outcome<E>
        if (Exit.isSuccess(exit)) {
          outcome = { _tag: "Success" }
        } else if (Cause.hasInterruptsOnly(exit.cause)) {
          // Shutdown deadline: the interrupt goes on; the caller settles the delivery as Shutdown.
          return yield* Effect.interrupt
        } else {
          const error = Cause.findErrorOption(exit.cause)
          if (Option.isSome(error)) {
            outcome = error.value instanceof HandlerTimeout
              ? { _tag: "Timeout", error: error.value }
              : { _tag: "Failure", error: error.value as E, retryable: isRetryable(error.value) }
          } else {
            yield* count(metrics.defects)
            yield* Effect.logError("consumer handler defect (treated as a transient failure)", exit.cause)
            outcome = { _tag: "Defect", defect: Cause.squash(exit.cause) }
          }
        }
        const elapsed = Math.max(0, (yield* Clock.currentTimeMillis) - started) / 1000
        yield* Metric.update(
          Metric.withAttributes(metrics.handleDuration, { ...attrs, outcome: label(outcome) }),
          elapsed
        )
        return outcome
      })

    const release = Effect.suspend(() => --holders === 0 ? Effect.asVoid(gate.open) : Effect.void)

    /**
     * Runs the handler until its failure is something else than unavailability. While it is, the
     * delivery stays with us (no ack, no requeue: a requeue would count a delivery on a quorum queue)
     * and the gate stays closed, so that no other delivery starts against a database that is down.
     */
    const runHolding = <A>(
      incoming: Incoming<A, E>,
      handler: (delivery: Delivery<A>) => Effect.Effect<void, E>,
      delivery: Delivery<A>
    ) =>
      Effect.gen(function*() {
        let delay = Duration.toMillis(s.unavailableDelay)
        const maxDelay = Duration.toMillis(s.unavailableMaxDelay)
        let held = false
        return yield* Effect.gen(function*() {
          while (true) {
            const outcome = yield* runOnce(handler, delivery)
            if (outcome._tag !== "Failure" || !Errors.isUnavailable(outcome.error)) return outcome
            if (Deferred.isDoneUnsafe(stopped) || incoming.gone?.() === true) return { _tag: "Shutdown" } as const
            yield* count(metrics.unavailable)
            if (!held) {
              held = true
              holders++
              yield* gate.close
              yield* Effect.logWarning(
                `handler found a dependency unavailable (${
                  Errors.describe(outcome.error)
                }); holding the delivery, pausing the consumer`
              )
            }
            yield* Effect.raceFirst(Effect.sleep(Duration.millis(delay)), Deferred.await(stopped))
            delay = Math.min(delay * 2, maxDelay)
          }
        }).pipe(Effect.ensuring(Effect.suspend(() => held ? release : Effect.void)))
      })

    const process = <A>(
      incoming: Incoming<A, E>,
      handler: (delivery: Delivery<A>) => Effect.Effect<void, E>
    ): Effect.Effect<void> => {
      const { attempt, messageId, eventType } = incoming
      const parent = Tracing.parentFromHeaders(incoming.headers)
      const settleAs = (outcome: Outcome<E>) => {
        const decision = decide(
          outcome,
          { attempt, maxAttempts: s.maxAttempts, unknownType: s.unknownType },
          options.decide
        )
        return Effect.gen(function*() {
          yield* Effect.annotateCurrentSpan({
            "tidings.consumer.outcome": label(outcome),
            "tidings.consumer.decision": decision
          })
          if (outcome._tag === "UnknownType") yield* Effect.logInfo(`unknown event type ${outcome.type}: ${decision}`)
          else if (outcome._tag === "DecodeFailure") {
            yield* Effect.logWarning(
              `undecodable delivery (${outcome.error.reason}): ${outcome.error.message}; ${decision}`
            )
          } else if (outcome._tag === "DeliveryLimit") {
            yield* Effect.logWarning(`delivered ${attempt} times (limit ${s.maxAttempts}); ${decision}`)
          } else if (decision === "dead-letter" && outcome._tag !== "Success") {
            yield* Effect.logWarning(
              `dead-lettering after ${attempt} deliveries (${label(outcome)}): ${describeOutcome(outcome)}`
            )
          }
          yield* incoming.settle(decision, outcome)
        }).pipe(Effect.uninterruptible)
      }
      return Effect.gen(function*() {
        // Shutdown began after a worker took this delivery: it goes back, unstarted.
        if (Deferred.isDoneUnsafe(stopped)) return yield* settleAs({ _tag: "Shutdown" })
        yield* count(metrics.consumed)
        if (attempt > s.maxAttempts) return yield* settleAs({ _tag: "DeliveryLimit", attempt })
        const prepared = incoming.prepare()
        if (prepared._tag !== "Decoded") return yield* settleAs(prepared)
        if (prepared.note !== undefined) {
          const why = prepared.note === "newer-version"
            ? "newer than the registered version"
            : "no upcaster for this version"
          yield* Effect.logWarning(
            `${eventType} v${prepared.delivery.version}: ${why}; decoded best-effort with the current schema`
          )
        }
        return yield* settleAs(yield* runHolding(incoming, handler, prepared.delivery))
      }).pipe(
        Effect.withSpan(Tracing.spanName("process", options.queue), {
          kind: "consumer",
          // A child of the producer's span (the message's traceparent), and linked to it.
          ...(parent === undefined ? {} : { parent, links: [{ span: parent, attributes: {} }] }),
          attributes: {
            ...Tracing.messagingAttributes({ type: "process", name: "process" }, {
              system: options.system,
              name: options.queue
            }),
            "messaging.consumer.group.name": name,
            "tidings.consumer.attempt": attempt,
            ...(messageId === undefined ? {} : { "messaging.message.id": messageId }),
            ...(eventType === undefined ? {} : { "tidings.event.type": eventType })
          }
        }, Tracing.noStack),
        Effect.onInterrupt(() => settleAs({ _tag: "Shutdown" })),
        Effect.annotateLogs({
          consumer: name,
          queue: options.queue,
          messageId: messageId ?? "",
          eventType: eventType ?? ""
        })
      )
    }

    return {
      process,
      ready: gate.await,
      paused: Effect.sync(() => holders > 0),
      stop: Deferred.succeed(stopped, undefined).pipe(Effect.andThen(gate.open), Effect.asVoid)
    }
  })

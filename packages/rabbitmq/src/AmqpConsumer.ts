/**
 * A RabbitMQ consumer: runs a handler Effect per delivery, with a prefetch and a concurrency limit,
 * decoding payloads through an `EventRegistry` (core's). What happens to a delivery is decided from
 * its typed outcome by core's `Consumer` table — the same as `MemoryBroker.consume`'s — which callers
 * can override (`decide`):
 *
 * | outcome | decision |
 * |---|---|
 * | success | ack |
 * | transient failure: `isRetryable` error, timeout, defect | retry (delayed retry queue, or requeue) — dead-letter once `maxAttempts` is reached |
 * | permanent failure: non-retryable error, undecodable payload, bad version header | dead-letter |
 * | delivered more than `maxAttempts` times | dead-letter without running the handler |
 * | unknown event type | ack (configurable) |
 * | shutdown before the handler started | requeue |
 *
 * A handler that fails because its database (or another broker) is unreachable
 * (`Errors.isUnavailable`) is no message failure: the delivery stays unacked and is run again after
 * a capped pause, and the consumer starts nothing new meanwhile. A requeue would count a delivery on
 * a quorum queue (and walk the message towards its delivery limit) for a fault that is not its own.
 *
 * The consume channel is re-opened with its prefetch after every reconnect. A handler defect is
 * caught and counted; nothing a message does stops the consumer.
 * @since 0.1.0
 * @module
 */
import * as Consumer from "@tidings/core/Consumer"
import * as ConsumerRunner from "@tidings/core/ConsumerRunner"
import type { InvalidConfig } from "@tidings/core/Errors"
import type * as EventRegistry from "@tidings/core/EventRegistry"
import * as Settings from "@tidings/core/Settings"
import { type Cause, Duration, Effect, Fiber, Layer, Metric, Option, Pull, Queue, Schema, type Scope } from "effect"
import { AmqpConnection } from "./AmqpConnection.ts"
import type { AmqpConnectionError, TopologyError } from "./AmqpErrors.ts"
import { attemptOf, prepare, str } from "./internal/amqpDecode.ts"
import { type Item, makeSettle } from "./internal/amqpSettle.ts"
import { subscribe } from "./internal/amqpSubscription.ts"
import * as ConfirmPublisher from "./internal/confirmPublisher.ts"
import type * as Topology from "./Topology.ts"

/**
 * A delivery handed to the handler: core's one `Consumer.Delivery`.
 * @since 0.1.0
 * @category models
 */
export type Delivery<A> = Consumer.Delivery<A>
/**
 * @since 0.1.0
 * @category models
 */
export type Decision = Consumer.Decision
/**
 * @since 0.1.0
 * @category models
 */
export type Outcome<E> = Consumer.Outcome<E>
/**
 * @since 0.1.0
 * @category models
 */
export type DecisionContext = Consumer.DecisionContext

/**
 * Settings of a consumer.
 * @since 0.1.0
 * @category models
 */
export interface Config<A, E, R> {
  /** Names the consumer in metrics, logs and its consumer tag. */
  readonly name: string
  /** A queue name, or a {@link Topology.consumerQueue} (declared on every connect; its retry queues enable delayed retries). */
  readonly queue: string | Topology.ConsumerQueue
  readonly registry: EventRegistry.EventRegistry<A>
  readonly handler: (delivery: Consumer.Delivery<A>) => Effect.Effect<void, E, R>
  /** Handlers running at once (default 10). */
  readonly concurrency?: number
  /** Unacknowledged deliveries the broker sends ahead (default 2 × concurrency). */
  readonly prefetch?: number
  /** A handler running longer is interrupted; the delivery counts as a transient failure (default 30 s). */
  readonly timeout?: Duration.Input
  /** Handler attempts before a transient failure dead-letters the delivery (default 5). */
  readonly maxAttempts?: number
  /** Bodies larger than this are dead-lettered undecoded (default 1 MiB). */
  readonly maxBodyBytes?: number
  /**
   * `delayed` (default when the queue has retry queues): a copy waits in a retry queue. `requeue`:
   * immediate redelivery; on a quorum queue the broker counts it, on a classic queue (which cannot)
   * a copy with the attempt count goes to the back of the queue.
   */
  readonly retry?: "delayed" | "requeue"
  /** Decision for event types missing from the registry (default `ack`: another service's events). */
  readonly unknownType?: Consumer.Decision
  /** Overrides the table; return `undefined` to keep {@link defaultDecision}. */
  readonly decide?: Consumer.Decide<E>
  /** How long shutdown waits for running handlers before interrupting (and requeueing) them (default 10 s). */
  readonly shutdownTimeout?: Duration.Input
  /** Confirm timeout of the copies published to retry queues (default 10 s). */
  readonly retryConfirmTimeout?: Duration.Input
  /** First pause while a handler finds a dependency unavailable (default 500 ms), doubling to `unavailableMaxDelay` (default 30 s). */
  readonly unavailableDelay?: Duration.Input
  readonly unavailableMaxDelay?: Duration.Input
}

/**
 * The settings of {@link Config} that are data, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: Schema.Struct<
  typeof Consumer.settingsFields & {
    readonly name: Schema.String
    readonly concurrency: Settings.Defaulted<Settings.IntSetting>
    readonly prefetch: Schema.optional<Settings.IntSetting>
    readonly maxBodyBytes: Settings.Defaulted<Settings.IntSetting>
    readonly retry: Schema.optional<Schema.Literals<readonly ["delayed", "requeue"]>>
    readonly retryConfirmTimeout: Settings.Defaulted<Settings.DurationSetting>
  }
> = Schema.Struct({
  name: Schema.String.check(
    Schema.makeFilter((s: string) =>
      /^[\w.:-]{1,100}$/.test(s) ? undefined : "must be 1-100 characters of [A-Za-z0-9_.:-]"
    )
  ),
  concurrency: Settings.int(1, 1000).pipe(Schema.withDecodingDefault(Effect.succeed(10))),
  prefetch: Schema.optional(Settings.int(1, 65535)),
  maxBodyBytes: Settings.int(1, 512 * 1024 * 1024).pipe(Schema.withDecodingDefault(Effect.succeed(1024 * 1024))),
  retry: Schema.optional(Schema.Literals(["delayed", "requeue"])),
  retryConfirmTimeout: Settings.duration().pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))
  ),
  ...Consumer.settingsFields
})

/**
 * A running consumer.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly name: string
  readonly queue: string
  /** Subscribed to its queue right now (false while reconnecting or after shutdown began). */
  readonly isConsuming: Effect.Effect<boolean>
  /** Handlers running right now. */
  readonly inFlight: Effect.Effect<number>
  /** Deliveries received (prefetched) and waiting for a free worker. */
  readonly waiting: Effect.Effect<number>
  /** Paused: a handler found a dependency unavailable and its delivery is being held. */
  readonly paused: Effect.Effect<boolean>
}

/**
 * Consumer metrics (the series every transport records; see `Metrics.consumer` in core).
 * @since 0.1.0
 * @category metrics
 */
export const metrics = Consumer.metrics

/**
 * Whether a handler error is transient: core's one rule (`Errors.isRetryable`).
 * @since 0.1.0
 * @category predicates
 */
export const isRetryable: (error: unknown) => boolean = Consumer.isRetryable

/**
 * The default decision table (core's `Consumer.defaultDecision`).
 * @since 0.1.0
 * @category decisions
 */
export const defaultDecision = Consumer.defaultDecision

export {
  /**
   * 1 + delayed retries so far + broker redeliveries of this copy.
   * @since 0.1.0
   * @category accessors
   */
  attemptOf
}

/**
 * Starts a consumer for as long as the scope lives. It subscribes once connected (at once when the
 * connection is up, failing on a topology error) and again after every reconnect.
 * Closing the scope shuts down gracefully: cancel the subscription, requeue what did not start,
 * let running handlers finish within `shutdownTimeout` (then interrupt and requeue them), close.
 * @since 0.1.0
 * @category constructors
 */
export const make = <A, E, R>(
  config: Config<A, E, R>
): Effect.Effect<Service, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection | Scope.Scope | R> =>
  Effect.gen(function*() {
    const s = yield* Settings.decode(ConfigSchema, config)
    const connection = yield* AmqpConnection
    const handlerContext = yield* Effect.context<R>()
    // For metrics recorded from amqplib's callbacks (the app's metric registry, if it has one).
    const services = yield* Effect.context<never>()
    const queue = typeof config.queue === "string" ? config.queue : config.queue.queue
    const retryQueues = typeof config.queue === "string" ? [] : config.queue.retryQueues
    const retryMode = s.retry ?? (retryQueues.length > 0 ? "delayed" : "requeue")
    if (retryMode === "delayed" && retryQueues.length === 0) {
      return yield* Settings.invalid([{
        path: "retry",
        message: "delayed retries need a consumer queue with retry queues (Topology.consumerQueue)"
      }])
    }
    const annotate = Effect.annotateLogs({ consumer: s.name, queue })
    const inbox = yield* Queue.unbounded<Item, Cause.Done>()
    let inFlight = 0

    // Registered before the subscription, the workers and the shutdown finalizer: scopes release in
    // reverse, so the channels close last, after the graceful shutdown below. The confirm channel
    // carries retry copies (to retry queues, or back to a classic work queue that cannot count).
    const retries = yield* ConfirmPublisher.make(connection, {
      name: `consumer:${s.name}/retry`,
      channels: 1,
      unroutableRetryable: true
    })
    const subscription = yield* subscribe(connection, {
      name: s.name,
      queue,
      topology: typeof config.queue === "string" ? undefined : config.queue.topology,
      prefetch: s.prefetch ?? s.concurrency * 2,
      inbox,
      // Arrived after shutdown began: given back at once.
      onRequeued: () =>
        Effect.runSyncWith(services)(
          Metric.update(Metric.withAttributes(Consumer.metrics.retried, { consumer: s.name, mode: "shutdown" }), 1)
        )
    })
    const settle = makeSettle({
      name: s.name,
      queue,
      queueType: typeof config.queue === "string" ? undefined : config.queue.type,
      retryMode,
      retryQueues,
      retries,
      retryConfirmMs: Duration.toMillis(s.retryConfirmTimeout)
    })
    const runner = yield* ConsumerRunner.makeRunner<E>({
      name: s.name,
      system: "rabbitmq",
      queue,
      settings: s,
      decide: config.decide
    })
    const handler = (delivery: Consumer.Delivery<A>) => Effect.provideContext(config.handler(delivery), handlerContext)

    const worker = Effect.gen(function*() {
      while (true) {
        const item = yield* Queue.take(inbox)
        // Paused (a handler found a dependency down): the delivery waits here, not started.
        yield* runner.ready
        // A delivery of a channel that is gone was requeued by the broker already.
        if (item.channel !== subscription.channel()) continue
        inFlight++
        const { message } = item
        yield* runner.process<A>({
          attempt: attemptOf(message),
          messageId: str(message.properties.messageId),
          eventType: str(message.properties.type),
          headers: message.properties.headers ?? {},
          prepare: () => prepare(message, { registry: config.registry, maxBodyBytes: s.maxBodyBytes, queue }),
          settle: settle(item),
          gone: () => item.channel !== subscription.channel()
        }, handler).pipe(Effect.ensuring(Effect.sync(() => void inFlight--)))
      }
    }).pipe(Pull.catchDone(() => Effect.void), annotate)

    const workers = yield* Effect.forEach(Array.from({ length: s.concurrency }), () => Effect.forkScoped(worker))

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        // Held deliveries (a dependency down) give up at once; nothing new is taken.
        yield* runner.stop
        yield* subscription.cancel(Duration.min(s.shutdownTimeout, Duration.seconds(5)))
        const shutdown: Consumer.Outcome<E> = { _tag: "Shutdown" }
        for (const item of yield* Queue.clear(inbox)) {
          if (item.channel !== subscription.channel()) continue
          const attempt = attemptOf(item.message)
          const decision = Consumer.decide(shutdown, {
            attempt,
            maxAttempts: s.maxAttempts,
            unknownType: s.unknownType
          }, config.decide)
          yield* settle(item)(decision, shutdown)
        }
        yield* Queue.end(inbox)
        const finished = yield* Fiber.awaitAll(workers).pipe(Effect.timeoutOption(s.shutdownTimeout))
        if (Option.isNone(finished)) {
          yield* Effect.logWarning(
            `consumer shutdown: handlers still running after ${
              Duration.format(s.shutdownTimeout)
            }; interrupting them (their deliveries are requeued)`
          )
          yield* Fiber.interruptAll(workers)
        }
      }).pipe(annotate)
    )

    return {
      name: s.name,
      queue,
      isConsuming: Effect.sync(subscription.consuming),
      inFlight: Effect.sync(() => inFlight),
      waiting: Queue.size(inbox),
      paused: runner.paused
    } satisfies Service
  })

/**
 * A consumer that lives as long as the layer (many consumers: merge their layers).
 * @since 0.1.0
 * @category layers
 */
export const layer = <A, E, R>(
  config: Config<A, E, R>
): Layer.Layer<never, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection | R> =>
  Layer.effectDiscard(make(config))

/**
 * A consumer's environment variables, under `TIDINGS_CONSUMER_<NAME>` (its name in upper case:
 * `TIDINGS_CONSUMER_INVENTORY_CONCURRENCY`, `..._PREFETCH`, `..._TIMEOUT`, `..._MAX_ATTEMPTS`, ...).
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "AmqpConsumer",
  schema: ConfigSchema,
  prefix: "TIDINGS_CONSUMER_<NAME>",
  names: { name: false }
}

/**
 * {@link layer} with the consumer's data settings from the environment (`TIDINGS_CONSUMER_<NAME>_*`,
 * or `options.prefix`) on top of `config`; a wrong variable fails with one `InvalidConfig` naming
 * every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = <A, E, R>(
  config: Config<A, E, R>,
  options: { readonly prefix?: string } = {}
): Layer.Layer<never, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection | R> =>
  Layer.unwrap(Effect.map(
    Settings.read(environment, {
      prefix: options.prefix ?? Settings.envName("TIDINGS_CONSUMER", [config.name]),
      defaults: config
    }),
    (s) => layer({ ...config, ...s })
  ))

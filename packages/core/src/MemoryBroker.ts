/**
 * An in-memory broker: a `Publisher` that confirms at once and keeps what it received, plus
 * subscribers and queue consumers. For unit tests, the embedded demo and latency benchmarks of the
 * relay itself.
 *
 * {@link consume} runs a handler per message of a named queue bound to event types, with the
 * semantics of a RabbitMQ consumer queue and the same decision table (core's `Consumer`, shared with
 * `@tidings/rabbitmq`'s `AmqpConsumer`), so the same handler code runs on both: a transient failure
 * is redelivered after `retryDelays[attempt - 1]` until `maxAttempts`, anything else that fails is
 * dead-lettered; with an `EventRegistry` deliveries are decoded by type and version as on RabbitMQ.
 *
 * Dead letters are kept, per queue, for inspection ({@link Consumer.deadLetters},
 * {@link Service.deadLetters}). Nothing survives the process: it is a broker for tests and demos.
 * @module
 */
import { Clock, Context, type Duration, Effect, Layer, Metric, PubSub, Queue, Ref, type Scope } from "effect"
import * as Consumers from "./Consumer.ts"
import * as ConsumerRunner from "./ConsumerRunner.ts"
import * as Errors from "./Errors.ts"
import type { InvalidConfig } from "./Errors.ts"
import type * as EventRegistry from "./EventRegistry.ts"
import * as Internal from "./internal/memoryBroker.ts"
import type { DeadLetter, DeadLetterReason, Service } from "./internal/memoryBroker.ts"
import { ConsumerConfigSchema } from "./internal/memoryConsumerSettings.ts"
import { type Item, matches, prepare } from "./internal/memoryDelivery.ts"
import type { Message } from "./Message.ts"
import * as Publisher from "./Publisher.ts"
import * as Settings from "./Settings.ts"

const memorySystem = Internal.memorySystem

export type {
  /**
   * A message a consumer gave up on.
   * @since 0.1.0
   * @category models
   */
  DeadLetter,
  /**
   * Why a message was dead-lettered (the `reason` attribute of `tidings_consumer_dead_lettered_total`).
   * @since 0.1.0
   * @category models
   */
  DeadLetterReason,
  /**
   * A delivered message with the broker's receive time (ms, from `Clock`).
   * @since 0.1.0
   * @category models
   */
  Delivery,
  /**
   * Decides, per message, whether the broker refuses it: for fault injection in tests.
   * @since 0.1.0
   * @category models
   */
  FaultInjector,
  /**
   * Options of the in-memory broker.
   * @since 0.1.0
   * @category config
   */
  Options,
  /**
   * The in-memory broker.
   * @since 0.1.0
   * @category models
   */
  Service
} from "./internal/memoryBroker.ts"

const MemoryBrokerBase: Context.ServiceClass<MemoryBroker, "@tidings/core/MemoryBroker", Service> = Context.Service<
  MemoryBroker,
  Service
>()("@tidings/core/MemoryBroker")

/**
 * The in-memory broker service.
 * @since 0.1.0
 * @category services
 */
export class MemoryBroker extends MemoryBrokerBase {}

/**
 * Provides both `MemoryBroker` and the `Publisher` port backed by it.
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Internal.Options = {}): Layer.Layer<MemoryBroker | Publisher.Publisher> =>
  Layer.effectContext(
    Effect.map(
      Internal.make(options),
      ({ broker, publisher }) =>
        Context.make(MemoryBroker, MemoryBroker.of(broker)).pipe(
          Context.add(Publisher.Publisher, Publisher.Publisher.of(publisher))
        )
    )
  )

// ---------------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------------

/**
 * A message handed to a consumer's handler: core's one `Consumer.Delivery`. Without a registry the
 * event is the `Message` itself.
 * @since 0.1.0
 * @category models
 */
export type ConsumerDelivery<A = Message> = Consumers.Delivery<A>

/**
 * Settings of {@link consume}.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerConfig<A, E, R> {
  /** The queue's name (1-100 characters of `[A-Za-z0-9_.:-]`); also the `consumer` attribute of its metrics. */
  readonly queue: string
  /**
   * The event types bound to the queue, as RabbitMQ topic patterns over the type: `order.placed`,
   * `order.*` (one word), `#` (everything), `payment.#` (zero or more words). Default: the
   * registry's types.
   */
  readonly types?: ReadonlyArray<string>
  /** Decodes deliveries by type and version (upcasting), as `AmqpConsumer` does; without it the event is the `Message`. */
  readonly registry?: EventRegistry.EventRegistry<A>
  readonly handler: (delivery: Consumers.Delivery<A>) => Effect.Effect<void, E, R>
  /** Handlers running at once (default 1: messages handled in arrival order). */
  readonly concurrency?: number
  /** Deliveries of a message before a transient failure dead-letters it (default 5). */
  readonly maxAttempts?: number
  /** Delay before redelivery n: `retryDelays[min(n, length) - 1]` (default `["1 second", "10 seconds", "1 minute"]`, as RabbitMQ's consumer queues). */
  readonly retryDelays?: ReadonlyArray<Duration.Input>
  /** A handler running longer is interrupted; it counts as a transient failure (default 30 s). */
  readonly timeout?: Duration.Input
  /** Decision for event types the registry does not know (default `ack`). */
  readonly unknownType?: Consumers.Decision
  /** Overrides the decision table; return `undefined` to keep the default. */
  readonly decide?: Consumers.Decide<E>
  /** First pause while a handler finds its database unavailable (default 500 ms), doubling to `unavailableMaxDelay` (default 30 s). */
  readonly unavailableDelay?: Duration.Input
  readonly unavailableMaxDelay?: Duration.Input
}

/**
 * A running consumer.
 * @since 0.1.0
 * @category models
 */
export interface Consumer {
  readonly queue: string
  /** Messages this consumer dead-lettered, oldest first. */
  readonly deadLetters: Effect.Effect<ReadonlyArray<DeadLetter>>
  /** Messages waiting: in the queue, and waiting for a redelivery. */
  readonly pending: Effect.Effect<number>
  /** Handlers running right now. */
  readonly inFlight: Effect.Effect<number>
  /** Paused because a handler found its database unavailable (its delivery is held and retried). */
  readonly paused: Effect.Effect<boolean>
}

/**
 * Consumer metrics: the same series as `@tidings/rabbitmq`'s consumer (see `Metrics.consumer`).
 * @since 0.1.0
 * @category metrics
 */
export const consumerMetrics = Consumers.metrics

/**
 * Whether a handler error deserves another delivery: the rule every consumer uses (`Errors.isRetryable`).
 * @since 0.1.0
 * @category predicates
 */
export const isRetryable: (error: unknown) => boolean = Errors.isRetryable

export {
  /**
   * Whether an event type matches a RabbitMQ topic pattern (`*` one word, `#` zero or more).
   * @since 0.1.0
   * @category predicates
   */
  matches
} from "./internal/memoryDelivery.ts"

export {
  /**
   * The settings of {@link consume} that are data (the handler, registry and override are not).
   * @since 0.1.0
   * @category settings
   */
  ConsumerConfigSchema
} from "./internal/memoryConsumerSettings.ts"
/**
 * Applies defaults and validates; invalid settings fail with one `InvalidConfig` naming every wrong setting.
 * @since 0.1.0
 * @category combinators
 */
export const consumerSettings = <A, E, R>(
  config: ConsumerConfig<A, E, R>
): Effect.Effect<
  Omit<typeof ConsumerConfigSchema.Type, "types"> & { readonly types: ReadonlyArray<string> },
  InvalidConfig
> =>
  Effect.flatMap(Settings.decode(ConsumerConfigSchema, config), (s) => {
    const types = s.types ?? config.registry?.types
    return types === undefined || types.length === 0
      ? Effect.fail(
        Settings.invalid([{
          path: "types",
          message: "bind at least one event type (or \"#\" for all), or give a registry"
        }])
      )
      : Effect.succeed({ ...s, types })
  })

/**
 * Starts a consumer for as long as the scope lives: its queue is bound to `types` from this moment
 * (messages published earlier are not delivered, as with a queue declared now). Closing the scope
 * interrupts running handlers and drops what is still queued (it is memory).
 * @since 0.1.0
 * @category combinators
 */
export function consume<A, E, R>(
  config: ConsumerConfig<A, E, R> & { readonly registry: EventRegistry.EventRegistry<A> }
): Effect.Effect<Consumer, InvalidConfig, MemoryBroker | Scope.Scope | R>
export function consume<E, R>(
  config: ConsumerConfig<Message, E, R> & { readonly registry?: undefined }
): Effect.Effect<Consumer, InvalidConfig, MemoryBroker | Scope.Scope | R>
export function consume<A, E, R>(
  config: ConsumerConfig<A, E, R>
): Effect.Effect<Consumer, InvalidConfig, MemoryBroker | Scope.Scope | R> {
  return Effect.gen(function*() {
    const s = yield* consumerSettings(config)
    const broker = yield* MemoryBroker
    const context = yield* Effect.context<R>()
    const handler = (delivery: Consumers.Delivery<A>) => Effect.provideContext(config.handler(delivery), context)
    const attrs = { consumer: s.queue }
    const count = (metric: Metric.Counter<number>, extra: Record<string, string> = {}) =>
      Metric.update(Metric.withAttributes(metric, { ...attrs, ...extra }), 1)
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Item>(), Queue.shutdown)
    const mine = yield* Ref.make<Array<DeadLetter>>([])
    const runner = yield* ConsumerRunner.makeRunner<E>({
      name: s.queue,
      system: memorySystem,
      queue: s.queue,
      settings: s,
      decide: config.decide
    })
    yield* Effect.addFinalizer(() => runner.stop)
    let waiting = 0 // redeliveries sleeping
    let inFlight = 0
    const offer = (item: Item) => Effect.asVoid(Queue.offer(queue, item))
    const scope = yield* Effect.scope

    // Bound now, before `consume` returns: a message published right after is delivered.
    const subscription = yield* broker.subscription
    yield* PubSub.take(subscription).pipe(
      Effect.flatMap(({ message }) =>
        s.types.some((t) => matches(t, message.type)) ? offer({ message, attempt: 1 }) : Effect.void
      ),
      Effect.forever,
      Effect.forkScoped
    )

    const settle = (item: Item) => (decision: Consumers.Decision, outcome: Consumers.Outcome<E>) =>
      Effect.gen(function*() {
        switch (decision) {
          case "ack":
            return yield* count(consumerMetrics.acked)
          case "requeue":
            // Memory does not outlive a shutdown: what was running is dropped with the queue.
            if (outcome._tag === "Shutdown") return
            yield* count(consumerMetrics.retried, { mode: "requeue" })
            return yield* offer({ message: item.message, attempt: item.attempt + 1 })
          case "retry": {
            const delay = s.retryDelays[Math.min(item.attempt, s.retryDelays.length) - 1]!
            waiting++
            yield* count(consumerMetrics.retried, { mode: "delayed" })
            // The redelivery waits in its own fiber, so the worker takes the next message meanwhile.
            return yield* Effect.sleep(delay).pipe(
              Effect.andThen(offer({ message: item.message, attempt: item.attempt + 1 })),
              Effect.ensuring(Effect.sync(() => void waiting--)),
              Effect.forkIn(scope),
              Effect.asVoid
            )
          }
          case "dead-letter": {
            const reason = Consumers.label(outcome) as DeadLetterReason
            const letter: DeadLetter = {
              queue: s.queue,
              message: item.message,
              attempts: item.attempt,
              reason,
              error: Consumers.describeOutcome(outcome),
              at: yield* Clock.currentTimeMillis
            }
            yield* Ref.update(mine, (xs) => (xs.push(letter), xs))
            yield* broker.deadLetter(letter)
            return yield* count(consumerMetrics.deadLettered, { reason })
          }
        }
      })

    const worker = Effect.gen(function*() {
      while (true) {
        const item = yield* Queue.take(queue)
        // Paused (a handler found a dependency down): the message waits here, not started.
        yield* runner.ready
        inFlight++
        yield* runner.process<A>({
          attempt: item.attempt,
          messageId: item.message.id,
          eventType: item.message.type,
          headers: item.message.headers,
          prepare: () => prepare(config.registry, s.queue, item),
          settle: settle(item)
        }, handler).pipe(Effect.ensuring(Effect.sync(() => void inFlight--)))
      }
    })
    for (let i = 0; i < s.concurrency; i++) yield* Effect.forkScoped(worker)

    return {
      queue: s.queue,
      deadLetters: Effect.map(Ref.get(mine), (xs) => xs.slice()),
      pending: Effect.map(Queue.size(queue), (n) => n + waiting),
      inFlight: Effect.sync(() => inFlight),
      paused: runner.paused
    }
  })
}

/**
 * {@link consume} as a layer: the consumer runs while the layer lives.
 * @since 0.1.0
 * @category layers
 */
export function consumerLayer<A, E, R>(
  config: ConsumerConfig<A, E, R> & { readonly registry: EventRegistry.EventRegistry<A> }
): Layer.Layer<never, InvalidConfig, MemoryBroker | R>
export function consumerLayer<E, R>(
  config: ConsumerConfig<Message, E, R> & { readonly registry?: undefined }
): Layer.Layer<never, InvalidConfig, MemoryBroker | R>
export function consumerLayer<A, E, R>(
  config: ConsumerConfig<A, E, R>
): Layer.Layer<never, InvalidConfig, MemoryBroker | R> {
  return Layer.effectDiscard(
    consume(config as ConsumerConfig<A, E, R> & { readonly registry: EventRegistry.EventRegistry<A> })
  )
}

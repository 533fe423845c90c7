/**
 * An in-memory broker: a `Publisher` that confirms at once and keeps what it received, plus
 * subscribers and queue consumers. For unit tests, the embedded demo and latency benchmarks of the
 * relay itself.
 *
 * {@link consume} runs a handler per message of a named queue bound to event types, with the
 * semantics of a RabbitMQ consumer queue (see `@tidings/rabbitmq`'s `AmqpConsumer`), so the same
 * handler code runs on both:
 *
 * | outcome | what happens |
 * |---|---|
 * | success | acknowledged |
 * | failure whose error is transient (`isRetryable` or `retryable` true, or a timeout), a defect | redelivered after `retryDelays[attempt - 1]`; dead-lettered once `maxAttempts` deliveries failed |
 * | any other failure (a business rule, a decode failure: it would fail again) | dead-lettered at once |
 *
 * Dead letters are kept, per queue, for inspection ({@link Consumer.deadLetters},
 * {@link Service.deadLetters}). Nothing survives the process: it is a broker for tests and demos.
 * @module
 */
import { Cause, Clock, Context, Deferred, Duration, Effect, Exit, Layer, Metric, PubSub, Queue, Ref, type Scope, Stream } from "effect"
import * as Errors from "./Errors.ts"
import { InvalidConfig, PublishError } from "./Errors.ts"
import type { Message } from "./Message.ts"
import * as Metrics from "./Metrics.ts"
import * as Publisher from "./Publisher.ts"

/** A delivered message with the broker's receive time (ms, from `Clock`). */
export interface Delivery {
  readonly message: Message
  readonly receivedAt: number
}

/** Decides, per message, whether the broker refuses it: for fault injection in tests. */
export type FaultInjector = (message: Message) => PublishError | undefined

/** A message a consumer gave up on. */
export interface DeadLetter {
  /** The consumer queue that dead-lettered it. */
  readonly queue: string
  readonly message: Message
  /** Deliveries made (1 when dead-lettered on the first failure). */
  readonly attempts: number
  /** `PermanentFailure` (not retryable), or the last transient outcome once the attempts ran out: `TransientFailure`, `Defect`, `Timeout`. */
  readonly reason: DeadLetterReason
  /** The last error, as text. */
  readonly error: string
  /** When (ms, from `Clock`). */
  readonly at: number
}

/** Why a message was dead-lettered (the `reason` attribute of `tidings_consumer_dead_lettered_total`). */
export type DeadLetterReason = "PermanentFailure" | "TransientFailure" | "Defect" | "Timeout"

/** The in-memory broker. */
export interface Service {
  /** Everything confirmed so far, in order. */
  readonly delivered: Effect.Effect<ReadonlyArray<Delivery>>
  /** A live stream of confirmed messages. */
  readonly subscribe: Stream.Stream<Delivery>
  /** A subscription that receives every message confirmed from now on, for as long as the scope lives. */
  readonly subscription: Effect.Effect<PubSub.Subscription<Delivery>, never, Scope.Scope>
  /** Replaces the fault injector (`undefined` = accept everything). */
  readonly setFault: (fault: FaultInjector | undefined) => Effect.Effect<void>
  /**
   * Takes the broker away (`false`: every publish fails with a `PublishError` whose reason is
   * `Unavailable`, and the publisher's `awaitAvailable` waits) or brings it back (`true`).
   */
  readonly setAvailable: (available: boolean) => Effect.Effect<void>
  /** Messages dead-lettered by the consumers of this broker, oldest first. */
  readonly deadLetters: Effect.Effect<ReadonlyArray<DeadLetter>>
  /** Records a dead letter (consumers call it). */
  readonly deadLetter: (letter: DeadLetter) => Effect.Effect<void>
  readonly clear: Effect.Effect<void>
}

/** The in-memory broker service. */
export class MemoryBroker extends Context.Service<MemoryBroker, Service>()("@tidings/core/MemoryBroker") {}

/** Options of the in-memory broker. */
export interface Options {
  /** Keep delivered messages for `delivered` (default true; benchmarks turn it off). */
  readonly record?: boolean
  readonly fault?: FaultInjector
}

/** Provides both `MemoryBroker` and the `Publisher` port backed by it. */
export const layer = (options: Options = {}): Layer.Layer<MemoryBroker | Publisher.Publisher> =>
  Layer.effectContext(Effect.gen(function*() {
    const record = options.record ?? true
    const log = yield* Ref.make<Array<Delivery>>([])
    const dead = yield* Ref.make<Array<DeadLetter>>([])
    const hub = yield* PubSub.unbounded<Delivery>()
    let fault = options.fault
    // While unavailable, `back` completes when the broker returns.
    let back: Deferred.Deferred<void> | undefined
    const awaitAvailable = Effect.suspend(() => back === undefined ? Effect.void : Deferred.await(back))
    const publish = (messages: ReadonlyArray<Message>) =>
      Effect.gen(function*() {
        if (back !== undefined) return yield* new PublishError({ message: "the memory broker is unavailable", reason: new Errors.Unavailable() })
        const now = yield* Clock.currentTimeMillis
        const results: Array<Publisher.PublishResult> = []
        const accepted: Array<Delivery> = []
        for (const message of messages) {
          let error: PublishError | undefined
          try {
            error = fault?.(message)
          } catch (cause) {
            error = new PublishError({ message: "fault injector threw", reason: new Errors.Unknown({ retryable: true }), cause })
          }
          if (error !== undefined) {
            results.push(Publisher.rejected(message.id, error))
          } else {
            accepted.push({ message, receivedAt: now })
            results.push(Publisher.published(message.id))
          }
        }
        if (record) yield* Ref.update(log, (xs) => (xs.push(...accepted), xs))
        yield* PubSub.publishAll(hub, accepted)
        return results
      })
    const broker = MemoryBroker.of({
      delivered: Effect.map(Ref.get(log), (xs) => xs.slice()),
      subscribe: Stream.fromPubSub(hub),
      subscription: PubSub.subscribe(hub),
      setFault: (f) => Effect.sync(() => void (fault = f)),
      setAvailable: (available) =>
        Effect.sync(() => {
          if (available && back !== undefined) {
            Deferred.doneUnsafe(back, Exit.void)
            back = undefined
          } else if (!available && back === undefined) {
            back = Deferred.makeUnsafe<void>()
          }
        }),
      deadLetters: Effect.map(Ref.get(dead), (xs) => xs.slice()),
      deadLetter: (letter) => Ref.update(dead, (xs) => (xs.push(letter), xs)),
      clear: Effect.andThen(Ref.set(log, []), Ref.set(dead, []))
    })
    return Context.make(MemoryBroker, broker).pipe(Context.add(Publisher.Publisher, Publisher.Publisher.of({ publish, awaitAvailable })))
  }))

// ---------------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------------

/** A message handed to a consumer's handler. */
export interface ConsumerDelivery {
  readonly message: Message
  /** The message id (the event id): what `Inbox.wrap` deduplicates on. */
  readonly messageId: string
  /** 1 for the first delivery, 2 for the first redelivery, ... */
  readonly attempt: number
  readonly redelivered: boolean
  readonly queue: string
}

/** Settings of {@link consume}. */
export interface ConsumerConfig<E, R> {
  /** The queue's name (1-100 characters of `[A-Za-z0-9_.:-]`); also the `consumer` attribute of its metrics. */
  readonly queue: string
  /**
   * The event types bound to the queue, as RabbitMQ topic patterns over the type: `order.placed`,
   * `order.*` (one word), `#` (everything), `payment.#` (zero or more words).
   */
  readonly types: ReadonlyArray<string>
  readonly handler: (delivery: ConsumerDelivery) => Effect.Effect<void, E, R>
  /** Handlers running at once (default 1: messages handled in arrival order). */
  readonly concurrency?: number
  /** Deliveries of a message before a transient failure dead-letters it (default 5). */
  readonly maxAttempts?: number
  /** Delay before redelivery n: `retryDelays[min(n, length) - 1]` (default `["1 second", "10 seconds", "1 minute"]`, as RabbitMQ's consumer queues). */
  readonly retryDelays?: ReadonlyArray<Duration.Input>
  /** A handler running longer is interrupted; it counts as a transient failure (default 30 s). */
  readonly timeout?: Duration.Input
}

/** A running consumer. */
export interface Consumer {
  readonly queue: string
  /** Messages this consumer dead-lettered, oldest first. */
  readonly deadLetters: Effect.Effect<ReadonlyArray<DeadLetter>>
  /** Messages waiting: in the queue, and waiting for a redelivery. */
  readonly pending: Effect.Effect<number>
  /** Handlers running right now. */
  readonly inFlight: Effect.Effect<number>
}

/** Consumer metrics: the same series as `@tidings/rabbitmq`'s consumer (see `Metrics.consumer`). */
export const consumerMetrics = Metrics.consumer

/** Whether a handler error deserves another delivery: the rule every consumer uses (`Errors.isRetryable`). */
export const isRetryable: (error: unknown) => boolean = Errors.isRetryable

/** Whether an event type matches a RabbitMQ topic pattern (`*` one word, `#` zero or more). */
export const matches = (pattern: string, type: string): boolean => {
  const p = pattern.split(".")
  const w = type.split(".")
  const go = (i: number, j: number): boolean => {
    if (i === p.length) return j === w.length
    if (p[i] === "#") return go(i + 1, j) || (j < w.length && go(i, j + 1))
    if (j === w.length) return false
    return (p[i] === "*" || p[i] === w[j]) && go(i + 1, j + 1)
  }
  return go(0, 0)
}

interface Settings {
  readonly queue: string
  readonly types: ReadonlyArray<string>
  readonly concurrency: number
  readonly maxAttempts: number
  readonly retryDelays: ReadonlyArray<Duration.Duration>
  readonly timeout: Duration.Duration
}

const positiveDuration = (path: string, input: Duration.Input): Duration.Duration => {
  const d = Duration.fromInput(input)
  if (d._tag === "None" || !Duration.isFinite(d.value) || Duration.toMillis(d.value) <= 0) {
    throw new InvalidConfig({ path, message: `must be a finite positive duration, got ${String(input)}` })
  }
  return d.value
}

const integer = (path: string, input: number | undefined, fallback: number, max: number): number => {
  const n = input ?? fallback
  if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidConfig({ path, message: `must be an integer from 1 to ${max}, got ${String(input)}` })
  return n
}

/** Applies defaults and validates; invalid settings fail with `InvalidConfig` naming the setting. */
export const consumerSettings = <E, R>(config: ConsumerConfig<E, R>): Effect.Effect<Settings, InvalidConfig> =>
  Effect.try({
    try: (): Settings => {
      if (typeof config.queue !== "string" || !/^[\w.:-]{1,100}$/.test(config.queue)) {
        throw new InvalidConfig({ path: "queue", message: "must be 1-100 characters of [A-Za-z0-9_.:-]" })
      }
      if (!Array.isArray(config.types) || config.types.length === 0) {
        throw new InvalidConfig({ path: "types", message: "bind at least one event type (or \"#\" for all)" })
      }
      for (const t of config.types) {
        if (typeof t !== "string" || !/^[\w:#*-]+(\.[\w:#*-]+)*$/.test(t) || t.split(".").some((w) => /[#*]/.test(w) && w.length > 1)) {
          throw new InvalidConfig({ path: "types", message: `${JSON.stringify(t)} is not an event type or topic pattern` })
        }
      }
      const delays = config.retryDelays ?? ["1 second", "10 seconds", "1 minute"]
      if (delays.length === 0) throw new InvalidConfig({ path: "retryDelays", message: "needs at least one delay" })
      return {
        queue: config.queue,
        types: config.types,
        concurrency: integer("concurrency", config.concurrency, 1, 1000),
        maxAttempts: integer("maxAttempts", config.maxAttempts, 5, 1000),
        retryDelays: delays.map((d, i) => positiveDuration(`retryDelays[${i}]`, d)),
        timeout: positiveDuration("timeout", config.timeout ?? "30 seconds")
      }
    },
    catch: (e) => e instanceof InvalidConfig ? e : new InvalidConfig({ path: "consumer", message: String(e) })
  })

interface Item {
  readonly message: Message
  readonly attempt: number
}

type Outcome =
  | { readonly _tag: "Success" }
  | { readonly _tag: "PermanentFailure" | "TransientFailure" | "Defect" | "Timeout"; readonly error: string }

const timedOut = Symbol("timedOut")

/**
 * Starts a consumer for as long as the scope lives: its queue is bound to `types` from this moment
 * (messages published earlier are not delivered, as with a queue declared now). Closing the scope
 * interrupts running handlers and drops what is still queued (it is memory).
 */
export const consume = <E, R>(config: ConsumerConfig<E, R>): Effect.Effect<Consumer, InvalidConfig, MemoryBroker | Scope.Scope | R> =>
  Effect.gen(function*() {
    const s = yield* consumerSettings(config)
    const broker = yield* MemoryBroker
    const context = yield* Effect.context<R>()
    const attrs = { consumer: s.queue }
    const count = (metric: Metric.Counter<number>, extra: Record<string, string> = {}) => Metric.update(Metric.withAttributes(metric, { ...attrs, ...extra }), 1)
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Item>(), Queue.shutdown)
    const mine = yield* Ref.make<Array<DeadLetter>>([])
    let waiting = 0 // redeliveries sleeping
    let inFlight = 0
    const offer = (item: Item) => Effect.asVoid(Queue.offer(queue, item))
    const scope = yield* Effect.scope

    // Bound now, before `consume` returns: a message published right after is delivered.
    const subscription = yield* broker.subscription
    yield* PubSub.take(subscription).pipe(
      Effect.flatMap(({ message }) => s.types.some((t) => matches(t, message.type)) ? offer({ message, attempt: 1 }) : Effect.void),
      Effect.forever,
      Effect.forkScoped
    )

    const run = (item: Item): Effect.Effect<Outcome> =>
      Effect.gen(function*() {
        const delivery: ConsumerDelivery = {
          message: item.message,
          messageId: item.message.id,
          attempt: item.attempt,
          redelivered: item.attempt > 1,
          queue: s.queue
        }
        const started = yield* Clock.currentTimeMillis
        // Suspended: a handler that throws instead of failing is a defect of this delivery, not of the worker.
        const exit = yield* Effect.suspend(() => config.handler(delivery)).pipe(
          Effect.provideContext(context),
          Effect.timeoutOrElse({ duration: s.timeout, orElse: () => Effect.fail(timedOut) }),
          Effect.exit
        )
        const outcome: Outcome = Exit.isSuccess(exit)
          ? { _tag: "Success" }
          : (() => {
            const failure = Cause.findErrorOption(exit.cause)
            if (failure._tag === "Some") {
              if (failure.value === timedOut) return { _tag: "Timeout", error: `handler timed out after ${Duration.format(s.timeout)}` } as const
              const error = failure.value
              return { _tag: isRetryable(error) ? "TransientFailure" : "PermanentFailure", error: Errors.describe(error) } as const
            }
            return { _tag: "Defect", error: Cause.pretty(exit.cause).split("\n")[0] ?? "defect" } as const
          })()
        const took = (yield* Clock.currentTimeMillis) - started
        yield* Metric.update(Metric.withAttributes(consumerMetrics.handleDuration, { ...attrs, outcome: outcome._tag }), Math.max(0, took) / 1000)
        return outcome
      })

    const settle = (item: Item, outcome: Outcome) =>
      Effect.gen(function*() {
        if (outcome._tag === "Success") return yield* count(consumerMetrics.acked)
        if (outcome._tag === "Defect") yield* count(consumerMetrics.defects)
        if (outcome._tag !== "PermanentFailure" && item.attempt < s.maxAttempts) {
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
        const letter: DeadLetter = { queue: s.queue, message: item.message, attempts: item.attempt, reason: outcome._tag, error: outcome.error, at: yield* Clock.currentTimeMillis }
        yield* Ref.update(mine, (xs) => (xs.push(letter), xs))
        yield* broker.deadLetter(letter)
        yield* count(consumerMetrics.deadLettered, { reason: outcome._tag })
        yield* Effect.logWarning(`consumer ${s.queue}: dead-lettered ${item.message.type} ${item.message.id} after ${item.attempt} deliveries: ${outcome.error}`)
      })

    const worker = Effect.gen(function*() {
      while (true) {
        const item = yield* Queue.take(queue)
        inFlight++
        yield* count(consumerMetrics.consumed)
        yield* run(item).pipe(Effect.flatMap((outcome) => settle(item, outcome)), Effect.ensuring(Effect.sync(() => void inFlight--)))
      }
    })
    for (let i = 0; i < s.concurrency; i++) yield* Effect.forkScoped(worker)

    return {
      queue: s.queue,
      deadLetters: Effect.map(Ref.get(mine), (xs) => xs.slice()),
      pending: Effect.map(Queue.size(queue), (n) => n + waiting),
      inFlight: Effect.sync(() => inFlight)
    }
  })

/** {@link consume} as a layer: the consumer runs while the layer lives. */
export const consumerLayer = <E, R>(config: ConsumerConfig<E, R>): Layer.Layer<never, InvalidConfig, MemoryBroker | R> =>
  Layer.effectDiscard(consume(config))

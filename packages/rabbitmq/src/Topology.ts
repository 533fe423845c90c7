/**
 * Declarative RabbitMQ topology: exchanges, queues and bindings as data, declared at start and again
 * after every reconnect (declaring is idempotent, and a broker restart may have lost non-durable
 * entities). {@link consumerQueue} builds the usual shape of a Tidings consumer queue: a quorum queue
 * with a delivery limit, a dead-letter exchange and queue, and quorum TTL queues for delayed retries,
 * every hop at-least-once.
 * @since 0.1.0
 * @module
 */
import * as Settings from "@tidings/core/Settings"
import type { Channel } from "amqplib"
import { Duration, Effect, Schema } from "effect"
import type { TopologyError } from "./AmqpErrors.ts"
import { topologyError } from "./internal/amqpError.ts"

/**
 * An exchange to declare.
 * @since 0.1.0
 * @category models
 */
export interface Exchange {
  readonly name: string
  /** Default `topic`. */
  readonly type?: "direct" | "topic" | "fanout" | "headers"
  /** Default true: survives a broker restart. */
  readonly durable?: boolean
  readonly autoDelete?: boolean
  readonly internal?: boolean
  readonly arguments?: Readonly<Record<string, unknown>>
}

/**
 * A queue to declare.
 * @since 0.1.0
 * @category models
 */
export interface Queue {
  readonly name: string
  /** Default `quorum` (replicated, durable, with delivery counting). */
  readonly type?: "quorum" | "classic"
  /** Default true. Quorum queues are always durable. */
  readonly durable?: boolean
  /** Classic queues only. */
  readonly autoDelete?: boolean
  /** Classic queues only. */
  readonly exclusive?: boolean
  /** Where rejected, expired or over-the-limit messages go. */
  readonly deadLetterExchange?: string
  readonly deadLetterRoutingKey?: string
  /** Messages older than this expire (and are dead-lettered when a dead-letter exchange is set). */
  readonly messageTtl?: Duration.Input
  /** Quorum queues only: after this many deliveries a message is dead-lettered by the broker. */
  readonly deliveryLimit?: number
  /** Extra `x-` arguments, e.g. `x-max-length`. */
  readonly arguments?: Readonly<Record<string, unknown>>
}

/**
 * A binding of a queue to an exchange.
 * @since 0.1.0
 * @category models
 */
export interface Binding {
  readonly exchange: string
  readonly queue: string
  /** Default `""`; for a topic exchange a pattern such as `order.*` or `#`. */
  readonly routingKey?: string
  readonly arguments?: Readonly<Record<string, unknown>>
}

/**
 * A set of entities, declared in order: exchanges, queues, then bindings.
 * @since 0.1.0
 * @category models
 */
export interface Topology {
  readonly exchanges: ReadonlyArray<Exchange>
  readonly queues: ReadonlyArray<Queue>
  readonly bindings: ReadonlyArray<Binding>
}

/**
 * Nothing to declare.
 * @since 0.1.0
 * @category constructors
 */
export const empty: Topology = { exchanges: [], queues: [], bindings: [] }

/**
 * A topology from any of its parts.
 * @since 0.1.0
 * @category constructors
 */
export const make = (parts: Partial<Topology>): Topology => ({
  exchanges: parts.exchanges ?? [],
  queues: parts.queues ?? [],
  bindings: parts.bindings ?? []
})

const bindingKey = (b: Binding) =>
  `${b.exchange}\u0000${b.queue}\u0000${b.routingKey ?? ""}\u0000${JSON.stringify(b.arguments ?? {})}`

/**
 * Several topologies as one; an entity named twice is declared once (the first declaration wins).
 * @since 0.1.0
 * @category constructors
 */
export const merge = (...topologies: ReadonlyArray<Topology>): Topology => {
  const exchanges = new Map<string, Exchange>()
  const queues = new Map<string, Queue>()
  const bindings = new Map<string, Binding>()
  for (const t of topologies) {
    for (const e of t.exchanges) if (!exchanges.has(e.name)) exchanges.set(e.name, e)
    for (const q of t.queues) if (!queues.has(q.name)) queues.set(q.name, q)
    for (const b of t.bindings) if (!bindings.has(bindingKey(b))) bindings.set(bindingKey(b), b)
  }
  return { exchanges: [...exchanges.values()], queues: [...queues.values()], bindings: [...bindings.values()] }
}

/**
 * The `x-` arguments of a queue declaration.
 * @since 0.1.0
 * @category combinators
 */
export const queueArguments = (queue: Queue): Record<string, unknown> => {
  const type = queue.type ?? "quorum"
  const args: Record<string, unknown> = { "x-queue-type": type }
  if (queue.deadLetterExchange !== undefined) args["x-dead-letter-exchange"] = queue.deadLetterExchange
  if (queue.deadLetterRoutingKey !== undefined) args["x-dead-letter-routing-key"] = queue.deadLetterRoutingKey
  if (queue.messageTtl !== undefined) {
    args["x-message-ttl"] = Math.round(Duration.toMillis(Duration.fromInputUnsafe(queue.messageTtl)))
  }
  if (queue.deliveryLimit !== undefined && type === "quorum") args["x-delivery-limit"] = queue.deliveryLimit
  if (type === "quorum" && queue.deadLetterExchange !== undefined) {
    // Quorum queues dead-letter at most once unless told otherwise; a DLQ that may lose messages
    // defeats its purpose. At-least-once needs reject-publish overflow.
    args["x-dead-letter-strategy"] = "at-least-once"
    args["x-overflow"] = "reject-publish"
  }
  return { ...args, ...queue.arguments }
}

const run = <A>(operation: string, entity: string, f: () => Promise<A>): Effect.Effect<A, TopologyError> =>
  Effect.tryPromise({ try: f, catch: (error) => topologyError(operation, entity, error) })

/**
 * Declares a topology on a channel. A failed declaration closes the channel (AMQP's rule), so use a
 * channel of its own. Fails with the first `TopologyError`.
 * @since 0.1.0
 * @category combinators
 */
export const apply = (channel: Channel, topology: Topology): Effect.Effect<void, TopologyError> =>
  Effect.gen(function*() {
    for (const e of topology.exchanges) {
      yield* run("assertExchange", e.name, () =>
        channel.assertExchange(e.name, e.type ?? "topic", {
          durable: e.durable ?? true,
          autoDelete: e.autoDelete ?? false,
          internal: e.internal ?? false,
          ...(e.arguments === undefined ? {} : { arguments: e.arguments })
        }))
    }
    for (const q of topology.queues) {
      const classic = (q.type ?? "quorum") === "classic"
      yield* run("assertQueue", q.name, () =>
        channel.assertQueue(q.name, {
          durable: classic ? q.durable ?? true : true,
          autoDelete: classic ? q.autoDelete ?? false : false,
          exclusive: classic ? q.exclusive ?? false : false,
          arguments: queueArguments(q)
        }))
    }
    for (const b of topology.bindings) {
      yield* run(
        "bindQueue",
        `${b.exchange} -> ${b.queue}`,
        () => channel.bindQueue(b.queue, b.exchange, b.routingKey ?? "", b.arguments ?? {})
      )
    }
  }).pipe(Effect.withSpan("tidings.amqp.topology", {
    attributes: {
      "tidings.amqp.exchanges": topology.exchanges.length,
      "tidings.amqp.queues": topology.queues.length,
      "tidings.amqp.bindings": topology.bindings.length
    }
  }))

/**
 * Options of {@link consumerQueue}.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerQueueOptions {
  /** The work queue; the other names derive from it (`<queue>.dlx`, `<queue>.dlq`, `<queue>.delay.<ms>`). */
  readonly queue: string
  /** The exchange events are published to (declared too when given as an object; default type topic). */
  readonly exchange: string | Exchange
  /** Binding patterns (default `["#"]`: every event of the exchange). */
  readonly routingKeys?: ReadonlyArray<string>
  /** Default `quorum`. Classic queues have no broker-side delivery limit. */
  readonly type?: "quorum" | "classic"
  /** Broker-side limit of deliveries of one message copy (quorum only; default 20): the poison-message guard. */
  readonly deliveryLimit?: number
  /**
   * Delays of the retry queues (default `["1 second", "10 seconds", "1 minute"]`): retry n waits
   * `retryDelays[min(n, length) - 1]`. An empty list declares no retry queues (retries requeue).
   */
  readonly retryDelays?: ReadonlyArray<Duration.Input>
}

/**
 * A retry queue: messages wait `delay` there, then go back to the work queue.
 * @since 0.1.0
 * @category models
 */
export interface RetryQueue {
  readonly name: string
  readonly delay: Duration.Duration
}

/**
 * A consumer queue with its dead-letter and retry queues, and the topology declaring all of it.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerQueue {
  readonly queue: string
  readonly type: "quorum" | "classic"
  readonly deliveryLimit: number | undefined
  readonly deadLetterExchange: string
  readonly deadLetterQueue: string
  readonly retryQueues: ReadonlyArray<RetryQueue>
  readonly topology: Topology
}

const queueName = Schema.String.check(Schema.makeFilter((name: string) =>
  // AMQP short strings: at most 255 bytes; the derived names add up to ~25 characters.
  name.length > 0 && name.length <= 200 && !name.startsWith("amq.")
    ? undefined
    : "must be 1-200 characters and not start with 'amq.'"
))

/**
 * The settings of {@link consumerQueue} that are data, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const ConsumerQueueSchema: Schema.Struct<{
  readonly queue: Schema.String
  readonly type: Settings.Defaulted<Schema.Literals<readonly ["quorum", "classic"]>>
  readonly deliveryLimit: Schema.optional<Settings.IntSetting>
  readonly retryDelays: Settings.Defaulted<Schema.$Array<Settings.DurationSetting>>
}> = Schema.Struct({
  queue: queueName,
  type: Schema.Literals(["quorum", "classic"]).pipe(Schema.withDecodingDefault(Effect.succeed("quorum" as const))),
  deliveryLimit: Schema.optional(Settings.int(1, 1_000_000)),
  retryDelays: Schema.Array(Settings.duration()).pipe(
    Schema.withDecodingDefault(Effect.succeed<ReadonlyArray<Duration.Input>>(["1 second", "10 seconds", "1 minute"]))
  )
})

/**
 * The topology of a consumer queue:
 * - the work queue, bound to `exchange` with `routingKeys`, dead-lettering to `<queue>.dlx`;
 * - `<queue>.dlx` (fanout) and `<queue>.dlq`, where rejected and over-the-limit messages stay for inspection;
 * - one retry queue per delay, `<queue>.delay.<ms>`, whose messages expire back into the work queue
 *   through the default exchange (so other queues bound to `exchange` do not get them again).
 *
 * Every hop a message takes after the broker confirmed it keeps it through broker restarts: the
 * retry queues are quorum queues that dead-letter at-least-once (`x-dead-letter-strategy`, with
 * `reject-publish` overflow, RabbitMQ 3.10+), as the work queue does towards the dead-letter queue.
 * Classic TTL queues dead-letter at most once: a message that expired while the broker restarted, or
 * while the work queue had no leader, was dropped. (Earlier versions declared classic retry queues
 * named `<queue>.retry.<ms>`; they still drain into the work queue and can be deleted once empty.)
 *
 * Throws `InvalidConfig` (naming every wrong setting) for invalid names or limits.
 * @since 0.1.0
 * @category constructors
 */
export const consumerQueue = (options: ConsumerQueueOptions): ConsumerQueue => {
  const s = Settings.decodeSync(ConsumerQueueSchema, options)
  const type = s.type
  const deliveryLimit = type === "quorum" ? s.deliveryLimit ?? 20 : undefined
  const exchange: Exchange = typeof options.exchange === "string" ? { name: options.exchange } : options.exchange
  const deadLetterExchange = `${options.queue}.dlx`
  const deadLetterQueue = `${options.queue}.dlq`
  const retryQueues = s.retryDelays.map((delay): RetryQueue => ({
    name: `${options.queue}.delay.${Math.max(1, Math.round(Duration.toMillis(delay)))}`,
    delay
  }))
  const topology = make({
    exchanges: [exchange, { name: deadLetterExchange, type: "fanout" }],
    queues: [
      {
        name: options.queue,
        type,
        deadLetterExchange,
        ...(deliveryLimit === undefined ? {} : { deliveryLimit })
      },
      { name: deadLetterQueue, type },
      ...retryQueues.map((r): Queue => ({
        name: r.name,
        type: "quorum",
        messageTtl: r.delay,
        deadLetterExchange: "",
        deadLetterRoutingKey: options.queue
      }))
    ],
    bindings: [
      ...(options.routingKeys ?? ["#"]).map((routingKey): Binding => ({
        exchange: exchange.name,
        queue: options.queue,
        routingKey
      })),
      { exchange: deadLetterExchange, queue: deadLetterQueue }
    ]
  })
  return { queue: options.queue, type, deliveryLimit, deadLetterExchange, deadLetterQueue, retryQueues, topology }
}

/**
 * The broker, chosen by configuration, with the same handler code on both: the in-memory broker
 * (`MemoryBroker.consume`, the demo's default: nothing to install) or RabbitMQ (`AmqpPublisher` and
 * `AmqpConsumer` on quorum queues with retry and dead-letter queues). Each consumer gets a queue
 * bound to its event types; a failed handler is redelivered after a delay, up to a delivery limit,
 * then dead-lettered; a non-retryable error dead-letters at once.
 */
import { type Event, EventRegistry, MemoryBroker, Publisher } from "@tidings/core"
import { InvalidConfig } from "@tidings/core/Errors"
import { AmqpConnection, AmqpConsumer, type AmqpErrors, AmqpPublisher, Topology } from "@tidings/rabbitmq"
import * as DeadLetters from "@tidings/rabbitmq/DeadLetters"
import { Context, Effect, Layer } from "effect"
import { type Incoming, UnprocessableMessage } from "./domain.ts"

/** Which broker. */
export type Transport =
  | { readonly _tag: "memory" }
  | {
    readonly _tag: "rabbitmq"
    /** The connection settings (URL, heartbeat, ...); each connection gets its own name. */
    readonly connection: AmqpConnection.Config
    /** Prefix of the exchange and queue names (`<prefix>.events`, `<prefix>.<consumer>`). */
    readonly prefix: string
  }

/** A consumer: a queue bound to event types, and its handler. */
export interface ConsumerSpec<E, R> {
  /** Names the queue (`<prefix>.<name>` on RabbitMQ) and the consumer in metrics. */
  readonly name: string
  readonly types: ReadonlyArray<Event.EventType<string, any>>
  readonly handler: (message: Incoming) => Effect.Effect<void, E, R>
  /** Handlers at once (default 1: in arrival order). */
  readonly concurrency?: number
}

/** Delays before redelivery 1, 2, 3+ (short, for a demo; production would wait longer). */
export const retryDelays = ["200 millis", "1 second", "3 seconds"] as const
/** Deliveries before a failing message is dead-lettered. */
export const maxAttempts = 8

/** What the app sees of the broker. */
export interface Service {
  readonly kind: "memory" | "rabbitmq"
  /** For logs: `in-memory`, or the RabbitMQ URL without credentials. */
  readonly description: string
  /** The relay's publisher. */
  readonly publisher: Publisher.Service
  /** Connected (always, in memory): for the readiness check. */
  readonly isReady: Effect.Effect<boolean>
  /** Messages dead-lettered by the consumers (memory); RabbitMQ keeps them in each queue's `.dlq` instead. */
  readonly deadLetters: Effect.Effect<
    ReadonlyArray<{ readonly queue: string; readonly type: string; readonly id: string; readonly reason: string }>
  >
  /** RabbitMQ: the consumers' dead-letter queues (list, peek, replay), for the console. */
  readonly deadLetterQueues: DeadLetters.Service | undefined
}

/** The broker of the app. */
export class Broker extends Context.Service<Broker, Service>()("orders/Broker") {}

// The same registry decoding as the RabbitMQ consumers (versions, upcasting), on the memory broker.
const decodeMemory = (
  registry: EventRegistry.EventRegistry<EventRegistry.Decoded>,
  d: MemoryBroker.ConsumerDelivery
): Effect.Effect<Incoming, UnprocessableMessage> => {
  const decoded = registry.decode(d.event.type, d.event.version, d.event.payload)
  if (decoded._tag === "UnknownType") {
    return Effect.fail(new UnprocessableMessage({ messageId: d.event.id, reason: `unexpected type ${decoded.type}` }))
  }
  if (decoded._tag === "Invalid") {
    return Effect.fail(new UnprocessableMessage({ messageId: d.event.id, reason: decoded.error.message }))
  }
  return Effect.succeed({
    id: d.event.id,
    type: decoded.event.type,
    payload: decoded.event.payload,
    headers: d.event.headers,
    attempt: d.attempt
  })
}

const memory = <R>(specs: ReadonlyArray<ConsumerSpec<unknown, R>>): Layer.Layer<Broker, InvalidConfig, R> => {
  const consumers = Layer.mergeAll(
    Layer.empty,
    ...specs.map((spec) => {
      const registry = EventRegistry.make(spec.types) as EventRegistry.EventRegistry<EventRegistry.Decoded>
      return MemoryBroker.consumerLayer({
        queue: spec.name,
        types: spec.types.map((t) => t.type),
        concurrency: spec.concurrency ?? 1,
        maxAttempts,
        retryDelays,
        handler: (d) => Effect.flatMap(decodeMemory(registry, d), spec.handler)
      })
    })
  )
  const broker = Layer.effect(
    Broker,
    Effect.gen(function*() {
      const mb = yield* MemoryBroker.MemoryBroker
      const publisher = yield* Publisher.Publisher
      return Broker.of({
        kind: "memory",
        description: "in-memory",
        publisher,
        isReady: Effect.succeed(true),
        deadLetterQueues: undefined,
        deadLetters: Effect.map(
          mb.deadLetters,
          (xs) =>
            xs.map((l) => ({
              queue: l.queue,
              type: l.message.type,
              id: l.message.id,
              reason: `${l.reason}: ${l.error}`
            }))
        )
      })
    })
  )
  // The consumers are subscribed before the Broker (and so the relay, which needs its publisher) exists.
  return broker.pipe(Layer.provide(consumers), Layer.provide(MemoryBroker.layer()))
}

/** The queue of a consumer on RabbitMQ, with its dead-letter and retry queues. */
const consumerQueue = (prefix: string, name: string, types: ReadonlyArray<Event.EventType<string, any>>) =>
  Topology.consumerQueue({
    queue: `${prefix}.${name}`,
    exchange: `${prefix}.events`,
    routingKeys: types.map((t) => t.type),
    retryDelays
  })

/** Every exchange and queue the service declares on RabbitMQ under `prefix` (for operators, and test clean-up). */
export const rabbitmqNames = (prefix: string, consumers: ReadonlyArray<string>) => {
  const topology = Topology.merge(...consumers.map((name) => consumerQueue(prefix, name, []).topology))
  return { exchanges: topology.exchanges.map((e) => e.name), queues: topology.queues.map((q) => q.name) }
}

const rabbitmq = <R>(
  transport: Extract<Transport, { _tag: "rabbitmq" }>,
  specs: ReadonlyArray<ConsumerSpec<unknown, R>>
) => {
  if (!/^[\w.-]{1,100}$/.test(transport.prefix)) {
    return Layer.effect(
      Broker,
      Effect.fail(new InvalidConfig({ path: "prefix", message: "must be 1-100 characters of [A-Za-z0-9_.-]" }))
    )
  }
  const exchange = `${transport.prefix}.events`
  const queues = specs.map((spec) => ({
    spec,
    queue: consumerQueue(transport.prefix, spec.name, spec.types)
  }))
  // Queues are declared by the publishing connection too: a message published before a consumer
  // connected still has a queue to go to (the publisher is `mandatory`).
  const topology = Topology.merge(...queues.map((q) => q.queue.topology))
  const Publishing = AmqpConnection.layer({ ...transport.connection, name: "orders-publisher", topology })
  const Consuming = AmqpConnection.layer({ ...transport.connection, name: "orders-consumers" })
  const consumers = Layer.mergeAll(
    Layer.empty,
    ...queues.map(({ queue, spec }) =>
      AmqpConsumer.layer({
        name: spec.name,
        queue,
        registry: EventRegistry.make(spec.types),
        concurrency: spec.concurrency ?? 1,
        maxAttempts,
        handler: (d) =>
          d.messageId === undefined
            ? Effect.fail(new UnprocessableMessage({ messageId: "", reason: "no message id" }))
            : spec.handler({
              id: d.messageId,
              type: d.event.type,
              payload: d.event.payload,
              headers: d.headers,
              attempt: d.attempt
            })
      })
    )
  ).pipe(Layer.provide(Consuming))
  const broker = Layer.effect(
    Broker,
    Effect.gen(function*() {
      const connection = yield* AmqpConnection.AmqpConnection
      const publisher = yield* AmqpPublisher.make({ exchange })
      const deadLetterQueues = yield* DeadLetters.make({ queues: queues.map((q) => q.queue) })
      return Broker.of({
        kind: "rabbitmq",
        description: connection.description,
        publisher,
        isReady: connection.isReady,
        deadLetters: Effect.succeed([]),
        deadLetterQueues
      })
    })
  )
  return broker.pipe(Layer.provide(Layer.merge(Publishing, consumers)))
}

/** What building the broker can fail with. */
export type BrokerError = InvalidConfig | AmqpErrors.AmqpConnectionError | AmqpErrors.TopologyError

/** The broker and the consumers of `specs`, running while the layer lives. */
export const layer = <R>(
  transport: Transport,
  specs: ReadonlyArray<ConsumerSpec<unknown, R>>
): Layer.Layer<Broker, BrokerError, R> => transport._tag === "memory" ? memory(specs) : rabbitmq(transport, specs)

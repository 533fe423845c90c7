/**
 * The benchmarks' RabbitMQ: one broker per benchmark process (a private node of Debian's
 * `rabbitmq-server` started by `test/support/rabbitmq.ts`, or the broker at `TIDINGS_AMQP_URL`),
 * a fresh queue per run, Tidings connections, and the raw amqplib helpers that check what arrived.
 * @module
 */
import type * as Message from "@tidings/core/Message"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import * as Topology from "@tidings/rabbitmq/Topology"
import * as amqp from "amqplib"
import type { Channel, ChannelModel } from "amqplib"
import { Context, Effect, Layer, type Scope } from "effect"
import { startRabbit } from "../../../test/support/rabbitmq.ts"
import { log } from "./report.ts"

/** What the benchmark ran against, for the report. */
export interface BrokerInfo {
  readonly url: string
  readonly external: boolean
  readonly version: string
}

/**
 * A raw amqplib connection, closed with the scope. Nagle is off, as in `AmqpConnection` (amqplib's
 * default leaves it on, which delays small writes such as a window's single refills).
 */
export const rawConnection = (url: string): Effect.Effect<ChannelModel, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const model = await amqp.connect(url, { noDelay: true })
      // Without an 'error' listener a connection error would crash the process.
      model.on("error", () => undefined)
      return model
    }),
    (model) => Effect.promise(() => model.close().catch(() => undefined))
  )

/** A plain channel on `model` (closed with the connection). */
export const rawChannel = (model: ChannelModel): Effect.Effect<Channel> =>
  Effect.promise(async () => {
    const channel = await model.createChannel()
    channel.on("error", () => undefined)
    return channel
  })

/** A fresh classic queue, its exchange, and a confirm channel on a connection of its own (raw amqplib). */
export const confirmTarget = (url: string, prefix: string) =>
  Effect.gen(function*() {
    const queue = yield* freshQueue(url, prefix, "classic")
    const model = yield* rawConnection(url)
    const channel = yield* Effect.promise(() => model.createConfirmChannel())
    channel.on("error", () => undefined)
    return { queue, exchange: exchangeOf(queue), channel }
  })

/**
 * Starts the broker (or takes `TIDINGS_AMQP_URL`); stopped when the scope closes, which `main`
 * also does on Ctrl-C. The node's own exit hook kills it if the process dies without that.
 */
export const broker: Effect.Effect<BrokerInfo, never, Scope.Scope> = Effect.gen(function*() {
  const started = performance.now()
  const rabbit = yield* Effect.acquireRelease(
    Effect.promise(() => startRabbit({ name: "tidings-bench" })),
    (r) => Effect.promise(() => r.stop())
  )
  const version = yield* Effect.scoped(
    Effect.map(rawConnection(rabbit.url), (m) => String(m.connection.serverProperties["version"] ?? "?"))
  )
  log(
    `rabbitmq ${version} (${rabbit.external ? "TIDINGS_AMQP_URL" : "private node"}), ready in ${
      ((performance.now() - started) / 1000).toFixed(1)
    } s`
  )
  return { url: rabbit.url, external: rabbit.external, version }
})

/** Queue types the benchmarks compare. */
export type QueueType = "classic" | "quorum"

let queues = 0

/**
 * A fresh consumer queue of `type` (`Topology.consumerQueue`, without retry queues) bound to a fresh
 * topic exchange with `#`, declared now and deleted with the scope, so that runs never share
 * messages and an external broker is left as it was.
 */
export const freshQueue = (
  url: string,
  prefix: string,
  type: QueueType
): Effect.Effect<Topology.ConsumerQueue, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.scoped(Effect.gen(function*() {
      const name = `bench.${prefix}.${process.pid}.${(queues++).toString(36)}`
      const queue = Topology.consumerQueue({
        queue: name,
        exchange: { name: `${name}.x`, type: "topic" },
        type,
        retryDelays: []
      })
      const channel = yield* rawChannel(yield* rawConnection(url))
      yield* Topology.apply(channel, queue.topology).pipe(Effect.orDie)
      return queue
    })),
    (queue) =>
      Effect.scoped(Effect.gen(function*() {
        const channel = yield* rawChannel(yield* rawConnection(url))
        yield* Effect.promise(async () => {
          for (const q of [queue.queue, queue.deadLetterQueue]) await channel.deleteQueue(q).catch(() => undefined)
          for (const x of [queue.topology.exchanges[0]!.name, queue.deadLetterExchange]) {
            await channel.deleteExchange(x).catch(() => undefined)
          }
        })
      })).pipe(Effect.timeoutOption("30 seconds"), Effect.ignore)
  )

/** The exchange a queue from {@link freshQueue} is bound to. */
export const exchangeOf = (queue: Topology.ConsumerQueue): string => queue.topology.exchanges[0]!.name

/** A Tidings connection for the scope (`name` shows in the broker's connection list). */
export const connection = (url: string, name: string): Effect.Effect<AmqpConnection.Service, never, Scope.Scope> =>
  Effect.map(
    Layer.build(AmqpConnection.layer({ url, name })),
    (context) => Context.get(context, AmqpConnection.AmqpConnection)
  ).pipe(
    Effect.orDie
  )

/** The relay's RabbitMQ publisher on `connection`, with `channels` confirm channels. */
export const publisher = (
  connection: AmqpConnection.Service,
  exchange: string,
  channels: number
): Effect.Effect<AmqpPublisher.Service, never, Scope.Scope> =>
  AmqpPublisher.make({ exchange, channels }).pipe(
    Effect.provideService(AmqpConnection.AmqpConnection, connection),
    Effect.orDie
  )

/** Ready messages in `queue`. */
export const depth = (url: string, queue: string): Effect.Effect<number> =>
  Effect.scoped(Effect.gen(function*() {
    const channel = yield* rawChannel(yield* rawConnection(url))
    return (yield* Effect.promise(() => channel.checkQueue(queue))).messageCount
  }))

/** What {@link collect} found in a queue. */
export interface Collected {
  /** Messages taken from the queue. */
  readonly received: number
  /** Distinct message ids among them. */
  readonly distinct: number
  /** Ids in `expected` that never arrived. */
  readonly missing: number
}

/**
 * Takes every ready message of `queue` (auto-ack) and compares their ids with `expected`: the check
 * that nothing was lost or published twice. Stops when the queue reported empty at the start is
 * drained, or after `timeoutMs`.
 */
export const collect = (
  url: string,
  queue: string,
  expected: Iterable<string>,
  timeoutMs = 60_000
): Effect.Effect<Collected> =>
  Effect.scoped(Effect.gen(function*() {
    const channel = yield* rawChannel(yield* rawConnection(url))
    const ready = (yield* Effect.promise(() => channel.checkQueue(queue))).messageCount
    const seen = new Set<string>()
    let received = 0
    yield* Effect.promise(() => channel.prefetch(5_000))
    yield* Effect.callback<void>((resume) => {
      const timer = setTimeout(() => resume(Effect.void), timeoutMs)
      const done = () => {
        clearTimeout(timer)
        resume(Effect.void)
      }
      if (ready === 0) return done()
      void channel.consume(queue, (m) => {
        if (m === null) return
        received++
        const id: unknown = m.properties.messageId
        if (typeof id === "string") seen.add(id)
        if (received >= ready) done()
      }, { noAck: true })
    })
    let missing = 0
    for (const id of expected) if (!seen.has(id)) missing++
    return { received, distinct: seen.size, missing }
  }))

/** A W3C traceparent of the shape the relay adds to every message (so raw messages carry the same bytes). */
export const sampleTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

/** The AMQP message `AmqpPublisher` would send for `message` (same body, properties and headers). */
export const outgoing = (message: Message.Message, exchange: string): ReturnType<typeof AmqpPublisher.toOutgoing> =>
  AmqpPublisher.toOutgoing({ ...message, headers: { ...message.headers, traceparent: sampleTraceparent } }, {
    exchange
  })

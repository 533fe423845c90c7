/**
 * Helpers for the RabbitMQ tests: the broker URL from the global setup, unique names, a raw amqplib
 * channel to publish and inspect with, sample event types, and bounded waits.
 */
import * as Event from "@tidings/core/Event"
import * as amqp from "amqplib"
import type { Channel, GetMessage, Options } from "amqplib"
import { Effect, Layer, Logger, References, Schedule, Schema, type Scope, Tracer } from "effect"
import { inject } from "vitest"
import { untilTrue } from "../../../test/support/progress.ts"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as Topology from "../src/Topology.ts"

declare module "vitest" {
  export interface ProvidedContext {
    amqpUrl: string
  }
}

/** The URL of the shared test broker. */
export const amqpUrl = (): string => {
  const url = inject("amqpUrl") ?? process.env["TIDINGS_TEST_AMQP_URL"]
  if (url === undefined) {
    throw new Error("no test RabbitMQ: run through vitest (global setup) or set TIDINGS_TEST_AMQP_URL")
  }
  return url
}

let counter = 0
/** A name no other test (or test run) uses. */
export const unique = (prefix: string): string =>
  `t.${prefix}.${process.pid}.${Date.now().toString(36)}.${(counter++).toString(36)}${
    Math.random().toString(36).slice(2, 6)
  }`

/** A reconnect schedule for tests: 100 ms doubling to 1 s. */
export const fastReconnect = Schedule.min([Schedule.exponential("100 millis", 2), Schedule.spaced("1 second")])

/** A connection layer on the shared broker. */
export const connectionLayer = (options: Partial<AmqpConnection.Config> = {}, url = amqpUrl()) =>
  AmqpConnection.layer({ url, reconnect: fastReconnect, heartbeat: "5 seconds", ...options })

/** A connection on the shared broker for the enclosing scope. */
export const connect = (options: Partial<AmqpConnection.Config> = {}, url = amqpUrl()) =>
  AmqpConnection.make({ url, reconnect: fastReconnect, heartbeat: "5 seconds", ...options })

/** A plain amqplib channel for the test's own publishing and inspection, closed with the scope. */
export const rawChannel = (url = amqpUrl()): Effect.Effect<Channel, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const model = await amqp.connect(url)
      model.on("error", () => undefined)
      const channel = await model.createChannel()
      channel.on("error", () => undefined)
      return { model, channel }
    }),
    ({ model }) => Effect.promise(() => model.close().catch(() => undefined))
  ).pipe(Effect.map(({ channel }) => channel))

/** Declares a topology with a raw channel of its own (a failure closes only that channel). */
export const declareRaw = (topology: Topology.Topology, url = amqpUrl()) =>
  Effect.scoped(Effect.gen(function*() {
    const channel = yield* rawChannel(url)
    yield* Topology.apply(channel, topology)
  }))

/** Publishes one message the way a foreign producer would. */
export const publishRaw = (
  channel: Channel,
  exchange: string,
  routingKey: string,
  body: string | Buffer,
  options: Options.Publish = {}
) =>
  Effect.sync(() =>
    channel.publish(exchange, routingKey, Buffer.isBuffer(body) ? body : Buffer.from(body), {
      persistent: true,
      ...options
    })
  )

/** Ready messages in a queue. */
export const messageCount = (channel: Channel, queue: string) =>
  Effect.promise(() => channel.checkQueue(queue)).pipe(Effect.map((q) => q.messageCount))

/** Takes every ready message of a queue (acking them). */
export const drain = (channel: Channel, queue: string) =>
  Effect.promise(async () => {
    const out: Array<GetMessage> = []
    for (let i = 0; i < 100_000; i++) {
      const m = await channel.get(queue, { noAck: true })
      if (m === false) break
      out.push(m)
    }
    return out
  })

/** Polls `check` every 25 ms until it holds (past `expected`, it says what it still waits for). */
export const eventually = untilTrue

/** Every log line as JSON text (message, annotations, cause), at every level. */
export const captureLogs = () => {
  const lines: Array<string> = []
  const layer = Layer.mergeAll(
    Logger.layer([Logger.map(Logger.formatJson, (line) => void lines.push(line))]),
    Layer.succeed(References.MinimumLogLevel, "All")
  )
  return { lines, layer }
}

/** A tracer that keeps every span it creates. */
export const recordingTracer = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  return { spans, layer: Layer.succeed(Tracer.Tracer, tracer) }
}

// Sample events: order.placed in two versions, and a shipment event.
export const OrderPlacedV1 = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
})
export const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  version: 2,
  schema: Schema.Struct({
    orderId: Schema.String,
    total: Schema.Struct({ cents: Schema.Int, currency: Schema.String })
  })
})
export const ShipmentSent = Event.define("shipment.sent", {
  aggregateType: "shipment",
  schema: Schema.Struct({ shipmentId: Schema.String })
})

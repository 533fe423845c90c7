/**
 * The RabbitMQ consumer on the shared test broker: the consumer contract (core's decision table,
 * the same as the in-memory broker's), then what is RabbitMQ's own: requeue mode and broker
 * delivery counts, the broker's delivery limit, malformed bodies and version headers, tracing,
 * graceful shutdown, resubscribing after a reconnect, and settings.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as Consumer from "@tidings/core/Consumer"
import * as Errors from "@tidings/core/Errors"
import { InvalidConfig } from "@tidings/core/Errors"
import * as EventRegistry from "@tidings/core/EventRegistry"
import * as Inbox from "@tidings/core/Inbox"
import * as InboxStore from "@tidings/core/InboxStore"
import * as MemoryInboxStore from "@tidings/core/MemoryInboxStore"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import type * as Message from "@tidings/core/Message"
import * as OutboxStore from "@tidings/core/OutboxStore"
import { consumerContract } from "@tidings/core/testing"
import type { GetMessage, Options } from "amqplib"
import { Data, Deferred, type Duration, Effect, Exit, Fiber, Metric, Scope } from "effect"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as Topology from "../src/Topology.ts"
import {
  captureLogs,
  connect,
  drain,
  eventually,
  messageCount,
  OrderPlaced,
  OrderPlacedV1,
  rawChannel,
  recordingTracer,
  ShipmentSent,
  unique
} from "./helpers.ts"

class Transient extends Data.TaggedError("Transient")<{}> {
  get isRetryable() {
    return true
  }
}

const registry = EventRegistry.make([
  EventRegistry.entry(
    OrderPlaced,
    EventRegistry.upcast(
      OrderPlacedV1,
      (v1) => ({ orderId: v1.orderId, total: { cents: v1.totalCents, currency: "EUR" } })
    )
  ),
  ShipmentSent
])
interface Handled {
  readonly attempt: number
  readonly event: EventRegistry.Decoded
  readonly at: number
  readonly delivery: Consumer.Delivery<unknown>
}

const v2 = (orderId: string) => ({ orderId, total: { cents: 100, currency: "EUR" } })

/** A consumer queue (quorum, 200 ms retry queue) on a fresh exchange, removed at the end. */
const setup = (
  options: {
    readonly deliveryLimit?: number
    readonly retryDelays?: ReadonlyArray<Duration.Input>
    readonly type?: "quorum" | "classic"
  } = {}
) =>
  Effect.gen(function*() {
    const exchange = unique("c.x")
    const cq = Topology.consumerQueue({
      queue: unique("c.q"),
      exchange: { name: exchange, autoDelete: true },
      retryDelays: options.retryDelays ?? ["200 millis"],
      ...(options.type === undefined ? {} : { type: options.type }),
      ...(options.deliveryLimit === undefined ? {} : { deliveryLimit: options.deliveryLimit })
    })
    const connection = yield* connect()
    const raw = yield* rawChannel()
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        for (const q of cq.topology.queues) await raw.deleteQueue(q.name).catch(() => undefined)
        await raw.deleteExchange(cq.deadLetterExchange).catch(() => undefined)
      })
    )
    const handled: Array<Handled> = []
    let n = 0
    /** Publishes a message as the relay does (AmqpPublisher's encoding), with optional overrides. */
    const sendMessage = (
      message: Message.Message,
      override: { readonly content?: Buffer; readonly options?: Options.Publish } = {}
    ) =>
      Effect.sync(() => {
        const out = AmqpPublisher.toOutgoing(message, { exchange })
        raw.publish(exchange, out.routingKey, override.content ?? out.content, { ...out.options, ...override.options })
        return message.id
      })
    const send = (
      type: string,
      version: number,
      payload: unknown,
      override: { readonly content?: Buffer; readonly options?: Options.Publish } = {}
    ) =>
      sendMessage({
        id: crypto.randomUUID(),
        type,
        version,
        aggregateType: "order",
        aggregateId: `a-${n++}`,
        orderingKey: `a-${n}`,
        payload,
        headers: {},
        occurredAt: new Date()
      }, override)
    const start = <E, A = EventRegistry.Decoded>(
      config: Omit<AmqpConsumer.Config<A, E, never>, "name" | "queue" | "registry" | "handler"> & {
        readonly handler: (d: Consumer.Delivery<A>) => Effect.Effect<void, E>
        readonly registry?: EventRegistry.EventRegistry<A>
      }
    ) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const name = unique("consumer").replaceAll(".", "-")
        const consumer = yield* AmqpConsumer.make<A, E, never>({
          name,
          queue: cq,
          registry: (config.registry ?? registry) as EventRegistry.EventRegistry<A>,
          timeout: "2 seconds",
          ...config,
          handler: (d) =>
            Effect.suspend(() => {
              handled.push({ attempt: d.attempt, event: d.event as EventRegistry.Decoded, at: Date.now(), delivery: d })
              return config.handler(d)
            })
        }).pipe(Scope.provide(scope), Effect.provideService(AmqpConnection.AmqpConnection, connection))
        yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
        const metric = (m: Metric.Counter<number>, extra: Record<string, string> = {}) =>
          Effect.map(Metric.value(Metric.withAttributes(m, { consumer: name, ...extra })), (s) => s.count)
        return { consumer, name, stop: Scope.close(scope, Exit.void), metric }
      })
    const dead: Array<GetMessage> = []
    /** Everything dead-lettered so far (drained from the DLQ and kept). */
    const dlq = Effect.map(drain(raw, cq.deadLetterQueue), (more) => (dead.push(...more), dead.slice()))
    return { exchange, cq, connection, raw, handled, send, sendMessage, start, dlq }
  })

const ok = () => Effect.void

consumerContract("AmqpConsumer", {
  clock: "live",
  start: (options) =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({
        registry: options.registry,
        handler: options.handler,
        maxAttempts: options.maxAttempts,
        timeout: options.timeout,
        unavailableDelay: options.unavailableDelay,
        ...(options.unknownType === undefined ? {} : { unknownType: options.unknownType }),
        ...(options.decide === undefined ? {} : { decide: options.decide })
      })
      return {
        name: c.name,
        publish: (m: Message.Message) => Effect.asVoid(t.sendMessage(m)),
        deadLetters: Effect.map(t.dlq, (xs) =>
          xs.map((m) => ({ messageId: m.properties.messageId as string | undefined }))),
        retryDelay: "200 millis"
      }
    })
})

describe("AmqpConsumer: RabbitMQ's own retry modes and limits", () => {
  it.live("transient error in requeue mode -> immediate redelivery (broker delivery count), then success", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({
        retry: "requeue",
        handler: (d) => d.attempt === 1 ? Effect.fail(new Transient()) : Effect.void
      })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "the requeued delivery")
      assert.deepStrictEqual(t.handled.map((h) => h.attempt), [1, 2])
      assert.isTrue(t.handled[1]!.delivery.redelivered)
      yield* eventually(
        Effect.map(c.metric(AmqpConsumer.metrics.retried, { mode: "requeue" }), (n) => n === 1),
        "5 seconds",
        "the requeue"
      )
    }).pipe(Effect.scoped))

  it.live("a classic queue in requeue mode still counts attempts (copies carry the count) and dead-letters at maxAttempts", () =>
    Effect.gen(function*() {
      const t = yield* setup({ type: "classic", retryDelays: [] })
      const c = yield* t.start({ maxAttempts: 3, handler: () => Effect.fail(new Transient()) })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      assert.deepStrictEqual(t.handled.map((h) => h.attempt), [1, 2, 3])
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.retried, { mode: "requeue" }), 2)
    }).pipe(Effect.scoped))

  it.live("the broker's delivery limit (quorum x-delivery-limit) dead-letters a message that keeps coming back", () =>
    Effect.gen(function*() {
      const t = yield* setup({ deliveryLimit: 2 })
      // Requeue whatever happens and never give up ourselves: only the broker can stop it.
      yield* t.start({ maxAttempts: 1000, decide: () => "requeue", handler: () => Effect.fail(new Transient()) })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(
        Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1),
        "10 seconds",
        "the broker's dead-letter"
      )
      assert.isAtMost(t.handled.length, 3)
      assert.isAtLeast(t.handled.length, 2)
    }).pipe(Effect.scoped))
})

describe("AmqpConsumer: a database that is down", () => {
  it.live("the inbox's store is unavailable: deliveries are held and retried, none uses up its delivery limit, all handled once when it is back", () =>
    Effect.gen(function*() {
      // The broker's own limit is 2 deliveries: two requeues would dead-letter the message.
      const t = yield* setup({ deliveryLimit: 2 })
      const memory = yield* MemoryInboxStore.make
      let down = true
      const downError = new Errors.StoreError({
        operation: "inbox.begin",
        message: "connect ECONNREFUSED 127.0.0.1:5432",
        reason: new Errors.Unavailable()
      })
      // The inbox store of a database that refuses connections (until `down` is cleared).
      const flaky: InboxStore.Service = {
        ...memory,
        begin: (...args) => down ? Effect.fail(downError) : memory.begin(...args)
      }
      const outbox = yield* MemoryOutboxStore.make
      const effects: Array<string | undefined> = []
      const handler = Inbox.wrap(
        "db-down",
        (d: Consumer.Delivery<EventRegistry.Decoded>) => Effect.sync(() => void effects.push(d.messageId))
      )
      const c = yield* t.start({
        concurrency: 2,
        maxAttempts: 2,
        unavailableDelay: "50 millis",
        unavailableMaxDelay: "200 millis",
        handler: (d) =>
          handler(d).pipe(
            Effect.provideService(InboxStore.InboxStore, flaky),
            Effect.provideService(OutboxStore.OutboxStore, outbox)
          )
      })
      const first = yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(c.consumer.paused, "10 seconds", "the consumer to pause")
      const second = yield* t.send("order.placed", 2, v2("o2"))
      // A long outage: the held delivery is retried many times; the second one does not start.
      yield* eventually(
        Effect.map(c.metric(AmqpConsumer.metrics.unavailable), (n) => n >= 10),
        "20 seconds",
        "ten held retries"
      )
      assert.isTrue(t.handled.every((h) => h.delivery.messageId === first), "nothing else started while paused")
      down = false
      yield* eventually(Effect.sync(() => effects.length === 2), "10 seconds", "both effects")
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 2), "10 seconds", "both acks")
      assert.deepStrictEqual(effects, [first, second])
      assert.isTrue(t.handled.every((h) => h.attempt === 1), "no delivery counted against the limit")
      assert.isFalse(yield* c.consumer.paused)
      yield* c.stop
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
      assert.deepStrictEqual(yield* t.dlq, [])
    }).pipe(Effect.scoped))
})

describe("AmqpConsumer: decoding", () => {
  it.live("an unknown newer version is decoded best-effort with the current schema and logged; if that fails it is dead-lettered", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const logs = captureLogs()
      yield* t.start({ handler: ok }).pipe(Effect.provide(logs.layer))
      // v3 added a field: the v2 schema still decodes it (extra fields are dropped).
      yield* t.send("order.placed", 3, { ...v2("v3-compatible"), channel: "web" })
      // v3 renamed a field: the v2 schema cannot decode it.
      yield* t.send("order.placed", 3, { id: "v3-incompatible" })
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      yield* eventually(Effect.sync(() => t.handled.length === 1), "5 seconds", "the compatible one")
      assert.deepStrictEqual(t.handled[0]!.event, {
        type: "order.placed",
        version: 2,
        receivedVersion: 3,
        payload: v2("v3-compatible")
      })
      assert.isTrue(
        logs.lines.some((l) => l.includes("newer than the registered version")),
        "the best-effort decode is logged"
      )
    }).pipe(Effect.scoped))

  it.live("an unknown type is logged", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const logs = captureLogs()
      const c = yield* t.start({ handler: ok }).pipe(Effect.provide(logs.layer))
      yield* t.send("invoice.issued", 1, { invoiceId: "i1" })
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "10 seconds", "the ack")
      assert.isTrue(logs.lines.some((l) => l.includes("unknown event type invoice.issued")))
      yield* c.stop
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
    }).pipe(Effect.scoped))

  it.live("malformed deliveries (invalid JSON, huge body, no type, a version header that is not an integer >= 1) go to the DLQ with a typed reason", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const logs = captureLogs()
      const c = yield* t.start({ handler: ok, maxBodyBytes: 4096 }).pipe(Effect.provide(logs.layer))
      const version = AmqpPublisher.HeaderNames.version
      yield* t.send("order.placed", 2, null, { content: Buffer.from("{not json") })
      yield* t.send("order.placed", 2, { orderId: "x".repeat(10_000), total: { cents: 1, currency: "EUR" } })
      yield* t.send("order.placed", 2, v2("no-type"), { options: { type: "" } })
      const abc = yield* t.send("order.placed", 2, v2("abc"), { options: { headers: { [version]: "abc" } } })
      const zero = yield* t.send("order.placed", 2, v2("zero"), { options: { headers: { [version]: 0 } } })
      yield* t.send("order.placed", 2, v2("good"))
      yield* eventually(
        Effect.map(c.metric(AmqpConsumer.metrics.deadLettered, { reason: "DecodeFailure" }), (n) => n === 5),
        "10 seconds",
        "five dead-letters"
      )
      yield* eventually(Effect.sync(() => t.handled.length === 1), "5 seconds", "the good message")
      assert.strictEqual((t.handled[0]!.event.payload as { orderId: string }).orderId, "good")
      assert.isTrue(yield* c.consumer.isConsuming)
      const dead = yield* eventually(Effect.map(t.dlq, (d) => d.length === 5), "10 seconds", "the DLQ").pipe(
        Effect.andThen(t.dlq)
      )
      assert.isTrue(dead.every((m) => m.properties.headers?.["x-first-death-reason"] === "rejected"))
      assert.includeMembers(dead.map((m) => m.properties.messageId), [abc, zero])
      for (
        const shown of [
          "(InvalidVersion): version header \\\"abc\\\" is not an integer >= 1",
          "(InvalidVersion): version header 0 is not an integer >= 1"
        ]
      ) {
        assert.isTrue(logs.lines.some((l) => l.includes(shown)), shown)
      }
    }).pipe(Effect.scoped))
})

describe("AmqpConsumer: tracing, shutdown, reconnect", () => {
  it.live("the handler span continues the trace of the traceparent header", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const tracing = recordingTracer()
      yield* t.start({ handler: () => Effect.withSpan(Effect.void, "inner") }).pipe(Effect.provide(tracing.layer))
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
      const parentId = "00f067aa0ba902b7"
      yield* t.send("order.placed", 2, v2("o1"), {
        options: { headers: { [AmqpPublisher.HeaderNames.version]: 2, traceparent: `00-${traceId}-${parentId}-01` } }
      })
      const name = `process ${t.cq.queue}`
      yield* eventually(
        Effect.sync(() => tracing.spans.some((s) => s.name === name && s.status._tag === "Ended")),
        "10 seconds",
        "the span"
      )
      const span = tracing.spans.find((s) => s.name === name)!
      assert.strictEqual(span.traceId, traceId)
      assert.strictEqual(span.parent?._tag === "Some" ? span.parent.value.spanId : undefined, parentId)
      assert.strictEqual(span.kind, "consumer")
      assert.strictEqual(span.attributes.get("tidings.consumer.outcome"), "Success")
      assert.strictEqual(span.attributes.get("messaging.system"), "rabbitmq")
      assert.strictEqual(span.attributes.get("messaging.operation.type"), "process")
      assert.strictEqual(span.attributes.get("messaging.destination.name"), t.cq.queue)
      assert.deepStrictEqual(span.links.map((l) => l.span.spanId), [parentId], "linked to the producer's span")
      const inner = tracing.spans.find((s) => s.name === "inner")!
      assert.strictEqual(inner.traceId, traceId)
    }).pipe(Effect.scoped))

  it.live("graceful shutdown: the running handler finishes, deliveries that did not start are requeued", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      let finished = 0
      const release = yield* Deferred.make<void>()
      const c = yield* t.start({
        concurrency: 1,
        prefetch: 10,
        handler: () => Deferred.await(release).pipe(Effect.andThen(Effect.sync(() => void finished++)))
      })
      for (let i = 0; i < 4; i++) yield* t.send("order.placed", 2, v2(`o${i}`))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the first handler to start")
      // All four delivered to us: one running, three prefetched and waiting for the worker.
      yield* eventually(Effect.map(c.consumer.waiting, (n) => n === 3), "10 seconds", "the prefetch")
      const stopping = yield* Effect.forkChild(c.stop)
      yield* eventually(Effect.map(c.consumer.isConsuming, (on) => !on), "5 seconds", "the shutdown to begin")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(stopping)
      assert.strictEqual(finished, 1, "the running handler completed")
      assert.strictEqual(t.handled.length, 1, "nothing else started")
      yield* eventually(
        Effect.map(messageCount(t.raw, t.cq.queue), (n) => n === 3),
        "5 seconds",
        "3 requeued deliveries"
      )
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.acked), 1)
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.retried, { mode: "shutdown" }), 3)
    }).pipe(Effect.scoped))

  it.live("shutdown deadline: a handler still running is interrupted and its delivery requeued", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ shutdownTimeout: "200 millis", timeout: "1 minute", handler: () => Effect.never })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the handler to start")
      const started = Date.now()
      yield* c.stop
      assert.isBelow(Date.now() - started, 3000)
      yield* eventually(
        Effect.map(messageCount(t.raw, t.cq.queue), (n) => n === 1),
        "5 seconds",
        "the requeued delivery"
      )
    }).pipe(Effect.scoped))

  it.live("after the connection drops, the consumer resubscribes with its prefetch by itself", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: ok })
      yield* t.send("order.placed", 2, v2("before"))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the first delivery")
      yield* t.connection.restart
      yield* eventually(
        Effect.map(t.connection.state, (s) => s._tag === "Connected" && s.generation === 2),
        "10 seconds",
        "the reconnect"
      )
      yield* eventually(c.consumer.isConsuming, "10 seconds", "the resubscription")
      yield* t.send("order.placed", 2, v2("after"))
      // "before" may come again first: its ack can be lost with the connection (at least once).
      const orderIds = () => t.handled.map((d) => (d.event.payload as { orderId: string }).orderId)
      yield* eventually(Effect.sync(() => orderIds().includes("after")), "10 seconds", "a delivery after the reconnect")
      assert.deepStrictEqual([...new Set(orderIds())], ["before", "after"])
    }).pipe(Effect.scoped))

  it.live("consumer settings are validated: one InvalidConfig names every wrong setting", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const exit = yield* Effect.exit(
        t.start({ handler: ok, prefetch: 0, concurrency: 1.5, unknownType: "drop" as never })
      )
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
      const e = error?._tag === "Fail" ? error.error : undefined
      assert.instanceOf(e, InvalidConfig)
      assert.deepStrictEqual((e as InvalidConfig).issues?.map((i) => i.path), [
        "concurrency",
        "prefetch",
        "unknownType"
      ])
      const classic = yield* Effect.exit(
        AmqpConsumer.make({ name: "x", queue: "plain", registry, retry: "delayed", handler: ok }).pipe(
          Effect.provideService(AmqpConnection.AmqpConnection, t.connection),
          Effect.scoped
        )
      )
      assert.include(
        Exit.isFailure(classic) ? String(classic.cause) : "",
        "delayed retries need a consumer queue with retry queues"
      )
      assert.throws(
        () => Topology.consumerQueue({ queue: "amq.nope", exchange: "x", retryDelays: [0] }),
        /queue: must be 1-200 characters.*retryDelays\.0/
      )
    }).pipe(Effect.scoped))
})

import { assert, describe, it } from "@effect/vitest"
import type * as Message from "@tidings/core/Message"
import type { Options } from "amqplib"
import { Data, type Duration, Effect, Exit, Metric, Scope } from "effect"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import { DecodeError } from "../src/AmqpErrors.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as EventRegistry from "../src/EventRegistry.ts"
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
class BusinessRule extends Data.TaggedError("BusinessRule")<{ readonly rule: string }> {
  get isRetryable() {
    return false
  }
}

const registry = EventRegistry.make([
  EventRegistry.entry(OrderPlaced, EventRegistry.upcast(OrderPlacedV1, (v1) => ({ orderId: v1.orderId, total: { cents: v1.totalCents, currency: "EUR" } }))),
  ShipmentSent
])
interface Handled {
  readonly attempt: number
  readonly event: EventRegistry.Decoded
  readonly at: number
  readonly delivery: AmqpConsumer.Delivery<unknown>
}

const v2 = (orderId: string) => ({ orderId, total: { cents: 100, currency: "EUR" } })

/** A consumer queue (quorum, 200 ms retry queue) on a fresh exchange, removed at the end. */
const setup = (
  options: { readonly deliveryLimit?: number; readonly retryDelays?: ReadonlyArray<Duration.Input>; readonly type?: "quorum" | "classic" } = {}
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
    /** Publishes like the relay does (AmqpPublisher's encoding), with optional overrides. */
    const send = (type: string, version: number, payload: unknown, override: { readonly content?: Buffer; readonly options?: Options.Publish } = {}) =>
      Effect.sync(() => {
        const message: Message.Message = {
          id: crypto.randomUUID(),
          type,
          version,
          aggregateType: "order",
          aggregateId: `a-${n++}`,
          orderingKey: `a-${n}`,
          payload,
          headers: {},
          occurredAt: new Date()
        }
        const out = AmqpPublisher.toOutgoing(message, { exchange })
        raw.publish(exchange, out.routingKey, override.content ?? out.content, { ...out.options, ...override.options })
        return message.id
      })
    const start = <E>(
      config: Omit<AmqpConsumer.Config<any, E, never>, "name" | "queue" | "registry" | "handler"> & {
        readonly handler: (d: AmqpConsumer.Delivery<any>) => Effect.Effect<void, E>
      }
    ) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const name = unique("consumer").replaceAll(".", "-")
        const consumer = yield* AmqpConsumer.make({
          name,
          queue: cq,
          registry,
          timeout: "2 seconds",
          ...config,
          handler: (d) =>
            Effect.suspend(() => {
              handled.push({ attempt: d.attempt, event: d.event, at: Date.now(), delivery: d })
              return config.handler(d)
            })
        }).pipe(Scope.provide(scope), Effect.provideService(AmqpConnection.AmqpConnection, connection))
        yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
        const metric = (m: Metric.Counter<number>, extra: Record<string, string> = {}) =>
          Effect.map(Metric.value(Metric.withAttributes(m, { consumer: name, ...extra })), (s) => s.count)
        return { consumer, name, stop: Scope.close(scope, Exit.void), metric }
      })
    const dlq = () => drain(raw, cq.deadLetterQueue)
    return { exchange, cq, connection, raw, handled, send, start, dlq }
  })

const ok = () => Effect.void

describe("AmqpConsumer: the ack / retry / dead-letter table", () => {
  it.live("success -> ack: handled once, nothing left in the queue or the DLQ", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: ok })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the delivery")
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "5 seconds", "the ack")
      yield* c.stop // unacked deliveries would be back in the queue now
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
      assert.strictEqual((yield* t.dlq()).length, 0)
      const h = t.handled[0]!
      assert.strictEqual(h.attempt, 1)
      assert.deepStrictEqual(h.event, { type: "order.placed", version: 2, receivedVersion: 2, payload: v2("o1") })
      assert.strictEqual(h.delivery.aggregateType, "order")
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.consumed), 1)
    }).pipe(Effect.scoped))

  it.live("transient error -> delayed retry through the retry queue, then success", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: (d) => d.attempt === 1 ? Effect.fail(new Transient()) : Effect.void })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "the retried delivery")
      const [first, second] = t.handled
      assert.deepStrictEqual([first!.attempt, second!.attempt], [1, 2])
      assert.isAtLeast(second!.at - first!.at, 180, "waited for the retry queue's TTL")
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "5 seconds", "the ack")
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.retried, { mode: "delayed" }), 1)
      yield* c.stop
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
      assert.strictEqual((yield* t.dlq()).length, 0)
    }).pipe(Effect.scoped))

  it.live("transient error in requeue mode -> immediate redelivery (broker delivery count), then success", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ retry: "requeue", handler: (d) => d.attempt === 1 ? Effect.fail(new Transient()) : Effect.void })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "the requeued delivery")
      assert.deepStrictEqual(t.handled.map((h) => h.attempt), [1, 2])
      assert.isTrue(t.handled[1]!.delivery.redelivered)
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.retried, { mode: "requeue" }), (n) => n === 1), "5 seconds", "the requeue")
    }).pipe(Effect.scoped))

  it.live("permanent error (business rule) -> dead-letter queue, handled once", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: () => Effect.fail(new BusinessRule({ rule: "no negative totals" })) })
      const id = yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.deadLettered, { reason: "PermanentFailure" }), (n) => n === 1), "10 seconds", "the dead-letter")
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      const [dead] = yield* t.dlq()
      assert.strictEqual(dead!.properties.messageId, id)
      assert.strictEqual(t.handled.length, 1)
    }).pipe(Effect.scoped))

  it.live("a defect is caught, counted and retried as transient; the consumer keeps going", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: (d) => d.attempt === 1 ? Effect.die(new Error("bug!")) : Effect.void })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "the retry after the defect")
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "5 seconds", "the ack")
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.defects), 1)
      assert.isTrue(yield* c.consumer.isConsuming)
    }).pipe(Effect.scoped))

  it.live("a handler over the processing timeout is interrupted and retried", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      let interrupted = false
      const c = yield* t.start({
        timeout: "150 millis",
        handler: (d) => d.attempt === 1 ? Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => void (interrupted = true)))) : Effect.void
      })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "the retry after the timeout")
      assert.isTrue(interrupted)
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "5 seconds", "the ack")
    }).pipe(Effect.scoped))

  it.live("transient failures up to maxAttempts, then the dead-letter queue", () =>
    Effect.gen(function*() {
      const t = yield* setup({ retryDelays: ["50 millis"] })
      const c = yield* t.start({ maxAttempts: 3, handler: () => Effect.fail(new Transient()) })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      assert.deepStrictEqual(t.handled.map((h) => h.attempt), [1, 2, 3])
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.deadLettered, { reason: "TransientFailure" }), 1)
    }).pipe(Effect.scoped))

  it.live("delivered more often than maxAttempts -> dead-lettered without running the handler", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ maxAttempts: 5, handler: ok })
      yield* t.send("order.placed", 2, v2("o1"), { options: { headers: { [AmqpPublisher.HeaderNames.version]: 2, [AmqpPublisher.HeaderNames.attempt]: 7 } } })
      yield* t.send("order.placed", 2, v2("o2"))
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      yield* eventually(Effect.sync(() => t.handled.length === 1), "5 seconds", "the good message")
      assert.deepStrictEqual(t.handled.map((h) => (h.event.payload as { orderId: string }).orderId), ["o2"])
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.deadLettered, { reason: "DeliveryLimit" }), 1)
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
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the broker's dead-letter")
      assert.isAtMost(t.handled.length, 3)
      assert.isAtLeast(t.handled.length, 2)
    }).pipe(Effect.scoped))

  it.live("the table can be overridden: a business-rule failure acked instead of dead-lettered", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({
        handler: () => Effect.fail(new BusinessRule({ rule: "duplicate order" })),
        decide: (outcome) => outcome._tag === "Failure" && outcome.error instanceof BusinessRule ? "ack" : undefined
      })
      yield* t.send("order.placed", 2, v2("o1"))
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "10 seconds", "the ack")
      yield* c.stop
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
      assert.strictEqual(yield* messageCount(t.raw, t.cq.deadLetterQueue), 0)
    }).pipe(Effect.scoped))

  it("defaultDecision: every row of the table", () => {
    const ctx = { attempt: 1, maxAttempts: 3, unknownType: "ack" as const }
    const last = { ...ctx, attempt: 3 }
    const d = AmqpConsumer.defaultDecision
    assert.strictEqual(d({ _tag: "Success" }, ctx), "ack")
    assert.strictEqual(d({ _tag: "Failure", error: new Transient(), retryable: true }, ctx), "retry")
    assert.strictEqual(d({ _tag: "Failure", error: new Transient(), retryable: true }, last), "dead-letter")
    assert.strictEqual(d({ _tag: "Failure", error: new BusinessRule({ rule: "x" }), retryable: false }, ctx), "dead-letter")
    assert.strictEqual(d({ _tag: "Defect", defect: new Error("x") }, ctx), "retry")
    assert.strictEqual(d({ _tag: "Defect", defect: new Error("x") }, last), "dead-letter")
    assert.strictEqual(d({ _tag: "DecodeFailure", error: new DecodeError({ reason: "InvalidJson", message: "x" }) }, ctx), "dead-letter")
    assert.strictEqual(d({ _tag: "UnknownType", type: "x" }, ctx), "ack")
    assert.strictEqual(d({ _tag: "UnknownType", type: "x" }, { ...ctx, unknownType: "dead-letter" }), "dead-letter")
    assert.strictEqual(d({ _tag: "DeliveryLimit", attempt: 9 }, ctx), "dead-letter")
    assert.strictEqual(d({ _tag: "Shutdown" }, ctx), "requeue")
    assert.isTrue(AmqpConsumer.isRetryable(new Transient()))
    assert.isFalse(AmqpConsumer.isRetryable(new BusinessRule({ rule: "x" })))
    assert.isFalse(AmqpConsumer.isRetryable(new Error("plain")))
  })
})

describe("AmqpConsumer: decoding", () => {
  it.live("versioned decoding: v1 is upcast to v2, v2 passes, the handler sees the current shape", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      yield* t.start({ handler: ok })
      yield* t.send("order.placed", 1, { orderId: "old", totalCents: 250 })
      yield* t.send("order.placed", 2, v2("new"))
      yield* t.send("shipment.sent", 1, { shipmentId: "s1" })
      yield* eventually(Effect.sync(() => t.handled.length === 3), "10 seconds", "three events")
      const byId = new Map(t.handled.map((h) => [JSON.stringify(h.event.payload), h.event]))
      assert.deepStrictEqual(byId.get(JSON.stringify({ orderId: "old", total: { cents: 250, currency: "EUR" } })), {
        type: "order.placed",
        version: 2,
        receivedVersion: 1,
        payload: { orderId: "old", total: { cents: 250, currency: "EUR" } }
      })
      assert.deepStrictEqual(byId.get(JSON.stringify(v2("new")))?.receivedVersion, 2)
      assert.deepStrictEqual(byId.get(JSON.stringify({ shipmentId: "s1" }))?.type, "shipment.sent")
    }).pipe(Effect.scoped))

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
      assert.deepStrictEqual(t.handled[0]!.event, { type: "order.placed", version: 2, receivedVersion: 3, payload: v2("v3-compatible") })
      assert.isTrue(logs.lines.some((l) => l.includes("newer than the registered version")), "the best-effort decode is logged")
    }).pipe(Effect.scoped))

  it.live("an unknown type is acked and logged by default, or dead-lettered when configured", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const logs = captureLogs()
      const c = yield* t.start({ handler: ok }).pipe(Effect.provide(logs.layer))
      yield* t.send("invoice.issued", 1, { invoiceId: "i1" })
      yield* eventually(Effect.map(c.metric(AmqpConsumer.metrics.acked), (n) => n === 1), "10 seconds", "the ack")
      assert.strictEqual(t.handled.length, 0)
      assert.isTrue(logs.lines.some((l) => l.includes("unknown event type invoice.issued")))
      yield* c.stop
      assert.strictEqual(yield* messageCount(t.raw, t.cq.queue), 0)
      assert.strictEqual(yield* messageCount(t.raw, t.cq.deadLetterQueue), 0)

      const strict = yield* t.start({ handler: ok, unknownType: "dead-letter" })
      yield* t.send("invoice.issued", 1, { invoiceId: "i2" })
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 1), "10 seconds", "the DLQ")
      assert.strictEqual(yield* strict.metric(AmqpConsumer.metrics.deadLettered, { reason: "UnknownType" }), 1)
    }).pipe(Effect.scoped))

  it.live("malformed payloads (invalid JSON, wrong schema, huge body, no type) go to the DLQ and do not stop the consumer", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: ok, maxBodyBytes: 4096 })
      yield* t.send("order.placed", 2, null, { content: Buffer.from("{not json") })
      yield* t.send("order.placed", 2, { orderId: 42, total: "lots" })
      yield* t.send("order.placed", 2, { orderId: "x".repeat(10_000), total: { cents: 1, currency: "EUR" } })
      yield* t.send("order.placed", 2, v2("no-type"), { options: { type: "" } })
      yield* t.send("order.placed", 2, v2("good"))
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.deadLetterQueue), (n) => n === 4), "10 seconds", "four dead-letters")
      yield* eventually(Effect.sync(() => t.handled.length === 1), "5 seconds", "the good message")
      assert.strictEqual((t.handled[0]!.event.payload as { orderId: string }).orderId, "good")
      assert.isTrue(yield* c.consumer.isConsuming)
      assert.strictEqual(yield* c.metric(AmqpConsumer.metrics.deadLettered, { reason: "DecodeFailure" }), 4)
      const dead = yield* t.dlq()
      assert.strictEqual(dead.length, 4)
      assert.isTrue(dead.every((m) => m.properties.headers?.["x-first-death-reason"] === "rejected"))
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
      yield* eventually(Effect.sync(() => tracing.spans.some((s) => s.name === "tidings.consumer.handle" && s.status._tag === "Ended")), "10 seconds", "the span")
      const span = tracing.spans.find((s) => s.name === "tidings.consumer.handle")!
      assert.strictEqual(span.traceId, traceId)
      assert.strictEqual(span.parent?._tag === "Some" ? span.parent.value.spanId : undefined, parentId)
      assert.strictEqual(span.kind, "consumer")
      assert.strictEqual(span.attributes.get("tidings.consumer.outcome"), "Success")
      const inner = tracing.spans.find((s) => s.name === "inner")!
      assert.strictEqual(inner.traceId, traceId)
    }).pipe(Effect.scoped))

  it.live("graceful shutdown: the running handler finishes, deliveries that did not start are requeued", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      let finished = 0
      const c = yield* t.start({
        concurrency: 1,
        prefetch: 10,
        handler: () => Effect.sleep("400 millis").pipe(Effect.andThen(Effect.sync(() => void finished++)))
      })
      for (let i = 0; i < 4; i++) yield* t.send("order.placed", 2, v2(`o${i}`))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the first handler to start")
      yield* Effect.sleep("100 millis") // the other three are prefetched and waiting
      yield* c.stop
      assert.strictEqual(finished, 1, "the running handler completed")
      assert.strictEqual(t.handled.length, 1, "nothing else started")
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.queue), (n) => n === 3), "5 seconds", "3 requeued deliveries")
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
      yield* eventually(Effect.map(messageCount(t.raw, t.cq.queue), (n) => n === 1), "5 seconds", "the requeued delivery")
    }).pipe(Effect.scoped))

  it.live("after the connection drops, the consumer resubscribes with its prefetch by itself", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const c = yield* t.start({ handler: ok })
      yield* t.send("order.placed", 2, v2("before"))
      yield* eventually(Effect.sync(() => t.handled.length === 1), "10 seconds", "the first delivery")
      yield* t.connection.restart
      yield* eventually(Effect.map(t.connection.state, (s) => s._tag === "Connected" && s.generation === 2), "10 seconds", "the reconnect")
      yield* eventually(c.consumer.isConsuming, "10 seconds", "the resubscription")
      yield* t.send("order.placed", 2, v2("after"))
      yield* eventually(Effect.sync(() => t.handled.length === 2), "10 seconds", "a delivery after the reconnect")
      assert.strictEqual((t.handled[1]!.event.payload as { orderId: string }).orderId, "after")
    }).pipe(Effect.scoped))

  it.live("consumer config is validated: a bad prefetch is an AmqpConfigError", () =>
    Effect.gen(function*() {
      const t = yield* setup()
      const exit = yield* Effect.exit(t.start({ handler: ok, prefetch: 0 }))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(Exit.isFailure(exit) ? String(exit.cause) : "", "AmqpConfigError")
    }).pipe(Effect.scoped))
})

describe("EventRegistry", () => {
  it("rejects a type registered twice and upcasters that do not fit", () => {
    assert.throws(() => EventRegistry.make([ShipmentSent, ShipmentSent]), /registered twice/)
    assert.throws(() => EventRegistry.make([EventRegistry.entry(OrderPlaced, EventRegistry.upcast(ShipmentSent, () => v2("x")))]), /does not fit/)
  })

  it("decodes a current payload, upcasts an old one, and reports unknown types", () => {
    assert.deepStrictEqual(registry.decode("order.placed", 1, { orderId: "a", totalCents: 1 }), {
      _tag: "Decoded",
      event: { type: "order.placed", version: 2, receivedVersion: 1, payload: { orderId: "a", total: { cents: 1, currency: "EUR" } } }
    })
    assert.strictEqual(registry.decode("nope", 1, {})._tag, "UnknownType")
    const bad = registry.decode("order.placed", 1, { orderId: 1 })
    assert.strictEqual(bad._tag, "Invalid")
    assert.strictEqual(bad._tag === "Invalid" ? bad.error.reason : "", "SchemaMismatch")
  })
})

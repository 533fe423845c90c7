/**
 * The spans of the outbox, the relay and the consumers follow the OpenTelemetry messaging
 * conventions (names `<operation> <destination>`, `messaging.*` attributes, send linked to create),
 * form one trace from the caller through the broker to the handler, and an idle relay emits none.
 */
import { assert, describe, it } from "@effect/vitest"
import { eventually } from "@tidings/core/testing"
import { Effect, Exit, Layer, Option, Schema, Scope, Tracer } from "effect"
import { TestClock } from "effect/testing"
import * as Event from "../src/Event.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as Outbox from "../src/Outbox.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import * as Relay from "../src/Relay.ts"

const Placed = Event.define("order.placed", { aggregateType: "order", schema: Schema.Struct({ id: Schema.String }) })

/** A tracer that keeps every span it is asked to create (ended or not). */
const recording = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({ span: (options) => (spans.push(new Tracer.NativeSpan(options)), spans.at(-1)!) })
  return { spans, layer: Layer.succeed(Tracer.Tracer, tracer) }
}

const attrs = (span: Tracer.NativeSpan) => Object.fromEntries(span.attributes)
const parentId = (span: Tracer.NativeSpan) =>
  Option.match(span.parent, { onNone: () => undefined, onSome: (p) => p.spanId })

describe("messaging spans", () => {
  it.live("HTTP → create → send → process: one trace, the conventions' names and attributes, send linked to create", () => {
    const tracing = recording()
    return Effect.gen(function*() {
      const handled: Array<string> = []
      yield* MemoryBroker.consume({
        queue: "billing",
        types: ["order.placed"],
        handler: (delivery) =>
          Effect.sync(() => void handled.push(delivery.event.id)).pipe(Effect.withSpan("handler work"))
      })
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(Relay.layer({ dispatch: "poll", statsInterval: false, retention: false }), scope)
      const store = yield* OutboxStore.OutboxStore
      const [message, request] = yield* store.withTransaction(
        Effect.all([Outbox.append(Placed, { aggregateId: "o-1", payload: { id: "o-1" } }), Effect.currentSpan])
      ).pipe(
        Effect.withSpan("POST /orders", { kind: "server" })
      )
      yield* eventually(
        Effect.sync(() => tracing.spans.some((s) => s.name === "process billing" && s.status._tag === "Ended")),
        "10 seconds",
        "the process span"
      )
      yield* Scope.close(scope, Exit.void)

      const one = (name: string) => {
        const found = tracing.spans.filter((s) => s.name === name)
        assert.lengthOf(found, 1, `one ${name} span; spans: ${tracing.spans.map((s) => s.name).join(", ")}`)
        return found[0]!
      }
      const create = one("create order.placed")
      const send = one("send memory")
      const process = one("process billing")
      const receive = one("receive outbox")
      const settle = one("settle outbox")
      // One trace, parent to child.
      for (const span of [create, send, process]) assert.strictEqual(span.traceId, request.traceId)
      assert.strictEqual(parentId(create), request.spanId)
      assert.strictEqual(parentId(send), create.spanId)
      assert.strictEqual(parentId(process), send.spanId)
      assert.strictEqual(parentId(one("handler work")), process.spanId)
      // The send span links to the create span recorded in the row.
      assert.deepStrictEqual(send.links.map((l) => l.span.spanId), [create.spanId])
      assert.strictEqual(message.headers["traceparent"], `00-${create.traceId}-${create.spanId}-01`)
      // Kinds and attributes.
      assert.deepStrictEqual([create.kind, send.kind, process.kind, receive.kind, settle.kind], [
        "producer",
        "producer",
        "consumer",
        "client",
        "client"
      ])
      assert.deepInclude(attrs(create), {
        "messaging.system": "tidings-outbox",
        "messaging.operation.type": "create",
        "messaging.destination.name": "order.placed",
        "messaging.message.id": message.id
      })
      assert.deepInclude(attrs(send), {
        "messaging.system": "tidings-memory",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "memory",
        "messaging.message.id": message.id
      })
      assert.deepInclude(attrs(process), {
        "messaging.system": "tidings-memory",
        "messaging.operation.type": "process",
        "messaging.destination.name": "billing",
        "messaging.consumer.group.name": "billing",
        "messaging.message.id": message.id
      })
      assert.deepInclude(attrs(receive), {
        "messaging.operation.type": "receive",
        "messaging.operation.name": "claim",
        "messaging.batch.message_count": 1
      })
      assert.deepInclude(attrs(settle), { "messaging.operation.type": "settle", "messaging.system": "tidings-outbox" })
      assert.notProperty(attrs(send), "messaging.batch.message_count", "a single message has no batch count")
      assert.deepStrictEqual(handled, [message.id])
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer())),
      Effect.provide(tracing.layer)
    )
  })

  it.effect("an idle relay emits no span over many poll intervals (nor do its background loops); a claim that finds events does", () => {
    const tracing = recording()
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      // Four pollers polling every 100 ms to 2 s, the lease reclaimer every 250 ms, stats every second.
      yield* Layer.buildWithScope(
        Relay.layer({
          concurrency: 4,
          dispatch: "poll",
          lease: "1 second",
          statsInterval: "1 second",
          retention: { interval: "1 second" }
        }),
        scope
      )
      for (let i = 0; i < 60; i++) yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(tracing.spans.map((s) => s.name), [], "30 s idle: no span")

      const store = yield* OutboxStore.OutboxStore
      yield* store.withTransaction(Outbox.append(Placed, { aggregateId: "o-2", payload: { id: "o-2" } }))
      const broker = yield* MemoryBroker.MemoryBroker
      while ((yield* broker.delivered).length === 0) yield* TestClock.adjust("100 millis")
      yield* Scope.close(scope, Exit.void)
      const names = tracing.spans.map((s) => s.name)
      assert.includeMembers(names, ["create order.placed", "receive outbox", "send memory", "settle outbox"])
      assert.strictEqual(names.filter((n) => n === "receive outbox").length, 1, "only the claim that found the event")
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer())),
      Effect.provide(tracing.layer)
    )
  })

  it.live("a batch: one send span per event, each in its own trace, carrying the batch size", () => {
    const tracing = recording()
    return Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      yield* Effect.forEach(
        ["a", "b", "c"],
        (id) =>
          store.withTransaction(Outbox.append(Placed, { aggregateId: id, payload: { id } })).pipe(
            Effect.withSpan(`request ${id}`)
          )
      )
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(Relay.layer({ dispatch: "poll", statsInterval: false, retention: false }), scope)
      const broker = yield* MemoryBroker.MemoryBroker
      yield* eventually(Effect.map(broker.delivered, (d) => d.length === 3), "10 seconds", "three deliveries")
      yield* Scope.close(scope, Exit.void)
      const sends = tracing.spans.filter((s) => s.name === "send memory")
      assert.lengthOf(sends, 3)
      const requests = tracing.spans.filter((s) => s.name.startsWith("request "))
      assert.sameMembers(sends.map((s) => s.traceId), requests.map((r) => r.traceId))
      for (const send of sends) assert.strictEqual(attrs(send)["messaging.batch.message_count"], 3)
      const receive = tracing.spans.find((s) => s.name === "receive outbox")!
      assert.strictEqual(attrs(receive)["messaging.batch.message_count"], 3)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer())),
      Effect.provide(tracing.layer)
    )
  })

  it.live("without a tracing backend (Effect's nativeTracer) the relays make no send spans: messages keep their append's traceparent", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(Relay.layer({ dispatch: "poll", statsInterval: false, retention: false }), scope)
      const store = yield* OutboxStore.OutboxStore
      const appended = yield* store.withTransaction(
        Outbox.append(Placed, { aggregateId: "o-1", payload: { id: "o-1" } })
      )
      const broker = yield* MemoryBroker.MemoryBroker
      yield* eventually(Effect.map(broker.delivered, (d) => d.length === 1), "10 seconds", "the publish")
      yield* Scope.close(scope, Exit.void)
      const [delivered] = yield* broker.delivered
      const traceparent = appended.headers["traceparent"]
      assert.isString(traceparent, "the append records its create span")
      assert.strictEqual(delivered!.message.headers["traceparent"], traceparent, "published as appended: no send span")
    }).pipe(Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer()))))
})

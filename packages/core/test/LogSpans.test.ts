/**
 * Log mode's spans follow the per-row relay's conventions: an idle group emits none (lease
 * heartbeats and empty reads run untraced), a read that took events is `receive log`, each event
 * published is `send <destination>` (a child of its append's span), the cursor move is `settle log`;
 * `LogConsumer` handles each event in a `process log` span, a child of the append's.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Schema, Scope, Tracer } from "effect"
import { TestClock } from "effect/testing"
import * as Event from "../src/Event.ts"
import * as LogConsumer from "../src/LogConsumer.ts"
import * as LogRelay from "../src/LogRelay.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryLogStore from "../src/MemoryLogStore.ts"
import * as Outbox from "../src/Outbox.ts"
import * as OutboxStore from "../src/OutboxStore.ts"

const Placed = Event.define("order.placed", { aggregateType: "order", schema: Schema.Struct({ id: Schema.String }) })

/** A tracer that keeps every span it is asked to create (ended or not). */
const recording = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({ span: (options) => (spans.push(new Tracer.NativeSpan(options)), spans.at(-1)!) })
  return { spans, layer: Layer.succeed(Tracer.Tracer, tracer) }
}

describe("log spans", () => {
  it.effect("an idle log relay emits no span over many heartbeats; a round that acquires leases and a read that finds events do", () => {
    const tracing = recording()
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(
        LogRelay.layer({
          concurrency: 2,
          lease: "3 seconds",
          pollInterval: { base: "100 millis", max: "1 second" },
          statsInterval: false,
          retention: false
        }),
        scope
      )
      // The first rounds acquire the partitions: traced.
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("100 millis")
      const leases = tracing.spans.filter((s) => s.name === "tidings.log.lease")
      assert.isAbove(leases.length, 0, "the round that acquired the partitions is traced")
      assert.deepStrictEqual(
        tracing.spans.map((s) => s.name).filter((n) => n !== "tidings.log.lease"),
        [],
        "no read span while the log is empty"
      )
      const before = tracing.spans.length
      // 30 s idle: ten heartbeats and many empty reads.
      for (let i = 0; i < 60; i++) yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(tracing.spans.slice(before).map((s) => s.name), [], "30 s idle: no span")

      const store = yield* OutboxStore.OutboxStore
      yield* store.withTransaction(Outbox.append(Placed, { aggregateId: "o-1", payload: { id: "o-1" } }))
      const broker = yield* MemoryBroker.MemoryBroker
      while ((yield* broker.delivered).length === 0) yield* TestClock.adjust("100 millis")
      for (let i = 0; i < 5; i++) yield* TestClock.adjust("100 millis")
      yield* Scope.close(scope, Exit.void)
      const names = tracing.spans.slice(before).map((s) => s.name)
      assert.includeMembers(names, ["create order.placed", "receive log", "send memory", "settle log"])
      assert.strictEqual(names.filter((n) => n === "receive log").length, 1, "only the read that found the event")
      const receive = tracing.spans.find((s) => s.name === "receive log")!
      const attributes = Object.fromEntries(receive.attributes)
      assert.strictEqual(attributes["messaging.operation.type"], "receive")
      assert.strictEqual(attributes["messaging.consumer.group.name"], "relay")
      const create = tracing.spans.find((s) => s.name === "create order.placed")!
      const send = tracing.spans.find((s) => s.name === "send memory")!
      assert.strictEqual(send.traceId, create.traceId, "send continues the append's trace")
      assert.strictEqual(send.kind, "producer")
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryLogStore.layer({ partitions: 4 }), MemoryBroker.layer())),
      Effect.provide(tracing.layer)
    )
  })

  it.effect("LogConsumer: one `process log` span per event, a child of its append's span, and a `settle log` per batch", () => {
    const tracing = recording()
    const handled: Array<string> = []
    return Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      yield* store.withTransaction(Effect.gen(function*() {
        yield* Outbox.append(Placed, { aggregateId: "o-1", payload: { id: "o-1" } })
        yield* Outbox.append(Placed, { aggregateId: "o-1", payload: { id: "o-2" } })
      }))
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(
        LogConsumer.layer({
          group: "billing",
          lease: "3 seconds",
          pollInterval: { base: "100 millis", max: "1 second" },
          handler: (d) => Effect.sync(() => void handled.push((d.payload as { readonly id: string }).id))
        }),
        scope
      )
      while (handled.length < 2) yield* TestClock.adjust("100 millis")
      for (let i = 0; i < 5; i++) yield* TestClock.adjust("100 millis")
      yield* Scope.close(scope, Exit.void)
      const creates = tracing.spans.filter((s) => s.name === "create order.placed")
      const processes = tracing.spans.filter((s) => s.name === "process log")
      assert.strictEqual(processes.length, 2)
      assert.isFalse(tracing.spans.some((s) => s.name === "tidings.consumer.handle"))
      for (const span of processes) {
        const attributes = Object.fromEntries(span.attributes)
        assert.strictEqual(span.kind, "consumer")
        assert.strictEqual(attributes["messaging.operation.type"], "process")
        assert.strictEqual(attributes["messaging.system"], "tidings-log")
        assert.strictEqual(attributes["messaging.consumer.group.name"], "billing")
        assert.strictEqual(attributes["tidings.consumer.attempt"], 1)
        const parent = Option.getOrUndefined(span.parent)
        assert.isDefined(parent)
        assert.include(creates.map((c) => c.spanId), parent!.spanId, "a child of the append's span")
        assert.strictEqual(span.traceId, creates.find((c) => c.spanId === parent!.spanId)!.traceId)
        assert.strictEqual(span.links.length, 1)
      }
      const settles = tracing.spans.filter((s) => s.name === "settle log")
      assert.isAbove(settles.length, 0)
      assert.strictEqual(Object.fromEntries(settles[0]!.attributes)["messaging.consumer.group.name"], "billing")
    }).pipe(
      Effect.provide(MemoryLogStore.layer({ partitions: 4 })),
      Effect.provide(tracing.layer)
    )
  })
})

/**
 * The in-memory broker's queue consumer: bindings by event type, redelivery after a delay up to the
 * delivery limit, dead letters (at once for a non-retryable error), timeouts, defects, concurrency,
 * invalid settings, and exactly-once effects through the inbox.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Metric, Option, Schema } from "effect"
import * as Errors from "../src/Errors.ts"
import * as Event from "../src/Event.ts"
import * as Inbox from "../src/Inbox.ts"
import * as InboxStore from "../src/InboxStore.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import type { Message } from "../src/Message.ts"
import * as Outbox from "../src/Outbox.ts"
import * as Publisher from "../src/Publisher.ts"

const OrderPlaced = Event.define("order.placed", { aggregateType: "order", schema: Schema.Struct({ n: Schema.Int }) })
const OrderShipped = Event.define("order.shipped", { aggregateType: "order", schema: Schema.Struct({ n: Schema.Int }) })
const PaymentCharged = Event.define("payment.card.charged", { aggregateType: "payment", schema: Schema.Struct({ n: Schema.Int }) })

const message = (type: Event.EventType<string, any>, n: number): Effect.Effect<Message> =>
  Effect.orDie(Outbox.encode(type.make({ aggregateId: `a-${n}`, payload: { n } }), Date.now(), Option.none()))

/** Publishes through the broker's Publisher, as the relay does. */
const publish = (...messages: ReadonlyArray<Message>) =>
  Publisher.Publisher.use((p) => p.publish(messages)).pipe(Effect.orDie)

/** Polls (bounded) until `check` holds. */
const eventually = <A>(read: Effect.Effect<A>, check: (a: A) => boolean, timeoutMs = 3000): Effect.Effect<A> =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (true) {
      const value = yield* read
      if (check(value)) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(value)}`))
      yield* Effect.sleep("5 millis")
    }
  })

class Flaky extends Schema.TaggedError<Flaky>()("Flaky", { n: Schema.Int }) {
  get isRetryable(): boolean {
    return true
  }
}
// Says nothing about retrying: permanent, as on RabbitMQ (a business rule would fail again).
class Unmarked extends Schema.TaggedError<Unmarked>()("Unmarked", { why: Schema.String }) {}
class Rejected extends Schema.TaggedError<Rejected>()("Rejected", { why: Schema.String }) {
  get isRetryable(): boolean {
    return false
  }
}

const counterValue = (metric: Metric.Counter<number>, attributes: Record<string, string>) =>
  Effect.map(Metric.value(Metric.withAttributes(metric, attributes)), (s) => s.count)

const fast = { retryDelays: ["10 millis", "20 millis"] } as const

describe("MemoryBroker.consume", () => {
  it.live("delivers the bound event types only, as RabbitMQ topic patterns, with the message id and attempt 1", () =>
    Effect.scoped(Effect.gen(function*() {
      const seen: Array<MemoryBroker.ConsumerDelivery> = []
      const seenAll: Array<string> = []
      yield* MemoryBroker.consume({ queue: "orders", types: ["order.placed", "payment.*.charged"], handler: (d) => Effect.sync(() => void seen.push(d)) })
      yield* MemoryBroker.consume({ queue: "everything", types: ["#"], handler: (d) => Effect.sync(() => void seenAll.push(d.message.type)) })
      const placed = yield* message(OrderPlaced, 1)
      const shipped = yield* message(OrderShipped, 2)
      const charged = yield* message(PaymentCharged, 3)
      yield* publish(placed, shipped, charged)
      yield* eventually(Effect.sync(() => seenAll.length), (n) => n === 3)
      yield* eventually(Effect.sync(() => seen.length), (n) => n === 2)
      assert.deepStrictEqual(seen.map((d) => d.message.type), ["order.placed", "payment.card.charged"])
      assert.strictEqual(seen[0]!.messageId, placed.id)
      assert.strictEqual(seen[0]!.attempt, 1)
      assert.isFalse(seen[0]!.redelivered)
      assert.strictEqual(seen[0]!.queue, "orders")
      assert.deepStrictEqual(seenAll, ["order.placed", "order.shipped", "payment.card.charged"])
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it("matches topic patterns like a RabbitMQ topic exchange", () => {
    assert.isTrue(MemoryBroker.matches("order.placed", "order.placed"))
    assert.isFalse(MemoryBroker.matches("order.placed", "order.placed.v2"))
    assert.isTrue(MemoryBroker.matches("order.*", "order.paid"))
    assert.isFalse(MemoryBroker.matches("order.*", "order.paid.late"))
    assert.isTrue(MemoryBroker.matches("order.#", "order"))
    assert.isTrue(MemoryBroker.matches("order.#", "order.paid.late"))
    assert.isTrue(MemoryBroker.matches("#.late", "order.paid.late"))
    assert.isFalse(MemoryBroker.matches("#.late", "order.paid"))
    assert.isTrue(MemoryBroker.matches("#", "anything.at.all"))
  })

  it.live("redelivers a failed message after the retry delay, and the next attempt succeeds", () =>
    Effect.scoped(Effect.gen(function*() {
      const attempts: Array<{ readonly attempt: number; readonly at: number }> = []
      const consumer = yield* MemoryBroker.consume({
        queue: "flaky-once",
        types: ["order.placed"],
        retryDelays: ["80 millis"],
        handler: (d) =>
          Effect.suspend(() => {
            attempts.push({ attempt: d.attempt, at: Date.now() })
            return d.attempt === 1 ? Effect.fail(new Flaky({ n: 1 })) : Effect.void
          })
      })
      const retriedBefore = yield* counterValue(MemoryBroker.consumerMetrics.retried, { consumer: "flaky-once", mode: "delayed" })
      yield* publish(yield* message(OrderPlaced, 1))
      yield* eventually(Effect.sync(() => attempts.length), (n) => n === 2)
      assert.deepStrictEqual(attempts.map((a) => a.attempt), [1, 2])
      assert.isAtLeast(attempts[1]!.at - attempts[0]!.at, 70, "the redelivery waited for the retry delay")
      assert.deepStrictEqual(yield* consumer.deadLetters, [])
      assert.strictEqual(yield* counterValue(MemoryBroker.consumerMetrics.retried, { consumer: "flaky-once", mode: "delayed" }), retriedBefore + 1)
      yield* eventually(consumer.pending, (n) => n === 0)
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("dead-letters a message whose every delivery fails once the delivery limit is reached", () =>
    Effect.scoped(Effect.gen(function*() {
      const broker = yield* MemoryBroker.MemoryBroker
      let calls = 0
      const consumer = yield* MemoryBroker.consume({
        queue: "always-failing",
        types: ["order.placed"],
        maxAttempts: 3,
        ...fast,
        handler: () => Effect.suspend(() => (calls++, Effect.fail(new Flaky({ n: calls }))))
      })
      const m = yield* message(OrderPlaced, 7)
      yield* publish(m)
      const [letter] = yield* eventually(consumer.deadLetters, (xs) => xs.length === 1)
      assert.strictEqual(calls, 3)
      assert.strictEqual(letter!.message.id, m.id)
      assert.strictEqual(letter!.attempts, 3)
      assert.strictEqual(letter!.reason, "TransientFailure")
      assert.strictEqual(letter!.queue, "always-failing")
      assert.match(letter!.error, /^Flaky/)
      assert.deepStrictEqual((yield* broker.deadLetters).map((l) => l.message.id), [m.id])
      yield* Effect.sleep("60 millis")
      assert.strictEqual(calls, 3, "nothing is delivered after the dead letter")
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("dead-letters at once on an error marked non-retryable", () =>
    Effect.scoped(Effect.gen(function*() {
      let calls = 0
      const consumer = yield* MemoryBroker.consume({
        queue: "permanent",
        types: ["order.placed"],
        ...fast,
        handler: (d) => Effect.suspend(() => (calls++, Effect.fail(d.message.aggregateId === "a-1" ? new Rejected({ why: "bad order" }) : new Unmarked({ why: "no stock" }))))
      })
      const before = yield* counterValue(MemoryBroker.consumerMetrics.deadLettered, { consumer: "permanent", reason: "PermanentFailure" })
      yield* publish(yield* message(OrderPlaced, 1))
      yield* publish(yield* message(OrderPlaced, 2))
      const letters = yield* eventually(consumer.deadLetters, (xs) => xs.length === 2)
      assert.deepStrictEqual(letters.map((l) => [l.reason, l.attempts, l.error]), [
        ["PermanentFailure", 1, `Rejected {"why":"bad order"}`],
        ["PermanentFailure", 1, `Unmarked {"why":"no stock"}`]
      ])
      yield* Effect.sleep("50 millis")
      assert.strictEqual(calls, 2)
      assert.strictEqual(yield* counterValue(MemoryBroker.consumerMetrics.deadLettered, { consumer: "permanent", reason: "PermanentFailure" }), before + 2)
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("treats defects and timeouts as transient", () =>
    Effect.scoped(Effect.gen(function*() {
      const defects: Array<number> = []
      const slow: Array<number> = []
      const defective = yield* MemoryBroker.consume({
        queue: "defective",
        types: ["order.placed"],
        ...fast,
        handler: (d) => {
          defects.push(d.attempt)
          // the first delivery dies, the second throws before returning an Effect, the third succeeds
          if (d.attempt === 1) return Effect.die(new Error("boom"))
          if (d.attempt === 2) throw new Error("thrown")
          return Effect.void
        }
      })
      const hanging = yield* MemoryBroker.consume({
        queue: "hanging",
        types: ["order.placed"],
        maxAttempts: 2,
        timeout: "30 millis",
        ...fast,
        handler: (d) => Effect.suspend(() => (slow.push(d.attempt), Effect.never))
      })
      yield* publish(yield* message(OrderPlaced, 1))
      const [letter] = yield* eventually(hanging.deadLetters, (xs) => xs.length === 1)
      assert.strictEqual(letter!.reason, "Timeout")
      assert.deepStrictEqual(slow, [1, 2])
      yield* eventually(Effect.sync(() => defects.length), (n) => n === 3)
      assert.deepStrictEqual(defects, [1, 2, 3])
      assert.deepStrictEqual(yield* defective.deadLetters, [])
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("runs up to `concurrency` handlers at once", () =>
    Effect.scoped(Effect.gen(function*() {
      let running = 0
      let peak = 0
      const done: Array<number> = []
      const consumer = yield* MemoryBroker.consume({
        queue: "parallel",
        types: ["order.placed"],
        concurrency: 2,
        handler: (d) =>
          Effect.sync(() => (running++, peak = Math.max(peak, running))).pipe(
            Effect.andThen(Effect.sleep("40 millis")),
            Effect.andThen(Effect.sync(() => (running--, done.push((d.message.payload as { n: number }).n))))
          )
      })
      yield* publish(yield* message(OrderPlaced, 1), yield* message(OrderPlaced, 2), yield* message(OrderPlaced, 3), yield* message(OrderPlaced, 4))
      yield* eventually(consumer.inFlight, (n) => n === 2)
      yield* eventually(Effect.sync(() => done.length), (n) => n === 4)
      assert.strictEqual(peak, 2)
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("with Inbox.wrap, a message delivered twice has its effect once", () =>
    Effect.scoped(Effect.gen(function*() {
      let effects = 0
      const handled: Array<string> = []
      yield* MemoryBroker.consume({
        queue: "once",
        types: ["order.placed"],
        handler: (d) =>
          Inbox.wrap("once", () => Effect.sync(() => void effects++))(d).pipe(Effect.ensuring(Effect.sync(() => void handled.push(d.messageId))))
      })
      const m = yield* message(OrderPlaced, 1)
      yield* publish(m)
      yield* publish(m) // at-least-once: the broker delivers a copy
      yield* eventually(Effect.sync(() => handled.length), (n) => n === 2)
      assert.strictEqual(effects, 1)
    })).pipe(Effect.provide(Layer.mergeAll(MemoryBroker.layer(), InboxStore.layerMemory))))

  it.effect("refuses invalid settings with a typed InvalidConfig naming the setting", () =>
    Effect.scoped(Effect.gen(function*() {
      const attempt = (config: Partial<MemoryBroker.ConsumerConfig<never, never>>) =>
        Effect.flip(MemoryBroker.consume({ queue: "q", types: ["#"], handler: () => Effect.void, ...config }))
      const cases: Array<[Partial<MemoryBroker.ConsumerConfig<never, never>>, string]> = [
        [{ queue: "" }, "queue"],
        [{ queue: "has space" }, "queue"],
        [{ types: [] }, "types"],
        [{ types: ["order.pla#ced"] }, "types"],
        [{ types: ["order..placed"] }, "types"],
        [{ concurrency: 0 }, "concurrency"],
        [{ maxAttempts: 1.5 }, "maxAttempts"],
        [{ retryDelays: [] }, "retryDelays"],
        [{ retryDelays: ["1 second", 0] }, "retryDelays[1]"],
        [{ timeout: "-1 seconds" as never }, "timeout"]
      ]
      for (const [config, path] of cases) {
        const error = yield* attempt(config)
        assert.instanceOf(error, Errors.InvalidConfig)
        assert.strictEqual(error.path, path, JSON.stringify(config))
      }
      // and valid settings start a consumer
      const exit = yield* Effect.exit(MemoryBroker.consume({ queue: "ok", types: ["order.*"], handler: () => Effect.void }))
      assert.isTrue(Exit.isSuccess(exit))
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.live("consumerLayer runs the consumer while the layer lives", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const ConsumerLive = MemoryBroker.consumerLayer({ queue: "layered", types: ["order.placed"], handler: (d) => Effect.sync(() => void seen.push(d.messageId)) })
      const m = yield* message(OrderPlaced, 1)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(ConsumerLive)
        yield* publish(m)
        yield* eventually(Effect.sync(() => seen.length), (n) => n === 1)
      }))
      yield* publish(yield* message(OrderPlaced, 2))
      yield* Effect.sleep("30 millis")
      assert.deepStrictEqual(seen, [m.id], "nothing is consumed after the layer is released")
    }).pipe(Effect.provide(MemoryBroker.layer())))
})

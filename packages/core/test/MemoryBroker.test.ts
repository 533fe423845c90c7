/**
 * The in-memory broker's queue consumer, on `TestClock`: the consumer contract (core's decision
 * table), plus what is particular to memory: bindings by topic pattern, dead letters kept per queue,
 * concurrency, invalid settings, the layer's lifetime, and exactly-once effects through the inbox.
 */
import { assert, describe, it } from "@effect/vitest"
import { consumerContract } from "@tidings/core/testing"
import { Deferred, Effect, Exit, Layer, Option, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as Errors from "../src/Errors.ts"
import * as Event from "../src/Event.ts"
import * as Inbox from "../src/Inbox.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryInboxStore from "../src/MemoryInboxStore.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import type { Message } from "../src/Message.ts"
import * as Outbox from "../src/Outbox.ts"
import * as Publisher from "../src/Publisher.ts"

const OrderPlaced = Event.define("order.placed", { aggregateType: "order", schema: Schema.Struct({ n: Schema.Int }) })
const OrderShipped = Event.define("order.shipped", { aggregateType: "order", schema: Schema.Struct({ n: Schema.Int }) })
const PaymentCharged = Event.define("payment.card.charged", {
  aggregateType: "payment",
  schema: Schema.Struct({ n: Schema.Int })
})

const message = (type: Event.EventType<string, any>, n: number): Effect.Effect<Message> =>
  Effect.orDie(Outbox.encode(type.make({ aggregateId: `a-${n}`, payload: { n } }), Date.now(), Option.none()))

/** Publishes through the broker's Publisher, as the relay does. */
const publish = (...messages: ReadonlyArray<Message>) =>
  Publisher.Publisher.use((p) => p.publish(messages)).pipe(Effect.orDie)

/** Advances the test clock in 1 ms steps until `read` satisfies `check` (bounded: 10 s of test time). */
const eventually = <A>(read: Effect.Effect<A>, check: (a: A) => boolean): Effect.Effect<A> =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000; i++) {
      const value = yield* read
      if (check(value)) return value
      yield* TestClock.adjust("1 millis")
    }
    return yield* Effect.die(new Error(`condition not met; last value: ${JSON.stringify(yield* read)}`))
  })

let queues = 0

consumerContract("MemoryBroker.consume", {
  clock: "test",
  start: (options) =>
    Effect.gen(function*() {
      const layer = yield* Layer.build(MemoryBroker.layer())
      const name = `contract-${++queues}`
      const consumer = yield* MemoryBroker.consume({
        queue: name,
        types: ["#"],
        registry: options.registry,
        handler: options.handler,
        maxAttempts: options.maxAttempts,
        timeout: options.timeout,
        retryDelays: ["200 millis"],
        unavailableDelay: options.unavailableDelay,
        ...(options.unknownType === undefined ? {} : { unknownType: options.unknownType }),
        ...(options.decide === undefined ? {} : { decide: options.decide })
      }).pipe(Effect.provideContext(layer))
      return {
        name,
        publish: (m: Message) => publish(m).pipe(Effect.asVoid, Effect.provideContext(layer)),
        deadLetters: Effect.map(consumer.deadLetters, (xs) => xs.map((l) => ({ messageId: l.message.id }))),
        retryDelay: "200 millis"
      }
    })
})

describe("MemoryBroker.consume", () => {
  it.effect("delivers the bound event types only, as RabbitMQ topic patterns, with the message id and attempt 1", () =>
    Effect.scoped(Effect.gen(function*() {
      const seen: Array<MemoryBroker.ConsumerDelivery> = []
      const seenAll: Array<string> = []
      yield* MemoryBroker.consume({
        queue: "orders",
        types: ["order.placed", "payment.*.charged"],
        handler: (d) => Effect.sync(() => void seen.push(d))
      })
      yield* MemoryBroker.consume({
        queue: "everything",
        types: ["#"],
        handler: (d) => Effect.sync(() => void seenAll.push(d.type))
      })
      const placed = yield* message(OrderPlaced, 1)
      const shipped = yield* message(OrderShipped, 2)
      const charged = yield* message(PaymentCharged, 3)
      yield* publish(placed, shipped, charged)
      yield* eventually(Effect.sync(() => seenAll.length), (n) => n === 3)
      yield* eventually(Effect.sync(() => seen.length), (n) => n === 2)
      assert.deepStrictEqual(seen.map((d) => d.event.type), ["order.placed", "payment.card.charged"])
      assert.strictEqual(seen[0]!.messageId, placed.id)
      assert.strictEqual(seen[0]!.event, placed, "without a registry the event is the message")
      assert.deepStrictEqual(seen[0]!.payload, { n: 1 })
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

  it.effect("dead letters are kept per queue and on the broker, with the reason and the error's text", () =>
    Effect.scoped(Effect.gen(function*() {
      const broker = yield* MemoryBroker.MemoryBroker
      class Rejected extends Schema.TaggedError<Rejected>()("Rejected", { why: Schema.String }) {}
      const consumer = yield* MemoryBroker.consume({
        queue: "permanent",
        types: ["order.placed"],
        handler: () => Effect.fail(new Rejected({ why: "bad order" }))
      })
      const m = yield* message(OrderPlaced, 1)
      yield* publish(m)
      const [letter] = yield* eventually(consumer.deadLetters, (xs) => xs.length === 1)
      assert.deepStrictEqual([letter!.reason, letter!.attempts, letter!.error, letter!.queue], [
        "PermanentFailure",
        1,
        `Rejected {"why":"bad order"}`,
        "permanent"
      ])
      assert.deepStrictEqual((yield* broker.deadLetters).map((l) => l.message.id), [m.id])
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("a redelivery waits for its delay on the clock: nothing before, the retry at the delay", () =>
    Effect.scoped(Effect.gen(function*() {
      const attempts: Array<number> = []
      const consumer = yield* MemoryBroker.consume({
        queue: "delayed",
        types: ["order.placed"],
        retryDelays: ["1 minute"],
        handler: (d) =>
          Effect.suspend(() => (attempts.push(d.attempt),
            d.attempt === 1
              ? Effect.fail(new Errors.PublishError({ message: "x", reason: new Errors.Timeout() }))
              : Effect.void)
          )
      })
      yield* publish(yield* message(OrderPlaced, 1))
      yield* eventually(consumer.pending, (n) => n === 1)
      assert.deepStrictEqual(attempts, [1])
      yield* TestClock.adjust("59 seconds")
      assert.deepStrictEqual(attempts, [1], "still waiting")
      yield* TestClock.adjust("1 second")
      yield* eventually(Effect.sync(() => attempts.length), (n) => n === 2)
      yield* eventually(consumer.pending, (n) => n === 0)
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("runs up to `concurrency` handlers at once", () =>
    Effect.scoped(Effect.gen(function*() {
      let running = 0
      let peak = 0
      const done: Array<number> = []
      const release = yield* Deferred.make<void>()
      const consumer = yield* MemoryBroker.consume({
        queue: "parallel",
        types: ["order.placed"],
        concurrency: 2,
        handler: (d) =>
          Effect.sync(() => (running++, peak = Math.max(peak, running))).pipe(
            Effect.andThen(Deferred.await(release)),
            Effect.andThen(Effect.sync(() => (running--, done.push((d.payload as { n: number }).n))))
          )
      })
      yield* publish(
        yield* message(OrderPlaced, 1),
        yield* message(OrderPlaced, 2),
        yield* message(OrderPlaced, 3),
        yield* message(OrderPlaced, 4)
      )
      yield* eventually(consumer.inFlight, (n) => n === 2)
      yield* eventually(consumer.pending, (n) => n === 2) // two wait for a free worker
      assert.strictEqual(yield* consumer.inFlight, 2)
      yield* Deferred.succeed(release, undefined)
      yield* eventually(Effect.sync(() => done.length), (n) => n === 4)
      assert.strictEqual(peak, 2)
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("with Inbox.wrap, a message delivered twice has its effect once", () =>
    Effect.scoped(Effect.gen(function*() {
      let effects = 0
      const handled: Array<string | undefined> = []
      yield* MemoryBroker.consume({
        queue: "once",
        types: ["order.placed"],
        handler: (d) =>
          Inbox.wrap("once", () => Effect.sync(() => void effects++))(d).pipe(
            Effect.ensuring(Effect.sync(() => void handled.push(d.messageId)))
          )
      })
      const m = yield* message(OrderPlaced, 1)
      yield* publish(m)
      yield* publish(m) // at-least-once: the broker delivers a copy
      yield* eventually(Effect.sync(() => handled.length), (n) => n === 2)
      assert.strictEqual(effects, 1)
    })).pipe(Effect.provide(Layer.mergeAll(MemoryBroker.layer(), MemoryInboxStore.layer, MemoryOutboxStore.layer))))

  it.effect("while a handler finds its database unavailable, the consumer pauses: other deliveries wait, none is counted", () =>
    Effect.scoped(Effect.gen(function*() {
      let down = true
      const handled: Array<[number, number]> = []
      const consumer = yield* MemoryBroker.consume({
        queue: "paused",
        types: ["order.placed"],
        concurrency: 2,
        maxAttempts: 1,
        unavailableDelay: "1 second",
        unavailableMaxDelay: "4 seconds",
        handler: (d) =>
          Effect.suspend(() => {
            const n = (d.payload as { n: number }).n
            if (down) {
              return Effect.fail(
                new Errors.StoreError({
                  operation: "write",
                  message: "connection refused",
                  reason: new Errors.Unavailable()
                })
              )
            }
            handled.push([n, d.attempt])
            return Effect.void
          })
      })
      yield* publish(yield* message(OrderPlaced, 1))
      yield* eventually(consumer.paused, (p) => p)
      yield* publish(yield* message(OrderPlaced, 2), yield* message(OrderPlaced, 3))
      // A minute of outage: the held delivery is retried with a capped backoff; the others do not start.
      yield* TestClock.adjust("1 minute")
      assert.isTrue(yield* consumer.paused)
      assert.strictEqual(yield* consumer.inFlight, 1)
      down = false
      yield* eventually(Effect.sync(() => handled.length), (n) => n === 3)
      assert.deepStrictEqual(handled.map(([, attempt]) => attempt), [1, 1, 1])
      assert.isFalse(yield* consumer.paused)
      assert.deepStrictEqual(yield* consumer.deadLetters, [])
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("refuses invalid settings with one typed InvalidConfig naming every wrong setting", () =>
    Effect.scoped(Effect.gen(function*() {
      const attempt = (config: Partial<Omit<MemoryBroker.ConsumerConfig<Message, never, never>, "registry">>) =>
        Effect.flip(MemoryBroker.consume({ queue: "q", types: ["#"], handler: () => Effect.void, ...config }))
      const cases: Array<[Partial<Omit<MemoryBroker.ConsumerConfig<Message, never, never>, "registry">>, string]> = [
        [{ queue: "" }, "queue"],
        [{ queue: "has space" }, "queue"],
        [{ types: [] }, "types"],
        [{ types: ["order.pla#ced"] }, "types.0"],
        [{ types: ["order..placed"] }, "types.0"],
        [{ concurrency: 0 }, "concurrency"],
        [{ maxAttempts: 1.5 }, "maxAttempts"],
        [{ retryDelays: [] }, "retryDelays"],
        [{ retryDelays: ["1 second", 0] }, "retryDelays.1"],
        [{ timeout: "-1 seconds" as never }, "timeout"],
        [{ unknownType: "drop" as never }, "unknownType"]
      ]
      for (const [config, path] of cases) {
        const error = yield* attempt(config)
        assert.instanceOf(error, Errors.InvalidConfig)
        assert.strictEqual(error.path, path, JSON.stringify(config))
      }
      const both = yield* attempt({ concurrency: 0, maxAttempts: 0 })
      assert.deepStrictEqual(both.issues?.map((i) => i.path), ["concurrency", "maxAttempts"])
      // and valid settings start a consumer
      const exit = yield* Effect.exit(
        MemoryBroker.consume({ queue: "ok", types: ["order.*"], handler: () => Effect.void })
      )
      assert.isTrue(Exit.isSuccess(exit))
    })).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("consumerLayer runs the consumer while the layer lives", () =>
    Effect.gen(function*() {
      const seen: Array<string | undefined> = []
      const ConsumerLive = MemoryBroker.consumerLayer({
        queue: "layered",
        types: ["order.placed"],
        handler: (d) => Effect.sync(() => void seen.push(d.messageId))
      })
      const m = yield* message(OrderPlaced, 1)
      const broker = yield* MemoryBroker.MemoryBroker
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(ConsumerLive)
        yield* publish(m)
        yield* eventually(Effect.sync(() => seen.length), (n) => n === 1)
      }))
      // Published after the release: the broker has it, the released consumer never sees it.
      const later = yield* message(OrderPlaced, 2)
      yield* publish(later)
      yield* eventually(Effect.map(broker.delivered, (ds) => ds.length), (n) => n === 2)
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(seen, [m.id], "nothing is consumed after the layer is released")
    }).pipe(Effect.provide(MemoryBroker.layer())))
})

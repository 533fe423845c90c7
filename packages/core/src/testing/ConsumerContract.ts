/**
 * The contract every consumer transport passes: the decision table of core's `Consumer` (ack,
 * delayed retry, dead-letter after `maxAttempts`, permanent failures, unknown types, decode
 * failures, the delivery limit, overrides) and the unavailability hold, observed through the
 * handler's deliveries, the shared consumer metrics and the transport's dead letters. Run by
 * `MemoryBroker.consume` (on `TestClock`) and `@tidings/rabbitmq`'s `AmqpConsumer` (a real broker).
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Data, Duration, Effect, Metric, Schema, type Scope } from "effect"
import { TestClock } from "effect/testing"
import type * as Consumer from "../Consumer.ts"
import * as Errors from "../Errors.ts"
import * as Event from "../Event.ts"
import * as EventRegistry from "../EventRegistry.ts"
import { uuidv7 } from "../internal/uuid.ts"
import type { Message } from "../Message.ts"
import * as Metrics from "../Metrics.ts"

// The contract's event types: `contract.ordered` (v2, upcast from v1) and `contract.noted`.
const OrderedV1 = Event.define("contract.ordered", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, cents: Schema.Int })
})
const Ordered = Event.define("contract.ordered", {
  aggregateType: "order",
  version: 2,
  schema: Schema.Struct({
    orderId: Schema.String,
    total: Schema.Struct({ cents: Schema.Int, currency: Schema.String })
  })
})
const Noted = Event.define("contract.noted", { aggregateType: "note", schema: Schema.Struct({ text: Schema.String }) })

const registry = EventRegistry.make([
  EventRegistry.entry(
    Ordered,
    EventRegistry.upcast(OrderedV1, (v1) => ({ orderId: v1.orderId, total: { cents: v1.cents, currency: "EUR" } }))
  ),
  Noted
])

/**
 * What the contract asks a transport to start.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerStartOptions<E> {
  /** The registry to decode with. */
  readonly registry: EventRegistry.EventRegistry<EventRegistry.Decoded>
  readonly handler: (delivery: Consumer.Delivery<EventRegistry.Decoded>) => Effect.Effect<void, E>
  readonly maxAttempts: number
  readonly timeout: Duration.Input
  readonly unknownType?: Consumer.Decision
  readonly decide?: Consumer.Decide<E>
  /** First pause of the unavailability hold. */
  readonly unavailableDelay: Duration.Input
}

/**
 * A consumer the harness started, with a queue of its own.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerStarted {
  /** The `consumer` attribute of its metrics. */
  readonly name: string
  /** Publishes a message as the relay would (its `version` as the version header). */
  readonly publish: (message: Message) => Effect.Effect<void>
  /** Messages dead-lettered from its queue so far. */
  readonly deadLetters: Effect.Effect<ReadonlyArray<{ readonly messageId: string | undefined }>>
  /** The delay of a first delayed retry. */
  readonly retryDelay: Duration.Input
}

/**
 * A transport under test.
 * @since 0.1.0
 * @category models
 */
export interface ConsumerHarness {
  /** `test`: the consumer sleeps on `TestClock` (the contract advances it); `live`: real time. */
  readonly clock: "test" | "live"
  readonly start: <E>(options: ConsumerStartOptions<E>) => Effect.Effect<ConsumerStarted, unknown, Scope.Scope>
}

class Transient extends Data.TaggedError("Transient")<{}> {
  get isRetryable() {
    return true
  }
}
class BusinessRule extends Data.TaggedError("BusinessRule")<{ readonly rule: string }> {}

let n = 0
const message = (type: string, version: number, payload: unknown): Message => ({
  id: uuidv7(Date.now()),
  type,
  version,
  aggregateType: "order",
  aggregateId: `agg-${++n}`,
  orderingKey: `agg-${n}`,
  payload,
  headers: {},
  occurredAt: new Date()
})
const ordered = (orderId: string) => message(Ordered.type, 2, { orderId, total: { cents: 100, currency: "EUR" } })

/**
 * Waits until `check` holds: on `TestClock` by advancing it in 10 ms steps, on the real clock by
 * polling; bounded either way.
 */
const until = <E, R>(
  clock: "test" | "live",
  check: Effect.Effect<boolean, E, R>,
  what: string,
  limit: Duration.Input = "20 seconds"
) =>
  Effect.gen(function*() {
    const steps = Math.ceil(Duration.toMillis(Duration.fromInputUnsafe(limit)) / 10)
    for (let i = 0; i < steps; i++) {
      if (yield* check) return
      yield* clock === "test" ? TestClock.adjust("10 millis") : Effect.sleep("10 millis")
    }
    if (!(yield* check)) return yield* Effect.die(new Error(`timed out waiting for ${what}`))
  })

const counter = (name: string, metric: Metric.Counter<number>, extra: Record<string, string> = {}) =>
  Effect.map(Metric.value(Metric.withAttributes(metric, { consumer: name, ...extra })), (s) => s.count)

/**
 * Registers the contract's tests for a transport.
 * @since 0.1.0
 * @category contracts
 */
export const consumerContract = (name: string, harness: ConsumerHarness): void => {
  const test = harness.clock === "test" ? it.effect : it.live
  const wait = (check: () => boolean, what: string) => until(harness.clock, Effect.sync(check), what)
  /** Waits until a consumer metric reaches `value`. */
  const waitCount = (
    name: string,
    metric: Metric.Counter<number>,
    extra: Record<string, string>,
    value: number,
    what: string
  ) => until(harness.clock, Effect.map(counter(name, metric, extra), (n) => n === value), what)
  const m = Metrics.consumer
  const base = { maxAttempts: 3, timeout: "5 seconds", unavailableDelay: "20 millis" } as const

  /** Waits until the transport holds `n` dead letters (a broker dead-letters asynchronously), then returns their ids. */
  const deadIds = (c: ConsumerStarted, n: number) =>
    Effect.gen(function*() {
      let ids: Array<string | undefined> = []
      yield* until(
        harness.clock,
        Effect.map(c.deadLetters, (ls) => (ids = ls.map((l) => l.messageId)).length >= n),
        `${n} dead letters`
      )
      return ids
    })
  /** A consumer recording what its handler saw, with `behave` deciding per delivery. */
  const record = <E>(
    behave: (d: Consumer.Delivery<EventRegistry.Decoded>) => Effect.Effect<void, E>,
    options: Partial<ConsumerStartOptions<E>> = {}
  ) =>
    Effect.gen(function*() {
      const seen: Array<{ readonly delivery: Consumer.Delivery<EventRegistry.Decoded>; readonly at: number }> = []
      const started = yield* harness.start<E>({
        ...base,
        registry: registry as EventRegistry.EventRegistry<EventRegistry.Decoded>,
        ...options,
        handler: (d) => Effect.flatMap(Clock.currentTimeMillis, (at) => (seen.push({ delivery: d, at }), behave(d)))
      })
      return { ...started, seen }
    })

  describe(`Consumer contract: ${name}`, () => {
    test("success -> ack: the handler sees the decoded event and the message's fields, once", () =>
      Effect.gen(function*() {
        const c = yield* record(() => Effect.void)
        const sent = ordered("o1")
        yield* c.publish(sent)
        yield* wait(() => c.seen.length === 1, "the delivery")
        yield* waitCount(c.name, m.acked, {}, 1, "the ack")
        const d = c.seen[0]!.delivery
        assert.deepStrictEqual(d.event, { type: Ordered.type, version: 2, receivedVersion: 2, payload: sent.payload })
        assert.deepStrictEqual([d.messageId, d.id, d.type, d.version, d.attempt, d.redelivered], [
          sent.id,
          sent.id,
          Ordered.type,
          2,
          1,
          false
        ])
        assert.deepStrictEqual(d.payload, sent.payload)
        assert.deepStrictEqual([d.aggregateType, d.aggregateId, d.orderingKey], [
          sent.aggregateType,
          sent.aggregateId,
          sent.orderingKey
        ])
        assert.strictEqual(yield* counter(c.name, m.consumed), 1)
        assert.deepStrictEqual(yield* c.deadLetters, [])
      }))

    test("an older version is upcast to the current shape", () =>
      Effect.gen(function*() {
        const c = yield* record(() => Effect.void)
        yield* c.publish(message(Ordered.type, 1, { orderId: "old", cents: 250 }))
        yield* wait(() => c.seen.length === 1, "the delivery")
        assert.deepStrictEqual(c.seen[0]!.delivery.event, {
          type: Ordered.type,
          version: 2,
          receivedVersion: 1,
          payload: { orderId: "old", total: { cents: 250, currency: "EUR" } }
        })
      }))

    test("transient failure -> delayed retry, then success", () =>
      Effect.gen(function*() {
        const c = yield* record((d) => d.attempt === 1 ? Effect.fail(new Transient()) : Effect.void)
        yield* c.publish(ordered("o1"))
        yield* wait(() => c.seen.length === 2, "the retried delivery")
        yield* waitCount(c.name, m.acked, {}, 1, "the ack")
        const [first, second] = c.seen
        assert.deepStrictEqual([first!.delivery.attempt, second!.delivery.attempt], [1, 2])
        assert.isTrue(second!.delivery.redelivered)
        const delay = Duration.toMillis(Duration.fromInputUnsafe(c.retryDelay))
        assert.isAtLeast(second!.at - first!.at, delay * 0.9, "the redelivery waited for the retry delay")
        assert.strictEqual(yield* counter(c.name, m.retried, { mode: "delayed" }), 1)
        assert.deepStrictEqual(yield* c.deadLetters, [])
      }))

    test("transient failures up to maxAttempts -> dead-lettered (TransientFailure); defects and timeouts are transient", () =>
      Effect.gen(function*() {
        const c = yield* record(
          (d) =>
            d.attempt === 1
              ? Effect.fail(new Transient())
              : d.attempt === 2
              ? Effect.die(new Error("bug"))
              : Effect.never,
          { timeout: "200 millis" }
        )
        const sent = ordered("o1")
        yield* c.publish(sent)
        yield* waitCount(c.name, m.deadLettered, { reason: "Timeout" }, 1, "the dead letter")
        assert.deepStrictEqual(c.seen.map((s) => s.delivery.attempt), [1, 2, 3])
        assert.strictEqual(yield* counter(c.name, m.defects), 1)
        assert.deepStrictEqual(yield* deadIds(c, 1), [sent.id])
      }))

    test("permanent failure -> dead-lettered at once (PermanentFailure); an override can ack it instead", () =>
      Effect.gen(function*() {
        const c = yield* record(() => Effect.fail(new BusinessRule({ rule: "no" })))
        const sent = ordered("o1")
        yield* c.publish(sent)
        yield* waitCount(c.name, m.deadLettered, { reason: "PermanentFailure" }, 1, "the dead letter")
        assert.strictEqual(c.seen.length, 1)
        assert.deepStrictEqual(yield* deadIds(c, 1), [sent.id])

        const o = yield* record(() => Effect.fail(new BusinessRule({ rule: "duplicate order" })), {
          decide: (outcome) => outcome._tag === "Failure" && outcome.error instanceof BusinessRule ? "ack" : undefined
        })
        yield* o.publish(ordered("o2"))
        yield* waitCount(o.name, m.acked, {}, 1, "the overridden ack")
        assert.deepStrictEqual(yield* o.deadLetters, [])
      }))

    test("unknown type -> ack without running the handler (default), or dead-letter when configured", () =>
      Effect.gen(function*() {
        const c = yield* record(() => Effect.void)
        yield* c.publish(message("contract.unknown", 1, {}))
        yield* waitCount(c.name, m.acked, {}, 1, "the ack")
        assert.strictEqual(c.seen.length, 0)

        const strict = yield* record(() => Effect.void, { unknownType: "dead-letter" })
        const sent = message("contract.unknown", 1, {})
        yield* strict.publish(sent)
        yield* waitCount(strict.name, m.deadLettered, { reason: "UnknownType" }, 1, "the dead letter")
        assert.deepStrictEqual(yield* deadIds(strict, 1), [sent.id])
        assert.strictEqual(strict.seen.length, 0)
      }))

    test("decode failure (schema mismatch, version 0) -> dead-lettered without running the handler", () =>
      Effect.gen(function*() {
        const c = yield* record(() => Effect.void)
        const mismatch = message(Ordered.type, 2, { orderId: 42 })
        const version0 = message(Noted.type, 0, { text: "x" })
        yield* c.publish(mismatch)
        yield* c.publish(version0)
        yield* c.publish(message(Noted.type, 1, { text: "fine" }))
        yield* waitCount(c.name, m.deadLettered, { reason: "DecodeFailure" }, 2, "two dead letters")
        yield* wait(() => c.seen.length === 1, "the good message")
        assert.deepStrictEqual((yield* deadIds(c, 2)).sort(), [mismatch.id, version0.id].sort())
        assert.deepStrictEqual(c.seen[0]!.delivery.payload, { text: "fine" })
      }))

    test("delivered more than maxAttempts times -> dead-lettered (DeliveryLimit) without running the handler", () =>
      Effect.gen(function*() {
        // Never give up ourselves: only the delivery limit stops it.
        const c = yield* record(() => Effect.fail(new Transient()), {
          decide: (outcome) => outcome._tag === "Failure" ? "retry" : undefined
        })
        const sent = ordered("o1")
        yield* c.publish(sent)
        yield* waitCount(c.name, m.deadLettered, { reason: "DeliveryLimit" }, 1, "the dead letter")
        assert.deepStrictEqual(c.seen.map((s) => s.delivery.attempt), [1, 2, 3])
        assert.deepStrictEqual(yield* deadIds(c, 1), [sent.id])
      }))

    test("a dependency that is unavailable is no message failure: the delivery is held and run again, no attempt counted", () =>
      Effect.gen(function*() {
        const down = new Errors.StoreError({
          operation: "test",
          message: "database down",
          reason: new Errors.Unavailable()
        })
        let failures = 0
        const c = yield* record(() => failures < 3 ? Effect.fail((failures++, down)) : Effect.void, { maxAttempts: 1 })
        yield* c.publish(ordered("o1"))
        yield* waitCount(c.name, m.acked, {}, 1, "the ack")
        assert.deepStrictEqual(
          c.seen.map((s) => s.delivery.attempt),
          [1, 1, 1, 1],
          "the same delivery, its attempt not counted"
        )
        assert.strictEqual(yield* counter(c.name, m.unavailable), 3)
        assert.strictEqual(yield* counter(c.name, m.retried, { mode: "delayed" }), 0)
        assert.strictEqual(yield* counter(c.name, m.retried, { mode: "requeue" }), 0)
        assert.deepStrictEqual(yield* c.deadLetters, [])
      }))
  })
}

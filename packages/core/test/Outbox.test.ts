import { assert, describe, it } from "@effect/vitest"
import { failureTag, startRelay, testTime } from "@tidings/core/testing"
import { Cause, Duration, Effect, Exit, Layer, Metric, Option, Schedule, Schema, Tracer } from "effect"
import { type InvalidConfig, type InvalidEvent, PublishError, Refused } from "../src/Errors.ts"
import * as Event from "../src/Event.ts"
import { uuidv7, uuidv7Time } from "../src/internal/uuid.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as Metrics from "../src/Metrics.ts"
import * as Outbox from "../src/Outbox.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import * as Publisher from "../src/Publisher.ts"
import * as Relay from "../src/Relay.ts"
import * as Retry from "../src/Retry.ts"

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  version: 2,
  schema: Schema.Struct({
    orderId: Schema.String.check(Schema.isMinLength(1)),
    totalCents: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
    placedAt: Schema.DateFromString
  })
})

const Loose = Event.define("loose", { aggregateType: "x", schema: Schema.Unknown })

const firstError = <E>(exit: Exit.Exit<unknown, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  return Option.getOrThrow(Cause.findErrorOption(exit.cause))
}

const withStore = <A, E>(body: Effect.Effect<A, E, OutboxStore.OutboxStore>) =>
  Effect.provide(body, MemoryOutboxStore.layer)

describe("Outbox.append", () => {
  it.effect("encodes the payload with its schema and fills the envelope", () =>
    withStore(Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const message = yield* store.withTransaction(Outbox.append(OrderPlaced, {
        aggregateId: "o-1",
        payload: { orderId: "o-1", totalCents: 1250, placedAt: new Date("2026-01-02T03:04:05.000Z") }
      }))
      assert.strictEqual(message.type, "order.placed")
      assert.strictEqual(message.version, 2)
      assert.strictEqual(message.aggregateType, "order")
      assert.strictEqual(message.orderingKey, "o-1")
      assert.deepStrictEqual(message.payload, {
        orderId: "o-1",
        totalCents: 1250,
        placedAt: "2026-01-02T03:04:05.000Z"
      })
      assert.match(message.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      assert.strictEqual((yield* store.stats).pending, 1)
    })))

  it.effect("a payload that fails its schema is a typed error with the issue path, and nothing of the batch is written", () =>
    withStore(Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const exit = yield* Effect.exit(store.withTransaction(Outbox.appendAll([
        OrderPlaced.make({ aggregateId: "o-1", payload: { orderId: "o-1", totalCents: 1, placedAt: new Date() } }),
        OrderPlaced.make({ aggregateId: "o-2", payload: { orderId: "o-2", totalCents: -5, placedAt: new Date() } })
      ])))
      const error = firstError(exit) as InvalidEvent
      assert.strictEqual(error._tag, "InvalidEvent")
      assert.strictEqual(error.eventType, "order.placed")
      assert.strictEqual(error.version, 2)
      assert.isFalse(error.isRetryable)
      assert.deepStrictEqual(error.issues.map((i) => i.path), [["totalCents"]])
      assert.strictEqual((yield* store.stats).pending, 0)
    })))

  it.effect("payloads that are not JSON, and bad envelopes, are typed errors too", () =>
    withStore(Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const cyclic: Record<string, unknown> = {}
      cyclic["self"] = cyclic
      const cases = [
        Loose.make({ aggregateId: "a", payload: { big: 10n } }),
        Loose.make({ aggregateId: "a", payload: cyclic }),
        Loose.make({ aggregateId: "a", payload: undefined }),
        Loose.make({ aggregateId: "", payload: 1 }),
        Loose.make({ aggregateId: "a", orderingKey: "", payload: 1 })
      ]
      for (const draft of cases) {
        const exit = yield* Effect.exit(store.withTransaction(Outbox.appendAll([draft])))
        assert.strictEqual(failureTag(exit), "InvalidEvent")
      }
      assert.strictEqual((yield* store.stats).pending, 0)
    })))

  it.effect("records the current span as a W3C traceparent header", () =>
    withStore(Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const [message, span] = yield* store.withTransaction(
        Effect.all([Outbox.append(Loose, { aggregateId: "a", payload: 1 }), Effect.currentSpan])
      ).pipe(Effect.withSpan("http.request"))
      // the header names the append's own span, a child of the caller's
      assert.match(message.headers["traceparent"]!, new RegExp(`^00-${span.traceId}-[0-9a-f]{16}-01$`))
      assert.notStrictEqual(message.headers["traceparent"], `00-${span.traceId}-${span.spanId}-01`)
    })))

  it.effect("the relay's publish span continues the append's trace", () => {
    const spans: Array<Tracer.Span> = []
    const tracer = Tracer.make({ span: (options) => (spans.push(new Tracer.NativeSpan(options)), spans.at(-1)!) })
    return Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const [message, appendSpan] = yield* store.withTransaction(
        Effect.all([Outbox.append(Loose, { aggregateId: "a", payload: 1 }), Effect.currentSpan])
      ).pipe(
        Effect.withSpan("http.request")
      )
      const { stop } = yield* startRelay({ statsInterval: false, retention: false })
      yield* testTime.eventually(
        Effect.sync(() => spans.some((s) => s.name === "send memory" && s.status._tag === "Ended")),
        "5 seconds"
      )
      yield* testTime.run(stop)
      const publish = spans.find((s) => s.name === "send memory")!
      assert.strictEqual(publish.traceId, appendSpan.traceId)
      assert.strictEqual(
        `00-${publish.traceId}-${Option.getOrThrow(publish.parent).spanId}-01`,
        message.headers["traceparent"]
      )
      assert.strictEqual(publish.kind, "producer")
      // what the broker got names the publish span as parent, for the consumer to continue
      const [delivered] = yield* MemoryBroker.MemoryBroker.use((b) => b.delivered)
      assert.strictEqual(delivered!.message.headers["traceparent"], `00-${publish.traceId}-${publish.spanId}-01`)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer())),
      Effect.provideService(Tracer.Tracer, tracer)
    )
  })
})

describe("Relay metrics", () => {
  it.effect("counters, the latency histogram and the pending gauge follow what the relay does", () =>
    Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const before = {
        published: (yield* Metric.value(Metrics.published)).count,
        latency: (yield* Metric.value(Metrics.publishLatency)).count,
        wakeups: (yield* Metric.value(Metric.withAttributes(Metrics.wakeups, { source: "local" }))).count
      }
      // events appended while no relay runs: the stats loop reports them as pending
      yield* store.withTransaction(
        Outbox.appendAll(Array.from({ length: 7 }, (_, i) => Loose.make({ aggregateId: `a${i}`, payload: i })))
      )
      yield* MemoryBroker.MemoryBroker.use((b) =>
        b.setFault(() => new PublishError({ message: "paused", reason: new Refused({ retryable: true }) }))
      )
      // the broker refuses everything for now: the events wait as pending between retries
      const relay = yield* startRelay({
        // wake-ups are counted: events appended while an eager relay runs need none
        dispatch: "poll",
        retention: false,
        statsInterval: "30 millis",
        retry: Schedule.spaced("300 millis"),
        pollInterval: { base: "10 millis", max: "20 millis" }
      })
      yield* testTime.eventually(
        Effect.map(Metric.value(Metrics.outboxPending), (g) => g.value === 7),
        "3 seconds",
        "pending gauge = 7"
      )
      yield* MemoryBroker.MemoryBroker.use((b) => b.setFault(undefined))
      yield* store.withTransaction(Outbox.append(Loose, { aggregateId: "late", payload: 1 }))
      yield* testTime.eventually(
        Effect.map(Metric.value(Metrics.outboxPending), (g) => g.value === 0),
        "5 seconds",
        "pending gauge = 0"
      )
      yield* testTime.run(relay.stop)
      const after = {
        published: (yield* Metric.value(Metrics.published)).count,
        latency: (yield* Metric.value(Metrics.publishLatency)).count,
        wakeups: (yield* Metric.value(Metric.withAttributes(Metrics.wakeups, { source: "local" }))).count
      }
      assert.strictEqual(after.published - before.published, 8)
      assert.strictEqual(after.latency - before.latency, 8)
      assert.isAtLeast(after.wakeups - before.wakeups, 2, "one wake-up per committed append transaction")
    }).pipe(Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer()))))
})

describe("Relay settings", () => {
  const invalid = (config: Relay.Config) =>
    Effect.map(Effect.exit(Relay.settings(config)), (exit) => firstError(exit) as InvalidConfig)

  it.effect("defaults are valid", () =>
    Effect.gen(function*() {
      const s = yield* Relay.settings()
      assert.strictEqual(s.batchSize, 100)
      assert.strictEqual(s.claimConcurrency, 1)
      assert.isFalse(s.coalesceClaims, "one poller has nobody to share a claim with")
      assert.isTrue((yield* Relay.settings({ concurrency: 2 })).coalesceClaims)
      assert.strictEqual((yield* Relay.settings({ concurrency: 16 })).claimConcurrency, 4)
      // merged claims: about 40 rows a statement, at least two statements
      assert.strictEqual((yield* Relay.settings({ concurrency: 8, batchSize: 10 })).claimConcurrency, 2)
      assert.strictEqual((yield* Relay.settings({ concurrency: 16, batchSize: 10 })).claimConcurrency, 4)
      assert.strictEqual((yield* Relay.settings({ concurrency: 8, batchSize: 1 })).claimConcurrency, 2)
      // one claim per poller: as many statements as pollers for small batches
      assert.strictEqual(
        (yield* Relay.settings({ concurrency: 16, batchSize: 10, coalesceClaims: false })).claimConcurrency,
        16
      )
      assert.strictEqual(
        (yield* Relay.settings({ concurrency: 16, batchSize: 25, coalesceClaims: false })).claimConcurrency,
        8
      )
      // per-key claims per poller (each walks the keys from its own position)
      const perKey = yield* Relay.settings({ ordering: "per-key", concurrency: 16, batchSize: 10 })
      assert.isFalse(perKey.coalesceClaims)
      assert.strictEqual(perKey.claimConcurrency, 16)
      assert.isTrue(Duration.isLessThan(s.publishTimeout, s.lease))
      assert.strictEqual(s.dispatch, "eager")
      assert.strictEqual(s.eagerLimit, 100)
      assert.strictEqual((yield* Relay.settings({ concurrency: 4, batchSize: 50 })).eagerLimit, 200)
      assert.strictEqual(s.backpressure, false)
      // per-key order needs every event to go through the claim's check
      assert.strictEqual((yield* Relay.settings({ ordering: "per-key" })).dispatch, "poll")
      assert.strictEqual((yield* Relay.settings({ dispatch: "poll" })).dispatch, "poll")
    }))

  it.effect("bad settings are typed InvalidConfig errors naming the setting", () =>
    Effect.gen(function*() {
      const cases: Array<[Relay.Config, string]> = [
        [{ batchSize: 0 }, "batchSize"],
        [{ batchSize: 1.5 }, "batchSize"],
        [{ concurrency: -1 }, "concurrency"],
        [{ maxAttempts: 0 }, "maxAttempts"],
        [{ lease: "-1 seconds" as Duration.Input }, "lease"],
        [{ lease: Duration.infinity }, "lease"],
        [{ pollInterval: { min: "2 seconds", base: "1 second" } }, "pollInterval"],
        [{ lease: "1 second", publishTimeout: "5 seconds" }, "publishTimeout"],
        [{ name: "has spaces" }, "name"],
        [{ retention: { batchSize: 0 } }, "retention.batchSize"],
        [{ claimConcurrency: 0 }, "claimConcurrency"],
        [{ coalesceClaims: "yes" as unknown as boolean }, "coalesceClaims"],
        [{ dispatch: "immediate" as "eager" }, "dispatch"],
        [{ eagerLimit: 0 }, "eagerLimit"],
        [{ backpressure: "-1 seconds" as Duration.Input }, "backpressure"]
      ]
      for (const [config, path] of cases) {
        const error = yield* invalid(config)
        assert.strictEqual(error._tag, "InvalidConfig")
        assert.strictEqual(error.path, path, JSON.stringify(config))
      }
    }))

  it.effect("a relay layer with bad settings fails to build and starts nothing", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(
        Layer.build(Relay.layer({ batchSize: 0 })).pipe(
          Effect.scoped,
          Effect.provide(Layer.mergeAll(MemoryOutboxStore.layer, MemoryBroker.layer()))
        )
      )
      assert.strictEqual(failureTag(exit), "InvalidConfig")
    }))
})

describe("Relay claim concurrency", () => {
  it.effect("at most claimConcurrency claims run at once, while all pollers publish", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryOutboxStore.make
      let running = 0
      let most = 0
      let publishing = 0
      let mostPublishing = 0
      // Each claim takes a moment, so that pollers queue for a permit if they can.
      const counted = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.acquireUseRelease(
          Effect.sync(() => (most = Math.max(most, ++running))),
          () => Effect.andThen(Effect.sleep("3 millis"), effect),
          () => Effect.sync(() => void running--)
        )
      const store = OutboxStore.OutboxStore.of({
        ...inner,
        claim: (o) => counted(inner.claim(o)),
        settleAndClaim: (r, s, o) => counted(inner.settleAndClaim(r, s, o))
      })
      yield* Effect.gen(function*() {
        const broker = yield* MemoryBroker.MemoryBroker
        yield* inner.withTransaction(
          Outbox.appendAll(Array.from({ length: 200 }, (_, i) => Loose.make({ aggregateId: `a-${i}`, payload: i })))
        )
        const publisher = yield* Effect.service(Publisher.Publisher)
        const slow = Publisher.Publisher.of({
          publish: (ms) =>
            Effect.acquireUseRelease(
              Effect.sync(() => (mostPublishing = Math.max(mostPublishing, ++publishing))),
              () => Effect.andThen(Effect.sleep("15 millis"), publisher.publish(ms)),
              () => Effect.sync(() => void publishing--)
            )
        })
        const { stop } = yield* startRelay({
          concurrency: 6,
          claimConcurrency: 2,
          batchSize: 10,
          statsInterval: false,
          retention: false
        }).pipe(
          Effect.provideService(Publisher.Publisher, slow)
        )
        yield* testTime.eventually(
          Effect.map(broker.delivered, (d) => d.length === 200),
          "10 seconds",
          "all events published"
        )
        yield* testTime.run(stop)
      }).pipe(Effect.provideService(OutboxStore.OutboxStore, store), Effect.provide(MemoryBroker.layer()))
      assert.strictEqual(most, 2)
      assert.isAbove(mostPublishing, 2)
    }))
})

describe("Retry", () => {
  it.effect("delayFor follows the schedule and ends when it is exhausted", () =>
    Effect.gen(function*() {
      const schedule = Retry.exponentialBackoff({ base: "1 second", max: "10 seconds", jitter: false }).pipe(
        Schedule.upTo({ times: 5 })
      )
      const delays: Array<string> = []
      for (const n of [1, 2, 3, 4, 5, 6]) {
        const d = yield* Retry.delayFor(schedule, n, undefined)
        delays.push(Option.match(d, { onNone: () => "none", onSome: (x) => `${Duration.toMillis(x)}` }))
      }
      assert.deepStrictEqual(delays, ["1000", "2000", "4000", "8000", "10000", "none"])
    }))

  it.effect("jittered delays stay within 80-120% of the base", () =>
    Effect.gen(function*() {
      for (let i = 0; i < 20; i++) {
        const d = Option.getOrThrow(yield* Retry.delayFor(Retry.exponentialBackoff({ base: "1 second" }), 1, undefined))
        assert.isAtLeast(Duration.toMillis(d), 800)
        assert.isAtMost(Duration.toMillis(d), 1200)
      }
    }))
})

describe("UUIDv7", () => {
  it("ids are version 7, carry their timestamp, and sort by creation", () => {
    const now = Date.now() + 86_400_000 // ahead of ids made earlier in this process
    const ids = Array.from({ length: 5000 }, (_, i) => uuidv7(now + Math.floor(i / 1000)))
    assert.deepStrictEqual([...ids].sort(), ids)
    assert.strictEqual(new Set(ids).size, ids.length)
    assert.strictEqual(uuidv7Time(ids[0]!), now)
    for (const id of ids.slice(0, 50)) {
      assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    }
  })
})

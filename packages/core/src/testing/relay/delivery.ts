/**
 * Relay contract, delivery: every committed event once, nothing rolled back, wake-ups, backoff,
 * the dead-letter state and per-key order.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Clock, Duration, Effect, Layer, Metric, Schedule, Semaphore } from "effect"
import { PublishError, Refused } from "../../Errors.ts"
import * as MemoryBroker from "../../MemoryBroker.ts"
import * as Metrics from "../../Metrics.ts"
import * as Outbox from "../../Outbox.ts"
import { OutboxStore } from "../../OutboxStore.ts"
import { Publisher } from "../../Publisher.ts"
import { assertDeliveredOnce, deliveredIds, seed, Thing } from "../helpers.ts"
import { idle, quiet, spyStore, type Suite } from "./suite.ts"

/**
 * Registers the delivery part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const deliveryTests = ({ run, start, test, time }: Suite) => {
  test("4 pollers publish 2,000 events exactly once", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids: Array<string> = []
      for (let i = 0; i < 4; i++) ids.push(...(yield* seed(500, i * 500)))
      const { stop } = yield* start({ ...quiet, concurrency: 4, batchSize: 50 })
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.length >= 2000), "30 seconds", "2,000 deliveries")
      yield* stop
      yield* assertDeliveredOnce(ids)
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [2000, 0, 0])
    })))

  test("an idle relay is woken by a committed append, long before its poll interval", () =>
    run(Effect.gen(function*() {
      const { relay, stop } = yield* start({
        ...quiet,
        dispatch: "poll",
        pollInterval: { base: "5 seconds", max: "5 seconds" }
      })
      yield* idle(time, relay)
      const claims = (yield* relay.status).claims
      const started = yield* time.now
      yield* seed(1)
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 1), "3 seconds", "the woken relay")
      const elapsed = (yield* time.now) - started
      yield* stop
      assert.isBelow(elapsed, 1000, `woke after ${elapsed} ms; the poll interval is 5 s`)
      assert.isAbove((yield* relay.status).claims, claims, "it claimed again after the wake-up")
    })))

  test("a rolled-back transaction publishes nothing", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const { relay, stop } = yield* start(quiet)
      yield* Effect.exit(store.withTransaction(Effect.andThen(
        Outbox.append(Thing, { aggregateId: "x", payload: { n: 1, label: "rolled back" } }),
        Effect.fail("abort")
      )))
      const [kept] = yield* seed(1)
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 1), "5 seconds", "the committed event")
      // The relay has settled and looked again: nothing else was there to publish.
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.published === 1 && s.processing === 0),
        "5 seconds",
        "the settle"
      )
      yield* idle(time, relay)
      yield* stop
      assert.deepStrictEqual(yield* deliveredIds, [kept!])
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [1, 0, 0])
    })))

  test("failed publishes back off per the schedule, then succeed", () => {
    const attempts: Array<number> = []
    let failures = 3
    return run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const [id] = yield* seed(1)
      const recording = Layer.effect(
        Publisher,
        Effect.gen(function*() {
          const inner = yield* Publisher
          return Publisher.of({
            publish: (messages) =>
              Effect.gen(function*() {
                attempts.push(yield* Clock.currentTimeMillis)
                if (failures-- > 0) {
                  return messages.map((m) => ({
                    _tag: "Rejected" as const,
                    id: m.id,
                    error: new PublishError({ message: "broker said no", reason: new Refused({ retryable: true }) })
                  }))
                }
                return yield* inner.publish(messages)
              })
          })
        })
      )
      const { stop } = yield* start({
        ...quiet,
        retry: Schedule.exponential("150 millis", 2),
        maxAttempts: 10,
        pollInterval: { base: "10 millis", max: "20 millis" }
      }).pipe(Effect.provide(recording))
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 1), "10 seconds", "the retried event")
      yield* stop
      assert.deepStrictEqual(yield* deliveredIds, [id!])
      assert.strictEqual(attempts.length, 4)
      const gaps = attempts.slice(1).map((t, i) => t - attempts[i]!) // exponential 150 ms: 150, 300, 600 (never earlier; a little later is the poll and the clock)
      ;[150, 300, 600].forEach((expected, i) => {
        assert.isAtLeast(gaps[i]!, expected - 15, `gap ${i + 1} was ${gaps[i]} ms, schedule says ${expected}`)
        assert.isBelow(gaps[i]!, expected + 400, `gap ${i + 1} was ${gaps[i]} ms, schedule says ${expected}`)
      })
      assert.strictEqual((yield* store.stats).published, 1)
    }))
  })

  test("a publish slower than publishTimeout fails retryably; the event goes out on a later attempt", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const spy = spyStore(store)
      const [id] = yield* seed(1)
      let calls = 0
      const hanging = Layer.effect(
        Publisher,
        Effect.gen(function*() {
          const inner = yield* Publisher
          // The first publish never answers (a confirm that does not come).
          return Publisher.of({ publish: (messages) => calls++ === 0 ? Effect.never : inner.publish(messages) })
        })
      )
      const { stop } = yield* start({
        ...quiet,
        publishTimeout: "100 millis",
        lease: "1 second",
        retry: Schedule.spaced("10 millis")
      }).pipe(
        Effect.provide(hanging),
        Effect.provideService(OutboxStore, spy.store)
      )
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 1), "5 seconds", "the retried event")
      yield* stop
      assert.deepStrictEqual(yield* deliveredIds, [id!])
      const retried = spy.settlements().flatMap((s) => s.retry)
      assert.strictEqual(retried.length, 1)
      assert.match(retried[0]!.error, /publish timed out after 100ms/)
      assert.deepStrictEqual(spy.attempts(), [1, 2])
    })))

  test("an event that keeps failing ends failed after max attempts; a non-retryable error fails it at once", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const failedBefore = (yield* Metric.value(Metrics.failed)).count
      const broker = yield* MemoryBroker.MemoryBroker
      const tries = new Map<string, number>()
      yield* broker.setFault((m) => {
        tries.set(m.id, (tries.get(m.id) ?? 0) + 1)
        const label = (m.payload as { label: string }).label
        if (label === "#0") {
          return new PublishError({ message: "temporarily down", reason: new Refused({ retryable: true }) })
        }
        if (label === "#1") {
          return new PublishError({ message: "message too large", reason: new Refused({ retryable: false }) })
        }
        return undefined
      })
      const [flaky, poison, fine] = yield* seed(3)
      const { stop } = yield* start({
        ...quiet,
        retry: Schedule.spaced("20 millis"),
        maxAttempts: 3,
        pollInterval: { base: "10 millis", max: "20 millis" }
      })
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.failed === 2 && s.published === 1),
        "10 seconds",
        "2 failed + 1 published"
      )
      yield* stop
      assert.strictEqual(tries.get(flaky!), 3)
      assert.strictEqual(tries.get(poison!), 1)
      assert.strictEqual(tries.get(fine!), 1)
      const failed = yield* store.listFailed({ limit: 10 })
      const errors = new Map(failed.map((f) => [f.message.id, f.lastError ?? ""]))
      assert.match(errors.get(flaky!)!, /temporarily down; gave up after 3 attempts/)
      assert.match(errors.get(poison!)!, /message too large \(not retryable\)/)
      assert.strictEqual((yield* Metric.value(Metrics.failed)).count - failedBefore, 2)
      // replay from the dead-letter state once the broker accepts again
      yield* broker.setFault(undefined)
      assert.strictEqual(yield* store.retryFailed(), 2)
      const again = yield* start({ ...quiet, pollInterval: { base: "10 millis", max: "20 millis" } })
      yield* time.eventually(Effect.map(store.stats, (s) => s.published === 3), "5 seconds", "replayed events")
      yield* again.stop
    })))

  test("per-key: each key's events are published in append order despite publish failures and a crashed relay", () => {
    const keys = 12
    const perKey = new Array<number>(keys).fill(0)
    let random = 42
    const rand = () => (random = (random * 1103515245 + 12345) % 2147483648) / 2147483648
    const fault = () =>
      rand() < 0.2 ? new PublishError({ message: "random nack", reason: new Refused({ retryable: true }) }) : undefined
    return run(
      Effect.gen(function*() {
        const store = yield* OutboxStore
        // Producers append one or two events per transaction; a key's transactions are serialized, so
        // its append order is the order of `n`.
        const locks = yield* Effect.forEach(Array.from({ length: keys }), () => Semaphore.make(1))
        const produce = (producer: number) =>
          Effect.forEach(Array.from({ length: 25 }), (_, i) => {
            const k = (producer * 7 + i * 5) % keys
            return locks[k]!.withPermits(1)(store.withTransaction(Effect.suspend(() => {
              const count = i % 2 === 0 ? 2 : 1
              const drafts = Array.from(
                { length: count },
                () => Thing.make({ aggregateId: `key-${k}`, payload: { n: perKey[k]!++, label: `p${producer}` } })
              )
              return Outbox.appendAll(drafts)
            })))
          }, { discard: true })
        const relays = yield* start({
          ...quiet,
          ordering: "per-key",
          concurrency: 4,
          batchSize: 10,
          retry: Schedule.spaced("10 millis"),
          maxAttempts: 100,
          lease: "2 seconds",
          reclaimInterval: "100 millis"
        })
        yield* Effect.forEach([0, 1, 2, 3, 4, 5, 6, 7], produce, { concurrency: "unbounded", discard: true })
        // A relay that claims and dies: its claims expire and are recovered without breaking the order.
        yield* store.claim({ relayId: "crashed", batchSize: 5, lease: Duration.millis(300), ordering: "per-key" })
        const total = perKey.reduce((a, b) => a + b, 0)
        yield* time.eventually(
          Effect.map(store.stats, (st) => st.published === total),
          "30 seconds",
          `${total} published`
        )
        yield* relays.stop
        const delivered = yield* MemoryBroker.MemoryBroker.use((b) => b.delivered)
        const seen = new Map<string, Array<number>>()
        for (const { message } of delivered) {
          const list = seen.get(message.orderingKey) ?? []
          list.push((message.payload as { n: number }).n)
          seen.set(message.orderingKey, list)
        }
        for (let k = 0; k < keys; k++) {
          assert.deepStrictEqual(
            seen.get(`key-${k}`) ?? [],
            Array.from({ length: perKey[k]! }, (_, i) => i),
            `order of key-${k}`
          )
        }
      }),
      { fault }
    )
  })
}

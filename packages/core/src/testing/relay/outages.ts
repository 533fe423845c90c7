/**
 * Relay contract, outages: while the publisher or the database is unavailable the relay pauses:
 * no attempt is counted, no backoff grows, no lease expires into a suspect, no poller dies; it
 * resumes within a second of the outage ending. And suspects in unordered mode do not wait behind
 * earlier events of their key.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Duration, Effect, Metric, Schedule } from "effect"
import * as MemoryBroker from "../../MemoryBroker.ts"
import * as Metrics from "../../Metrics.ts"
import * as Outbox from "../../Outbox.ts"
import { OutboxStore, type Service } from "../../OutboxStore.ts"
import { assertDeliveredOnce, deliveredIds, draft, seed, slowPublisher } from "../helpers.ts"
import { quiet, spyStore, type Suite, switchablePublisher, switchableStore } from "./suite.ts"

// Longer than every cap in play: the lease (1 s: a claim held through the outage would expire into
// a suspect), the poll interval (100 ms), the pause of an unavailable publisher (1 s).
const outage = "2 seconds"
const outageSettings = {
  ...quiet,
  concurrency: 2,
  batchSize: 5,
  lease: "1 second",
  reclaimInterval: "50 millis",
  retry: Schedule.spaced("10 millis"),
  maxAttempts: 2
} as const

/** What an outage must not leave behind: failed rows, suspects, claims, counted attempts. */
const nothingCounted = (store: Service, spy: ReturnType<typeof spyStore>, published: number) =>
  Effect.gen(function*() {
    const stats = yield* store.stats
    assert.deepStrictEqual(
      [stats.failed, stats.suspect, stats.processing, stats.published],
      [0, 0, 0, published],
      "no failed row, no suspect, no claim"
    )
    assert.isTrue(
      spy.settlements().every((s) => s.retry.length === 0 && s.failed.length === 0),
      "no retry and no failure was settled"
    )
    assert.isTrue(spy.attempts().every((n) => n === 1), `every claim was a first attempt: ${spy.attempts().join(",")}`)
  })

/**
 * Registers the outage part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const outageTests = ({ run, start, test, time }: Suite) => {
  const firstDeliveryAfter = (from: number) =>
    Effect.gen(function*() {
      const before = (yield* deliveredIds).length
      yield* time.eventually(
        Effect.map(deliveredIds, (d) => d.length > before),
        "5 seconds",
        "a delivery after the outage"
      )
      return (yield* time.now) - from
    })

  test("a publisher that is unavailable (awaitAvailable) pauses the relay: nothing claimed or counted, eager hand-overs given back; it resumes within a second", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const spy = spyStore(inner)
      const broker = yield* MemoryBroker.MemoryBroker
      const retried = (yield* Metric.value(Metrics.retried)).count
      const failed = (yield* Metric.value(Metrics.failed)).count
      yield* Effect.gen(function*() {
        yield* broker.setAvailable(false)
        const ids = [...yield* seed(10)]
        const { relay, stop } = yield* start(outageSettings)
        // appended in the relay's process while the broker is down: handed over, then given back
        for (let i = 0; i < 3; i++) ids.push(...(yield* seed(2, 100 + 2 * i)))
        yield* time.eventually(
          Effect.map(relay.status, (s) => s.paused === 2),
          "5 seconds",
          "both pollers waiting for the publisher"
        )
        yield* time.advance(outage)
        yield* nothingCounted(inner, spy, 0)
        assert.strictEqual((yield* relay.status).pollers, 2)
        const back = yield* time.now
        yield* broker.setAvailable(true)
        const resumed = yield* firstDeliveryAfter(back)
        assert.isBelow(resumed, 1000, `resumed ${resumed} ms after the publisher came back`)
        yield* time.eventually(
          Effect.map(inner.stats, (s) => s.published === ids.length),
          "10 seconds",
          "everything published"
        )
        yield* stop
        yield* nothingCounted(inner, spy, ids.length)
        yield* assertDeliveredOnce(ids)
        assert.strictEqual((yield* Metric.value(Metrics.retried)).count, retried, "no retry counted")
        assert.strictEqual((yield* Metric.value(Metrics.failed)).count, failed, "no failure counted")
      }).pipe(Effect.provideService(OutboxStore, spy.store))
    })))

  test("a publisher that cannot say when it is back: its Unavailable failures are given back uncounted, probed at most once a second; it resumes after", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const spy = spyStore(inner)
      const switched = switchablePublisher()
      yield* Effect.gen(function*() {
        yield* switched.setDown(true)
        const ids = [...yield* seed(10)]
        const { relay, stop } = yield* start(outageSettings).pipe(Effect.provide(switched.layer))
        for (let i = 0; i < 3; i++) ids.push(...(yield* seed(2, 100 + 2 * i)))
        yield* time.advance(outage)
        yield* nothingCounted(inner, spy, 0)
        // probing backs off to a second: two pollers and the eager lane, about six probes each at most
        assert.isAtMost(switched.calls().length, 24, `${switched.calls().length} publishes while down`)
        assert.strictEqual((yield* relay.status).pollers, 2)
        const back = yield* time.now
        yield* switched.setDown(false)
        const resumed = yield* firstDeliveryAfter(back)
        assert.isBelow(resumed, 1500, `resumed ${resumed} ms after the publisher came back`)
        yield* time.eventually(
          Effect.map(inner.stats, (s) => s.published === ids.length),
          "10 seconds",
          "everything published"
        )
        yield* stop
        yield* nothingCounted(inner, spy, ids.length)
        yield* assertDeliveredOnce(ids)
      }).pipe(Effect.provideService(OutboxStore, spy.store))
    })))

  test("a database that is unavailable: pollers back off without dying and count nothing; a settle waits for it; everything goes out once it is back", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const db = switchableStore(inner)
      const spy = spyStore(db.store)
      const ids = yield* seed(20)
      const { relay, stop } = yield* start({ ...outageSettings, lease: "5 seconds", dispatch: "poll" }).pipe(
        Effect.provide(slowPublisher("200 millis")),
        Effect.provideService(OutboxStore, spy.store)
      )
      // down while batches are being published: their settles wait for the database
      yield* time.eventually(Effect.map(inner.stats, (s) => s.processing > 0), "5 seconds", "batches in flight")
      yield* db.set("down")
      yield* time.advance(outage)
      assert.strictEqual((yield* relay.status).pollers, 2, "no poller died")
      assert.isTrue(yield* relay.isRunning)
      yield* db.set("up")
      yield* time.eventually(Effect.map(inner.stats, (s) => s.published === 20), "10 seconds", "everything published")
      yield* stop
      yield* nothingCounted(inner, spy, 20)
      yield* assertDeliveredOnce(ids)
    })))

  test("unordered: a suspect is published without waiting behind an earlier event of its key", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const [first, second] = (yield* store.withTransaction(Outbox.appendAll([draft(1, "K"), draft(2, "K")]))).map((
        m
      ) => m.id)
      // first: retried in an hour; second: its relay died (a suspect once the lease is over)
      const lease = Duration.seconds(30)
      yield* store.claim({ relayId: "a", batchSize: 1, lease })
      yield* store.claim({ relayId: "dies", batchSize: 1, lease: Duration.millis(100) })
      yield* store.settle("a", {
        published: [],
        retry: [{ id: first!, delay: Duration.hours(1), error: "nack" }],
        failed: []
      })
      yield* time.advance("200 millis")
      const { stop } = yield* start({ ...quiet, reclaimInterval: "50 millis" })
      yield* time.eventually(Effect.map(deliveredIds, (d) => d.includes(second!)), "5 seconds", "the suspect")
      yield* stop
      assert.deepStrictEqual(yield* deliveredIds, [second!])
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.suspect], [1, 1, 0])
    })))
}

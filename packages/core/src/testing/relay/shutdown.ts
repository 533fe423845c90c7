/**
 * Relay contract, shutdown: in-flight batches finish within the deadline or are interrupted and
 * released; closing takes at most `shutdownTimeout` (half a second when that is shorter) even with a
 * publisher that never answers or a database that is gone: on simulated time exactly, on real time
 * within a second more.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { OutboxStore } from "../../OutboxStore.ts"
import { Publisher } from "../../Publisher.ts"
import { assertDeliveredOnce, seed, slowPublisher } from "../helpers.ts"
import { quiet, type Suite, switchableStore, timed } from "./suite.ts"

/**
 * Registers the shutdown part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const shutdownTests = ({ run, start, test, time }: Suite) => {
  test("merged claims: shutdown leaves no claim behind, whether the batches finish or are interrupted and released", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(100)
      // in time: the in-flight batches finish and are settled
      const calm = yield* start({ ...quiet, dispatch: "poll", concurrency: 4, batchSize: 5 }).pipe(
        Effect.provide(slowPublisher("100 millis"))
      )
      yield* time.eventually(Effect.map(store.stats, (s) => s.processing > 0), "5 seconds", "batches in flight")
      yield* calm.stop
      let stats = yield* store.stats
      assert.strictEqual(stats.processing, 0, "no claim is left behind")
      assert.isAtLeast(stats.published, 5, "the batches in flight completed")
      assert.strictEqual(stats.published + stats.pending, 100)
      const published = stats.published
      assert.isAtLeast(stats.pending, 20, "work is left for the interrupted relay")
      // past the deadline: the publishes are interrupted and the claims released under the group's holder
      const stuck = yield* start({
        ...quiet,
        dispatch: "poll",
        concurrency: 4,
        batchSize: 5,
        shutdownTimeout: "50 millis",
        publishTimeout: "20 seconds"
      }).pipe(
        Effect.provide(slowPublisher("10 seconds"))
      )
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.processing === 20),
        "5 seconds",
        "the four pollers holding a batch each"
      )
      yield* stuck.stop
      stats = yield* store.stats
      assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [100 - published, 0, published])
      const again = yield* start({ ...quiet, concurrency: 4, batchSize: 5 })
      yield* time.eventually(Effect.map(store.stats, (s) => s.published === 100), "5 seconds", "the rest")
      yield* again.stop
      yield* assertDeliveredOnce(ids)
    })))

  test("shutdown waits for the in-flight batch and loses nothing", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(30)
      const { stop } = yield* start({ ...quiet, batchSize: 10 }).pipe(Effect.provide(slowPublisher("300 millis")))
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.processing === 10),
        "5 seconds",
        "the first batch being published"
      )
      yield* stop
      const stats = yield* store.stats
      assert.strictEqual(stats.processing, 0, "no claim is left behind")
      assert.strictEqual(stats.published + stats.pending, 30)
      assert.isAtLeast(stats.published, 10, "the in-flight batch completed")
      const again = yield* start(quiet)
      yield* time.eventually(Effect.map(store.stats, (s) => s.published === 30), "5 seconds", "the rest")
      yield* again.stop
      yield* assertDeliveredOnce(ids)
    })))

  test("shutdown past its deadline interrupts the publish and releases the claims", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(10)
      const { stop } = yield* start({
        ...quiet,
        batchSize: 10,
        shutdownTimeout: "50 millis",
        publishTimeout: "20 seconds"
      }).pipe(
        Effect.provide(slowPublisher("10 seconds"))
      )
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.processing === 10),
        "5 seconds",
        "the batch being published"
      )
      const { ms: took } = yield* timed(time, stop)
      assert.isBelow(took, 50 + 1000, `shutdown took ${took} ms`)
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [10, 0, 0])
      // released, not counted: the next claim is attempt 1 again
      const claimed = yield* store.claim({ relayId: "check", batchSize: 10, lease: Duration.seconds(30) })
      assert.deepStrictEqual(claimed.map((c) => c.attempts), Array(10).fill(1))
      assert.deepStrictEqual(claimed.map((c) => c.message.id).sort(), [...ids].sort())
    })))

  test("shutdown is bounded with a publisher that never answers (not even to interruption): shutdownTimeout + 1 s, no claim left", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(20)
      const never = Layer.succeed(Publisher, Publisher.of({ publish: () => Effect.uninterruptible(Effect.never) }))
      const { stop } = yield* start({
        ...quiet,
        concurrency: 2,
        batchSize: 5,
        dispatch: "poll",
        shutdownTimeout: "2 seconds",
        publishTimeout: "20 seconds"
      }).pipe(
        Effect.provide(never)
      )
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.processing === 10),
        "5 seconds",
        "two batches being published"
      )
      const { ms: took } = yield* timed(time, stop)
      // The relay's own deadline is shutdownTimeout itself: the layers closed after it need the rest.
      if (time.mode === "test") assert.isAtMost(took, 2000, `shutdown took ${took} ms`)
      assert.isBelow(took, 2000 + 1000, `shutdown took ${took} ms`)
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [20, 0, 0], "the claims were released")
      const again = yield* start(quiet)
      yield* time.eventually(
        Effect.map(store.stats, (s) => s.published === 20),
        "5 seconds",
        "everything, with a publisher that answers"
      )
      yield* again.stop
      yield* assertDeliveredOnce(ids)
    })))

  test("shutdown is bounded with a database that is gone: shutdownTimeout + 1 s; nothing is lost once it is back", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const ids = yield* seed(10)
      const db = switchableStore(inner)
      const { stop } = yield* start({
        ...quiet,
        batchSize: 10,
        dispatch: "poll",
        lease: "1 second",
        shutdownTimeout: "2 seconds"
      }).pipe(
        Effect.provide(slowPublisher("300 millis")),
        Effect.provideService(OutboxStore, db.store)
      )
      yield* time.eventually(
        Effect.map(inner.stats, (s) => s.processing === 10),
        "5 seconds",
        "the batch being published"
      )
      yield* db.set("gone")
      const { ms: took } = yield* timed(time, stop)
      if (time.mode === "test") assert.isAtMost(took, 2000, `shutdown took ${took} ms`)
      assert.isBelow(took, 2000 + 1000, `shutdown took ${took} ms`)
      yield* db.set("up")
      const again = yield* start({ ...quiet, lease: "1 second", reclaimInterval: "50 millis" })
      yield* time.eventually(
        Effect.map(inner.stats, (s) => s.published === 10),
        "10 seconds",
        "everything, once the database is back"
      )
      yield* again.stop
      yield* assertDeliveredOnce(ids)
    })))
}

/**
 * Relay contract, eager dispatch: events appended in the relay's process go out without a claim;
 * overflow, shutdown and transactions that do not defer fall back to claims; backpressure.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import * as Outbox from "../../Outbox.ts"
import { OutboxStore } from "../../OutboxStore.ts"
import { assertDeliveredOnce, deliveredIds, seed, slowPublisher, Thing } from "../helpers.ts"
import { idle, quiet, spyStore, type Suite } from "./suite.ts"

/**
 * Registers the eager-dispatch part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const eagerTests = ({ run, start, test, time }: Suite) => {
  test("eager dispatch: events appended in the relay's process go out without a claim; a rollback sends nothing", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const spy = spyStore(inner)
      yield* Effect.gen(function*() {
        const store = yield* OutboxStore
        // room for every event at once (concurrency × batchSize): the overflow is the next test's
        const { relay, stop } = yield* start({
          ...quiet,
          concurrency: 2,
          batchSize: 50,
          pollInterval: { base: "5 seconds", max: "5 seconds" }
        })
        yield* idle(time, relay, 2)
        const started = yield* time.now
        const ids = (yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) => seed(1 + (i % 3), i * 3),
          { concurrency: 4 }
        )).flat()
        yield* Effect.exit(store.withTransaction(Effect.andThen(
          Outbox.append(Thing, { aggregateId: "x", payload: { n: 1, label: "rolled back" } }),
          Effect.fail("abort")
        )))
        yield* time.eventually(Effect.map(deliveredIds, (d) => d.length >= ids.length), "5 seconds", "the eager events")
        const elapsed = (yield* time.now) - started
        yield* time.eventually(Effect.map(store.stats, (s) => s.published === ids.length), "5 seconds", "their settles")
        yield* stop
        yield* assertDeliveredOnce(ids)
        assert.isBelow(elapsed, 2000, `published after ${elapsed} ms; the poll interval is 5 s`)
        assert.strictEqual(spy.claimed(), 0, "no event went through a claim")
        assert.isTrue(spy.appendClaims().every((c) => c !== undefined && /-eager$/.test(c.relayId)))
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [ids.length, 0, 0])
      }).pipe(Effect.provideService(OutboxStore, spy.store))
    })))

  test("eager dispatch: the overflow, a shutdown before the commit, and a transaction that does not defer fall back to claims", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const spy = spyStore(inner)
      yield* Effect.gen(function*() {
        const store = yield* OutboxStore
        const first = yield* start({
          ...quiet,
          concurrency: 1,
          batchSize: 2,
          pollInterval: { base: "20 millis", max: "20 millis" }
        })
        // more than concurrency × batchSize in one transaction: written pending, claimed
        const big = yield* seed(3)
        yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 3), "5 seconds", "the overflow")
        assert.strictEqual(spy.claimed(), 3)
        assert.isUndefined(spy.appendClaims().at(-1))
        // two appends of two in one transaction: each fit when it was made, together they do not;
        // what does not fit at the commit goes back to pending and is claimed
        const pair = yield* store.withTransaction(Effect.zipWith(
          Outbox.appendAll([0, 1].map((i) => Thing.make({ aggregateId: "p", payload: { n: i, label: "pair" } }))),
          Outbox.appendAll([2, 3].map((i) => Thing.make({ aggregateId: "p", payload: { n: i, label: "pair" } }))),
          (a, b) => [...a, ...b].map((m) => m.id)
        ))
        assert.isTrue(spy.appendClaims().slice(-2).every((c) => c !== undefined))
        yield* time.eventually(Effect.map(deliveredIds, (d) => d.length === 7), "5 seconds", "the pair")
        assert.strictEqual(spy.claimed(), 5, "the two that did not fit were claimed")
        // the relay stops between the append (written claimed for it) and the commit
        const late = yield* store.withTransaction(Effect.gen(function*() {
          const m = yield* Outbox.append(Thing, { aggregateId: "late", payload: { n: 9, label: "late" } })
          yield* first.stop
          return m
        }))
        assert.match(spy.appendClaims().at(-1)?.relayId ?? "", /-eager$/)
        yield* time.eventually(
          Effect.map(store.stats, (st) => st.pending === 1),
          "5 seconds",
          "the late event back to pending"
        )
        // a transaction whose after-commit hooks run at once is not trusted with eager dispatch
        const second = yield* start({
          ...quiet,
          concurrency: 1,
          batchSize: 2,
          pollInterval: { base: "20 millis", max: "20 millis" }
        })
        spy.runHooksAtOnce(true)
        const [plain] = yield* seed(1)
        spy.runHooksAtOnce(false)
        assert.isUndefined(spy.appendClaims().at(-1))
        yield* time.eventually(
          Effect.map(deliveredIds, (d) => d.length === 9),
          "5 seconds",
          "the late and plain events"
        )
        yield* second.stop
        yield* assertDeliveredOnce([...big, ...pair, late.id, plain!])
        assert.strictEqual(spy.claimed(), 7)
        assert.deepStrictEqual(spy.attempts(), [1, 1, 1, 1, 1, 1, 1], "events given back were not counted")
      }).pipe(Effect.provideService(OutboxStore, spy.store))
    })))

  test("eager dispatch with backpressure: a producer waits after its commit for the relay, at most as long as allowed; shutdown publishes what was handed over", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const one = (n: number) =>
        store.withTransaction(Outbox.append(Thing, { aggregateId: "bp", payload: { n, label: "bp" } }))
      const count = Effect.map(deliveredIds, (d) => d.length)
      const slow = yield* start({ ...quiet, concurrency: 1, batchSize: 1, eagerLimit: 2, backpressure: "5 seconds" })
        .pipe(
          Effect.provide(slowPublisher("150 millis"))
        )
      yield* one(0) // room left after it: returns at once
      assert.strictEqual(yield* count, 0)
      yield* time.run(one(1)) // fills the relay: returns once the first is out
      assert.isAtLeast(yield* count, 1)
      yield* slow.stop
      assert.strictEqual(yield* count, 2)
      const slower = yield* start({ ...quiet, concurrency: 1, batchSize: 1, eagerLimit: 2, backpressure: "30 millis" })
        .pipe(
          Effect.provide(slowPublisher("500 millis"))
        )
      yield* one(2)
      yield* time.run(one(3)) // waits 30 ms at most, then goes on: its event stays handed over
      assert.strictEqual(yield* count, 2)
      yield* slower.stop // publishes both before it returns
      assert.strictEqual(yield* count, 4)
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [4, 0, 0])
    })))
}

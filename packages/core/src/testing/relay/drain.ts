/**
 * Relay contract, `Relay.drain`: a bounded run that stops when nothing is due, after `maxEvents`,
 * or when its budget is spent, releasing what it still holds; suspects first.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import { PublishError, Refused } from "../../Errors.ts"
import * as MemoryBroker from "../../MemoryBroker.ts"
import { OutboxStore } from "../../OutboxStore.ts"
import * as Relay from "../../Relay.ts"
import { assertDeliveredOnce, deliveredIds, failureTag, seed, slowPublisher } from "../helpers.ts"
import type { Suite } from "./suite.ts"

/**
 * Registers the drain part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const drainTests = ({ run, test, time }: Suite) => {
  test("drain: publishes everything due, then reports idle", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(30)
      const report = yield* time.run(Relay.drain({ batchSize: 10, concurrency: 2 }))
      assert.deepStrictEqual(report, { published: 30, retried: 0, failed: 0, claimed: 30, reason: "idle" })
      yield* assertDeliveredOnce(ids)
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [30, 0, 0])
      assert.deepStrictEqual(yield* time.run(Relay.drain()), {
        published: 0,
        retried: 0,
        failed: 0,
        claimed: 0,
        reason: "idle"
      })
    })))

  test("drain: stops after maxEvents; retries and failures are settled as the relay settles them", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const broker = yield* MemoryBroker.MemoryBroker
      yield* broker.setFault((m) => {
        const label = (m.payload as { label: string }).label
        if (label === "#0") return new PublishError({ message: "try later", reason: new Refused({ retryable: true }) })
        if (label === "#1") return new PublishError({ message: "never", reason: new Refused({ retryable: false }) })
        return undefined
      })
      yield* seed(30)
      const report = yield* time.run(Relay.drain({ maxEvents: 12, batchSize: 5, retry: Schedule.spaced("1 hour") }))
      assert.deepStrictEqual(report, { published: 10, retried: 1, failed: 1, claimed: 12, reason: "max-events" })
      const stats = yield* store.stats
      assert.deepStrictEqual([stats.published, stats.failed, stats.pending, stats.processing], [10, 1, 19, 0])
      const invalid = yield* Effect.exit(Relay.drain({ maxEvents: 0 }))
      assert.strictEqual(failureTag(invalid), "InvalidConfig")
    })))

  test("drain: stops when its budget is spent, releasing what it holds (not counted)", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const ids = yield* seed(20)
      const { ms: took, value: report } = yield* Effect.gen(function*() {
        const started = yield* time.now
        const value = yield* time.run(
          Relay.drain({ batchSize: 5, budget: "500 millis" }).pipe(Effect.provide(slowPublisher("200 millis")))
        )
        return { value, ms: (yield* time.now) - started }
      })
      assert.strictEqual(report.reason, "budget")
      assert.isAtLeast(took, 500)
      assert.isBelow(took, 500 + 1000, `the drain took ${took} ms`)
      assert.isBelow(report.published, 20)
      const stats = yield* store.stats
      assert.strictEqual(stats.processing, 0, "nothing left claimed")
      assert.strictEqual(stats.published, report.published)
      const next = yield* store.claim({ relayId: "check", batchSize: 20, lease: Duration.seconds(30) })
      assert.isTrue(next.every((c) => c.attempts === 1), "the released claims were not counted")
      yield* store.release("check", next.map((c) => c.message.id))
      const rest = yield* time.run(Relay.drain({ batchSize: 5 }))
      assert.strictEqual(rest.reason, "idle")
      yield* assertDeliveredOnce(ids)
    })))

  test("drain: takes back expired leases first and publishes the suspects; the crash-loop guard holds", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const [poison, crashed, ...others] = yield* seed(6)
      // a relay died holding both; then `poison` (the oldest suspect) killed its relay once more
      const short = Duration.millis(100)
      yield* store.claim({ relayId: "dies", batchSize: 2, lease: short })
      yield* time.advance("200 millis")
      assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 2, failed: 0 })
      assert.strictEqual((yield* store.claimSuspect({ relayId: "dies-again", lease: short }))?.message.id, poison!)
      yield* time.advance("200 millis")
      const report = yield* time.run(Relay.drain({ maxCrashes: 2, batchSize: 10 }))
      // poison: started twice, finished never → failed by the guard; crashed: published alone
      assert.deepStrictEqual(report, { published: 5, retried: 0, failed: 1, claimed: 5, reason: "idle" })
      const failed = yield* store.listFailed({ limit: 10 })
      assert.deepStrictEqual(failed.map((f) => f.message.id), [poison!])
      assert.match(failed[0]!.lastError ?? "", /crash loop/)
      yield* assertDeliveredOnce([crashed!, ...others])
      assert.include(yield* deliveredIds, crashed!)
    })))
}

/**
 * Outbox store contract, the admin views the console and the CLI read: list, get, counts by type,
 * throughput, holders, requeue.
 * @internal
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { OutboxStore } from "../../OutboxStore.ts"
import { seed, Thing } from "../helpers.ts"

const ids = (claimed: ReadonlyArray<{ readonly message: { readonly id: string } }>) => claimed.map((c) => c.message.id)
const lease = Duration.seconds(30)

/**
 * Registers the admin-view tests (real time: the throughput is per wall-clock minute).
 * @since 0.1.0
 * @category contracts
 */
export const adminViewTests = (
  run: <A, E>(body: Effect.Effect<A, E, OutboxStore>) => Effect.Effect<A, unknown>
): void => {
  it.live("admin views: list (newest first, by status and type), get, counts by type, throughput, holders, requeue", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore
      const seeded = yield* seed(4)
      const claimed = yield* store.claim({ relayId: "relay-a", batchSize: 3, lease })
      assert.deepStrictEqual(ids(claimed), seeded.slice(0, 3))
      const holders = yield* store.holders
      assert.deepStrictEqual(holders.map((h) => [h.holder, h.events]), [["relay-a", 3]])
      assert.isTrue(holders[0]!.claimedUntil.getTime() > Date.now())
      assert.strictEqual((yield* store.get(seeded[0]!))?.claimedBy, "relay-a")
      yield* store.settle("relay-a", {
        published: [seeded[0]!],
        retry: [],
        failed: [{ id: seeded[1]!, error: "refused" }],
        released: [seeded[2]!]
      })
      assert.deepStrictEqual(yield* store.holders, [])

      assert.deepStrictEqual((yield* store.list({ limit: 10 })).map((e) => e.message.id), [...seeded].reverse())
      assert.deepStrictEqual((yield* store.list({ limit: 2 })).map((e) => e.message.id), [seeded[3], seeded[2]])
      const failed = yield* store.list({ status: "failed", limit: 10 })
      assert.deepStrictEqual(failed.map((e) => [e.message.id, e.status, e.attempts, e.lastError]), [[
        seeded[1]!,
        "failed",
        1,
        "refused"
      ]])
      assert.deepStrictEqual(yield* store.list({ type: "other.type", limit: 10 }), [])
      assert.strictEqual((yield* store.list({ type: Thing.type, status: "pending", limit: 10 })).length, 2)

      const published = (yield* store.get(seeded[0]!))!
      assert.strictEqual(published.status, "published")
      assert.instanceOf(published.publishedAt, Date)
      assert.isNull(published.claimedBy)
      assert.deepStrictEqual(published.message.payload, { n: 0, label: "#0" })
      assert.isUndefined(yield* store.get("0190a0f4-5b4e-7c3d-8a1b-2c3d4e5f6a7b"))
      assert.isUndefined(yield* store.get("not-a-uuid"))

      assert.deepStrictEqual(yield* store.countByType({ status: "pending" }), [{ type: Thing.type, count: 2 }])
      assert.deepStrictEqual(yield* store.countByType({ status: "suspect" }), [])

      const minutes = yield* store.throughput({ minutes: 5 })
      assert.strictEqual(minutes.length, 5)
      assert.strictEqual(minutes.reduce((n, m) => n + m.published, 0), 1)
      assert.isTrue(
        minutes.every((m, i) => i === 0 || m.minute.getTime() - minutes[i - 1]!.minute.getTime() === 60_000),
        "consecutive minutes"
      )
      assert.isTrue(
        minutes.at(-1)!.minute.getTime() <= Date.now() && minutes.at(-1)!.minute.getTime() > Date.now() - 120_000
      )

      // Published and failed events go back to pending (a replay); pending ones are left alone.
      assert.strictEqual(yield* store.requeue([seeded[0]!, seeded[1]!, seeded[3]!, "not-a-uuid"]), 2)
      const again = (yield* store.get(seeded[0]!))!
      assert.deepStrictEqual([again.status, again.attempts, again.publishedAt], ["pending", 0, null])
      assert.strictEqual((yield* store.stats).pending, 4)
      assert.strictEqual(yield* store.requeue([]), 0)
    })))
}

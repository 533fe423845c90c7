/**
 * Relay contract, merged claims: pollers waiting for a claim statement share one; a failed shared
 * statement fails all of them without losing or doubling an event.
 * @internal
 */
import { assert } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { StoreError, Unavailable } from "../../Errors.ts"
import { OutboxStore, type Service } from "../../OutboxStore.ts"
import { Publisher } from "../../Publisher.ts"
import type * as Relay from "../../Relay.ts"
import { assertDeliveredOnce, deliveredIds, seed } from "../helpers.ts"
import { quiet, type Suite } from "./suite.ts"

/**
 * Registers the merged-claims part of the relay contract.
 * @since 0.1.0
 * @category suites
 */
export const claimTests = ({ run, start, test, time }: Suite) => {
  test("merged claims: waiting pollers share a claim statement, each still publishes one batch at a time; without merging, one claim per poller", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      const claims: Array<{ readonly relayId: string; readonly batchSize: number }> = []
      // A statement that takes a few milliseconds (as on a real database), so that pollers queue up.
      const slow = <A, E>(effect: Effect.Effect<A, E>) => Effect.andThen(Effect.sleep("3 millis"), effect)
      const store: Service = {
        ...inner,
        claim: (options) => Effect.andThen(Effect.sync(() => void claims.push(options)), slow(inner.claim(options))),
        settleAndClaim: (relayId, settlement, next) =>
          Effect.andThen(
            Effect.sync(() => void claims.push(next)),
            slow(inner.settleAndClaim(relayId, settlement, next))
          )
      }
      const batches: Array<number> = []
      const counting = Layer.effect(
        Publisher,
        Effect.gen(function*() {
          const broker = yield* Publisher
          return Publisher.of({
            publish: (messages) =>
              Effect.andThen(Effect.sync(() => void batches.push(messages.length)), broker.publish(messages))
          })
        })
      )
      const drain = (config: Relay.Config, n: number, offset: number) =>
        Effect.gen(function*() {
          claims.length = 0
          batches.length = 0
          const before = (yield* deliveredIds).length
          yield* seed(n, offset)
          const { stop } = yield* start({ ...quiet, dispatch: "poll", concurrency: 8, batchSize: 5, ...config }).pipe(
            Effect.provide(counting),
            Effect.provideService(OutboxStore, store)
          )
          yield* time.eventually(
            Effect.map(deliveredIds, (d) => d.length >= before + n),
            "20 seconds",
            `${n} deliveries`
          )
          yield* stop
        })

      yield* drain({}, 400, 0)
      assert.isAbove(Math.max(...claims.map((c) => c.batchSize)), 5, "some claim statements served several pollers")
      assert.isAtMost(Math.max(...batches), 5, "publish batches stay at batchSize")
      assert.isTrue(claims.every((c) => c.relayId.endsWith("-claims")), "merged claims are held by the group's claimer")

      yield* drain({ coalesceClaims: false }, 200, 400)
      assert.deepStrictEqual([...new Set(claims.map((c) => c.batchSize))], [5])
      assert.strictEqual(new Set(claims.map((c) => c.relayId)).size, 8, "one holder per poller")

      const delivered = yield* deliveredIds
      assert.strictEqual(delivered.length, 600)
      assert.strictEqual(new Set(delivered).size, 600, "every event once")
      const stats = yield* inner.stats
      assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [600, 0, 0])
    })))

  test("merged claims: a failed shared statement fails every poller in it; their events are still published once", () =>
    run(Effect.gen(function*() {
      const inner = yield* OutboxStore
      let failures = 0
      const store: Service = {
        ...inner,
        // The first two merged settle-and-claims fail before they touch the store (a dropped connection).
        settleAndClaim: (relayId, settlement, next) =>
          Effect.suspend(() =>
            next.batchSize > 5 && failures < 2
              ? (failures++,
                Effect.fail(
                  new StoreError({
                    operation: "settleAndClaim",
                    message: "connection reset",
                    reason: new Unavailable()
                  })
                ))
              : Effect.andThen(Effect.sleep("2 millis"), inner.settleAndClaim(relayId, settlement, next))
          )
      }
      const ids = yield* seed(200)
      const { stop } = yield* start({ ...quiet, dispatch: "poll", concurrency: 8, batchSize: 5 }).pipe(
        Effect.provideService(OutboxStore, store)
      )
      yield* time.eventually(Effect.map(inner.stats, (s) => s.published === 200), "20 seconds", "200 published")
      yield* stop
      assert.strictEqual(failures, 2)
      // the pollers retried their settles: nothing waited for a lease, nothing went out twice
      yield* assertDeliveredOnce(ids)
    })))
}

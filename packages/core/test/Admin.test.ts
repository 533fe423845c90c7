/**
 * The operator actions on the memory stores: bulk retries of failed events with progress, inbox
 * dead-letter replay, and saga retry / compensate carried out by the recovery worker. On
 * `TestClock`: the memory stores read `Clock`, and the sagas' retry delays pass as the test clock
 * advances (`testTime.run`).
 */
import { assert, describe, it } from "@effect/vitest"
import { failureTag, testTime } from "@tidings/core/testing"
import { Clock, Duration, Effect, Exit, Layer, References, Schema } from "effect"
import * as Admin from "../src/Admin.ts"
import * as Event from "../src/Event.ts"
import * as InboxStore from "../src/InboxStore.ts"
import * as MemoryInboxStore from "../src/MemoryInboxStore.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as MemorySagaStore from "../src/MemorySagaStore.ts"
import * as Outbox from "../src/Outbox.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import * as Saga from "../src/Saga.ts"
import * as SagaStore from "../src/SagaStore.ts"
import { localOrder, makeScript } from "./SagaFixtures.ts"

const Shipped = Event.define("parcel.shipped", { aggregateType: "parcel", schema: Schema.Struct({ n: Schema.Int }) })
const Billed = Event.define("invoice.billed", { aggregateType: "invoice", schema: Schema.Struct({ n: Schema.Int }) })

const stores = Layer.mergeAll(MemoryOutboxStore.layer, MemoryInboxStore.layer, MemorySagaStore.layer)
const run = <A, E>(
  effect: Effect.Effect<A, E, OutboxStore.OutboxStore | InboxStore.InboxStore | SagaStore.SagaStore>
) =>
  // Sagas log every failed attempt; the assertions say what happened.
  testTime.run(effect).pipe(
    Effect.provide(Layer.fresh(stores)),
    Effect.provideService(References.MinimumLogLevel, "None")
  )

/** Appends `n` events of each type and fails them all, as a relay would after a refusal. */
const failedEvents = (n: number) =>
  Effect.gen(function*() {
    const store = yield* OutboxStore.OutboxStore
    const drafts = Array.from(
      { length: n },
      (
        _,
        i
      ) => [
        Shipped.make({ aggregateId: `p${i}`, payload: { n: i } }),
        Billed.make({ aggregateId: `b${i}`, payload: { n: i } })
      ]
    ).flat()
    yield* store.withTransaction(Outbox.appendAll(drafts))
    const claimed = yield* store.claim({ relayId: "r", batchSize: 1000, lease: Duration.seconds(30) })
    yield* store.settle("r", {
      published: [],
      retry: [],
      failed: claimed.map((c) => ({ id: c.message.id, error: "refused" }))
    })
    return claimed.map((c) => c.message)
  })

describe("Admin", () => {
  it.effect("retryFailed by type, page by page with progress; by ids; all", () =>
    run(Effect.gen(function*() {
      const store = yield* OutboxStore.OutboxStore
      const messages = yield* failedEvents(7)
      const progress: Array<[number, number]> = []
      const n = yield* Admin.retryFailed({ type: Shipped.type }, {
        batch: 3,
        onProgress: (done, total) => Effect.sync(() => void progress.push([done, total]))
      })
      assert.strictEqual(n, 7)
      assert.deepStrictEqual(progress, [[0, 7], [3, 7], [6, 7], [7, 7]])
      assert.deepStrictEqual(yield* store.countByType({ status: "failed" }), [{ type: Billed.type, count: 7 }])
      assert.deepStrictEqual(yield* store.countByType({ status: "pending" }), [{ type: Shipped.type, count: 7 }])
      // Nothing of a type without failures.
      assert.strictEqual(yield* Admin.retryFailed({ type: "no.such.type" }), 0)
      const billed = messages.filter((m) => m.type === Billed.type).map((m) => m.id)
      assert.strictEqual(yield* Admin.retryFailed({ ids: [billed[0]!, billed[0]!, billed[1]!, "not-failed"] }), 2)
      assert.strictEqual(yield* Admin.retryFailed({ all: true }), 5)
      assert.strictEqual((yield* store.stats).failed, 0)
    })))

  it.effect("replayDeadLetter resets the consumer's failed row and requeues the event when the outbox still has it", () =>
    run(Effect.gen(function*() {
      const inbox = yield* InboxStore.InboxStore
      const outbox = yield* OutboxStore.OutboxStore
      const [published] = yield* outbox.withTransaction(
        Outbox.appendAll([Shipped.make({ aggregateId: "p", payload: { n: 1 } })])
      )
      const claimed = yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(30) })
      yield* outbox.settle("r", { published: claimed.map((c) => c.message.id), retry: [], failed: [] })
      yield* inbox.markFailed(published!.id, "billing", "crash loop: 3 handling attempts started and none finished")
      assert.deepStrictEqual(yield* Admin.replayDeadLetter(published!.id, "billing"), { reset: true, requeued: true })
      assert.isUndefined(yield* inbox.get(published!.id, "billing"))
      assert.strictEqual((yield* outbox.get(published!.id))?.status, "pending")
      // Not dead-lettered (any more): nothing happens.
      assert.deepStrictEqual(yield* Admin.replayDeadLetter(published!.id, "billing"), { reset: false, requeued: false })
      // An event the outbox no longer has: the row is reset; the broker's dead-letter queue has the message.
      yield* inbox.markFailed("gone-from-the-outbox", "billing", "crash loop")
      assert.deepStrictEqual(yield* Admin.replayDeadLetter("gone-from-the-outbox", "billing"), {
        reset: true,
        requeued: false
      })
    })))

  it.effect("retrySaga: a failed compensation is retried by the recovery worker with fresh attempts", () =>
    run(Effect.gen(function*() {
      // confirm is declined, and the refund of the charge keeps failing: the saga ends `failed`.
      const failing = makeScript({ failAction: { confirm: Infinity }, failCompensation: { charge: Infinity } })
      const exit = yield* Effect.exit(Saga.run(localOrder(failing), { orderId: "o-1", sku: "book", cents: 100 }))
      assert.strictEqual(failureTag(exit), "SagaCompensationFailed")
      const [failed] = yield* SagaStore.SagaStore.use((s) => s.list({ status: "failed", limit: 10 }))
      const id = failed!.id
      const before = (yield* SagaStore.SagaStore.use((s) => s.load(id)))!
      assert.deepStrictEqual(before.steps.map((s) => s.status), ["completed", "compensation_failed", "failed"])
      assert.strictEqual(before.steps[1]!.compensationAttempts, 3)

      const retried = yield* Admin.retrySaga(id)
      assert.strictEqual(retried.status, "compensating")
      assert.match(retried.error ?? "", /^retried by an operator after: compensation of charge failed/)
      const healed = makeScript()
      yield* testTime.advance("1 millis") // the recovery worker's next round, later than the retry
      const report = yield* Saga.recoverOnce({
        registry: Saga.registry(localOrder(healed)),
        maxCompensationAttempts: 3
      })
      assert.deepStrictEqual(report.recovered.map((r) => [r.id, r.outcome]), [[id, "compensated"]])
      assert.deepStrictEqual(healed.log, [
        "undo:charge",
        "refunded pay-res-o-1-2030",
        "undo:reserve",
        "released res-o-1 until 2030-01-01T00:00:00.000Z"
      ])
      const after = (yield* SagaStore.SagaStore.use((s) => s.load(id)))!
      assert.deepStrictEqual([after.saga.status, ...after.steps.map((s) => s.status)], [
        "compensated",
        "compensated",
        "compensated",
        "failed"
      ])
      // Only a failed saga can be retried.
      assert.strictEqual(failureTag(yield* Effect.exit(Admin.retrySaga(id))), "SagaActionConflict")
      assert.strictEqual(
        failureTag(yield* Effect.exit(Admin.retrySaga("0190a0f4-5b4e-7c3d-8a1b-2c3d4e5f6a7b"))),
        "SagaNotFound"
      )
    })))

  it.effect("compensateSaga: a running saga without a live executor is undone by the recovery worker; the timeline shows it", () =>
    run(Effect.gen(function*() {
      const store = yield* SagaStore.SagaStore
      const id = "0193b4a2-7c1e-7000-8000-0000000000a1"
      // A saga whose executor is gone after its first step (as recorded), waiting in its second.
      yield* store.create({
        id,
        type: "local-order",
        input: { orderId: "o-2", sku: "mug", cents: 5 },
        steps: ["reserve", "charge", "confirm"],
        stepUpdates: [{ index: 0, attemptStarted: true }]
      })
      yield* store.update(id, 0, {
        currentStep: 1,
        steps: [{
          index: 0,
          status: "completed",
          result: { reservationId: "res-o-2", until: "2030-01-01T00:00:00.000Z" },
          finished: true
        }, { index: 1, attemptStarted: true }]
      })
      const claimed = yield* store.update(id, 1, { claim: { owner: "worker-a", lease: Duration.minutes(1) } })
      const refused = yield* Effect.exit(Admin.compensateSaga(id))
      assert.strictEqual(failureTag(refused), "SagaActionConflict")
      assert.match(Exit.isFailure(refused) ? String(refused.cause) : "", /being executed by worker-a/)
      yield* store.update(id, claimed.version, { claim: null })

      const compensating = yield* Admin.compensateSaga(id)
      assert.strictEqual(compensating.status, "compensating")
      const during = Admin.timeline((yield* store.load(id))!, yield* Clock.currentTimeMillis)
      assert.deepStrictEqual(during.map((e) => [e.step, e.status, e.current]), [["reserve", "completed", null], [
        "charge",
        "failed",
        "compensation"
      ], ["confirm", "pending", null]])
      assert.strictEqual(during[1]!.error, "compensation requested by an operator")
      assert.isNumber(during[0]!.durationMs)
      assert.isNull(during[2]!.durationMs)

      const script = makeScript()
      yield* testTime.advance("1 millis") // the recovery worker's next round, later than the request
      const report = yield* Saga.recoverOnce({ registry: Saga.registry(localOrder(script)) })
      assert.deepStrictEqual(report.recovered.map((r) => r.outcome), ["compensated"])
      assert.deepStrictEqual(script.log, ["undo:reserve", "released res-o-2 until 2030-01-01T00:00:00.000Z"])
      const done = (yield* store.load(id))!
      assert.strictEqual(done.saga.status, "compensated")
      assert.strictEqual(done.saga.error, "compensation requested by an operator")
      assert.deepStrictEqual(
        Admin.timeline(done, yield* Clock.currentTimeMillis).map((e) => [e.step, e.status, e.compensationAttempts]),
        [["reserve", "compensated", 1], ["charge", "failed", 0], ["confirm", "pending", 0]]
      )
      // Only a running saga can be compensated.
      assert.strictEqual(failureTag(yield* Effect.exit(Admin.compensateSaga(id))), "SagaActionConflict")
    })))
})

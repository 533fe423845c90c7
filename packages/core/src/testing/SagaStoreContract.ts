/**
 * The contract every `SagaStore` passes (`MemorySagaStore` in core, `PgSagaStore` in
 * `@tidings/postgres`): run it against your own driver to check that the saga engine can rely on
 * it — compare-and-set on the version, transactions, claims with leases, heartbeats and the
 * recovery query.
 *
 * @example
 * // packages/my-driver/test/MySagaStore.test.ts
 * import { sagaStoreContract } from "@tidings/core/testing"
 * sagaStoreContract("my driver", MySagaStore.make({ ... }))
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Fiber, Layer, Result, type Scope } from "effect"
import { TestClock } from "effect/testing"
import { uuidv7 } from "../internal/uuid.ts"
import { type NewSaga, SagaStore, type Service } from "../SagaStore.ts"

const newSaga = (overrides: Partial<NewSaga> = {}): NewSaga => ({
  id: uuidv7(Date.now()),
  type: "create-order",
  input: { orderId: "o-1", note: "ü \"quoted\" \n", cents: 1250, tags: ["a", "b"], nested: { x: null } },
  steps: ["reserve", "charge", "confirm"],
  ...overrides
})

const claim = (owner: string, ms: number) => ({ owner, lease: Duration.millis(ms) })

/**
 * Options of {@link sagaStoreContract}.
 * @since 0.1.0
 * @category models
 */
export interface SagaStoreContractOptions {
  /**
   * Which clock the store reads. `"live"` (default): its own, such as a database's `now()`; the
   * suite waits real time for leases and deadlines to pass (about 3 seconds in all). `"test"`:
   * Effect's `Clock` (as `MemorySagaStore` does); the suite runs on `TestClock` and moves time
   * with `TestClock.adjust`, waiting for nothing.
   */
  readonly clock?: "live" | "test"
}

/**
 * Registers the contract suite (`describe` / `it` from `@effect/vitest`) for a store built fresh
 * for each test by `makeStore`.
 * @since 0.1.0
 * @category contracts
 */
export const sagaStoreContract = (
  name: string,
  makeStore: Effect.Effect<Service, unknown, Scope.Scope>,
  options: SagaStoreContractOptions = {}
): void => {
  const onTestClock = options.clock === "test"
  const test = onTestClock ? it.effect : it.live
  /** Lets `duration` pass on the store's clock. */
  const passTime = (duration: Duration.Input) => onTestClock ? TestClock.adjust(duration) : Effect.sleep(duration)
  const now = Clock.currentTimeMillis
  const run = <A, E>(body: Effect.Effect<A, E, SagaStore>) =>
    Effect.scoped(Effect.flatMap(makeStore, (store) => Effect.provide(body, Layer.succeed(SagaStore, store))))

  describe(`SagaStore contract: ${name}`, () => {
    test("create and load: the execution and its steps round-trip", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const saga = newSaga({
          deadline: Duration.seconds(60),
          claim: claim("runner-1", 30_000),
          stepUpdates: [{ index: 0, attemptStarted: true }]
        })
        const before = yield* now
        const created = yield* store.create(saga)
        assert.strictEqual(created.id, saga.id)
        assert.strictEqual(created.version, 0)
        assert.strictEqual(created.status, "running")
        const loaded = (yield* store.load(saga.id))!
        assert.deepStrictEqual(loaded.saga.input, saga.input)
        assert.strictEqual(loaded.saga.type, "create-order")
        assert.strictEqual(loaded.saga.status, "running")
        assert.strictEqual(loaded.saga.currentStep, 0)
        assert.strictEqual(loaded.saga.version, 0)
        assert.isNull(loaded.saga.error)
        assert.strictEqual(loaded.saga.claimedBy, "runner-1")
        const deadline = loaded.saga.deadline!.getTime()
        assert.isTrue(deadline >= before + 59_000 && deadline <= (yield* now) + 61_000, `deadline ${deadline}`)
        assert.isTrue(loaded.saga.claimedUntil!.getTime() >= before + 29_000)
        assert.deepStrictEqual(
          loaded.steps.map((s) => [s.index, s.name, s.status, s.result, s.error, s.attempts, s.compensationAttempts]),
          [
            [0, "reserve", "pending", null, null, 1, 0],
            [1, "charge", "pending", null, null, 0, 0],
            [2, "confirm", "pending", null, null, 0, 0]
          ]
        )
        assert.instanceOf(loaded.steps[0]!.startedAt, Date)
        assert.isNull(loaded.steps[1]!.startedAt)
        assert.isNull(loaded.steps[0]!.finishedAt)
        assert.isUndefined(yield* store.load(uuidv7(Date.now())))
        // a second saga with the same id is refused
        assert.strictEqual((yield* Effect.flip(store.create(saga)))._tag, "StoreError")
      })))

    test("list: most recent first, filtered by status and type; a compensation's attempts can be reset", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const type = `list-${uuidv7(Date.now()).slice(-8)}`
        const a = newSaga({ type })
        yield* store.create(a)
        yield* passTime("5 millis")
        const b = newSaga({ type })
        yield* store.create(b)
        yield* passTime("5 millis")
        const other = newSaga({ type: `${type}-other` })
        yield* store.create(other)
        yield* store.update(a.id, 0, {
          status: "failed",
          error: "compensation kept failing",
          steps: [{ index: 0, status: "compensation_failed", compensationStarted: true }]
        })
        assert.deepStrictEqual((yield* store.list({ type, limit: 10 })).map((x) => x.id), [b.id, a.id])
        assert.deepStrictEqual((yield* store.list({ type, limit: 1 })).map((x) => x.id), [b.id])
        assert.deepStrictEqual((yield* store.list({ type, status: "failed", limit: 10 })).map((x) => [x.id, x.error]), [
          [a.id, "compensation kept failing"]
        ])
        assert.deepStrictEqual(
          (yield* store.list({ type: `${type}-other`, status: "running", limit: 10 })).map((x) => x.id),
          [other.id]
        )
        assert.strictEqual(
          (yield* store.list({ status: "running", limit: 100 })).filter((x) => x.type === type).length,
          1
        )
        assert.deepStrictEqual(yield* store.list({ type: "no-such-type", limit: 10 }), [])

        yield* store.update(a.id, 1, { steps: [{ index: 0, compensationStarted: true }] })
        assert.strictEqual((yield* store.load(a.id))!.steps[0]!.compensationAttempts, 2)
        // An operator's retry: the attempts start over (and one may start in the same write).
        yield* store.update(a.id, 2, {
          status: "compensating",
          steps: [{ index: 0, status: "completed", resetCompensationAttempts: true }]
        })
        assert.deepStrictEqual((yield* store.load(a.id))!.steps.map((x) => [x.status, x.compensationAttempts]), [
          ["completed", 0],
          ["pending", 0],
          ["pending", 0]
        ])
        yield* store.update(a.id, 3, {
          steps: [{ index: 0, resetCompensationAttempts: true, compensationStarted: true }]
        })
        assert.strictEqual((yield* store.load(a.id))!.steps[0]!.compensationAttempts, 1)
      })))

    test("create joins the caller's transaction: a rollback leaves nothing", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const rolledBack = newSaga()
        const exit = yield* Effect.result(
          store.withTransaction(Effect.andThen(store.create(rolledBack), Effect.fail("business rule" as const)))
        )
        assert.isTrue(Result.isFailure(exit))
        assert.isUndefined(yield* store.load(rolledBack.id))
        const committed = newSaga()
        const seen = yield* store.withTransaction(Effect.andThen(store.create(committed), store.load(committed.id)))
        assert.strictEqual(seen?.saga.id, committed.id, "visible inside its own transaction")
        assert.strictEqual((yield* store.load(committed.id))?.saga.id, committed.id)
      })))

    test("update is a compare-and-set on the version, with the steps in the same write", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const saga = newSaga({ claim: claim("runner-1", 30_000) })
        yield* store.create(saga)
        yield* passTime("20 millis")
        const updated = yield* store.update(saga.id, 0, {
          currentStep: 1,
          deadline: Duration.seconds(5),
          steps: [
            { index: 0, status: "completed", result: { reservationId: "r-9", lines: [1, 2] }, finished: true },
            { index: 1, attemptStarted: true, error: "first try" }
          ]
        })
        assert.strictEqual(updated.version, 1)
        assert.strictEqual(updated.currentStep, 1)
        assert.isTrue(updated.updatedAt.getTime() > updated.createdAt.getTime())
        assert.strictEqual((yield* Effect.flip(store.update(saga.id, 0, { status: "failed" })))._tag, "SagaConflict")
        assert.strictEqual(
          (yield* Effect.flip(store.update(uuidv7(Date.now()), 0, { status: "failed" })))._tag,
          "SagaNotFound"
        )
        const second = yield* store.update(saga.id, 1, {
          status: "compensating",
          error: "charge failed: card declined",
          deadline: null,
          claim: null,
          steps: [{ index: 1, status: "failed", error: "card declined", finished: true }, {
            index: 0,
            compensationStarted: true
          }]
        })
        assert.strictEqual(second.version, 2)
        const loaded = (yield* store.load(saga.id))!
        assert.strictEqual(loaded.saga.status, "compensating")
        assert.strictEqual(loaded.saga.error, "charge failed: card declined")
        assert.isNull(loaded.saga.deadline)
        assert.isNull(loaded.saga.claimedBy)
        assert.isNull(loaded.saga.claimedUntil)
        const [s0, s1, s2] = loaded.steps
        assert.deepStrictEqual([s0!.status, s0!.result, s0!.compensationAttempts, s0!.attempts], [
          "completed",
          { reservationId: "r-9", lines: [1, 2] },
          1,
          0
        ])
        assert.instanceOf(s0!.finishedAt, Date)
        assert.deepStrictEqual([s1!.status, s1!.error, s1!.attempts], ["failed", "card declined", 1])
        assert.instanceOf(s1!.startedAt, Date)
        assert.strictEqual(s2!.status, "pending")
        // a null result is stored as null; clearing an error
        yield* store.update(saga.id, 2, { steps: [{ index: 2, status: "completed", result: null, error: null }] })
        const last = (yield* store.load(saga.id))!.steps[2]!
        assert.deepStrictEqual([last.status, last.result, last.error], ["completed", null, null])
      })))

    test("concurrent updates from the same version: exactly one wins", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const saga = newSaga()
        yield* store.create(saga)
        const results = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => i),
          (i) =>
            Effect.result(
              store.update(saga.id, 0, { error: `writer ${i}`, steps: [{ index: 0, attemptStarted: true }] })
            ),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(results.filter(Result.isSuccess).length, 1)
        assert.deepStrictEqual(
          results.filter(Result.isFailure).map((r) => r.failure._tag),
          Array(7).fill("SagaConflict")
        )
        const loaded = (yield* store.load(saga.id))!
        assert.strictEqual(loaded.saga.version, 1)
        assert.strictEqual(loaded.steps[0]!.attempts, 1)
      })))

    test("transactions: a failed one rolls its updates back; a lost race is a conflict", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const saga = newSaga()
        yield* store.create(saga)
        const exit = yield* Effect.result(store.withTransaction(Effect.gen(function*() {
          yield* store.update(saga.id, 0, { status: "completed" })
          assert.strictEqual((yield* store.load(saga.id))!.saga.status, "completed", "read your own writes")
          return yield* Effect.fail("rolled back" as const)
        })))
        assert.isTrue(Result.isFailure(exit))
        const after = (yield* store.load(saga.id))!
        assert.deepStrictEqual([after.saga.status, after.saga.version], ["running", 0])
        // A transaction reads version 0, another commits version 1 meanwhile: the first one's write loses.
        // the other writer is a fiber forked before the transaction opened, so it runs outside it
        const go = yield* Deferred.make<void>()
        const other = yield* Effect.forkChild(
          Effect.andThen(Deferred.await(go), store.update(saga.id, 0, { error: "the other writer" }))
        )
        const raced = yield* Effect.result(store.withTransaction(Effect.gen(function*() {
          const seen = (yield* store.load(saga.id))!
          yield* Deferred.succeed(go, undefined)
          yield* Fiber.join(other)
          return yield* store.update(saga.id, seen.saga.version, { error: "too late" })
        })))
        assert.isTrue(Result.isFailure(raced))
        const final = (yield* store.load(saga.id))!
        assert.strictEqual(final.saga.error, "the other writer")
        assert.strictEqual(final.saga.version, 1)
      })))

    test("claim: only an active saga, at the version read, without a live claim; one of many claimants wins", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const held = newSaga({ claim: claim("runner-1", 30_000) })
        yield* store.create(held)
        assert.isUndefined(yield* store.claim(held.id, 0, claim("recovery-1", 5_000)), "a live claim is respected")

        const expiring = newSaga({ claim: claim("runner-2", 150) })
        yield* store.create(expiring)
        yield* passTime("300 millis")
        assert.isUndefined(yield* store.claim(expiring.id, 7, claim("recovery-1", 5_000)), "a stale version loses")
        const winners = yield* Effect.forEach(
          ["recovery-a", "recovery-b", "recovery-c", "recovery-d"],
          (owner) => store.claim(expiring.id, 0, claim(owner, 5_000)),
          { concurrency: "unbounded" }
        )
        const won = winners.filter((w) => w !== undefined)
        assert.strictEqual(won.length, 1)
        assert.strictEqual(won[0]!.version, 1)
        const loaded = (yield* store.load(expiring.id))!
        assert.strictEqual(loaded.saga.claimedBy, won[0]!.claimedBy)
        assert.isTrue(loaded.saga.claimedUntil!.getTime() > (yield* now) + 3_000)

        const unclaimed = newSaga()
        yield* store.create(unclaimed)
        const got = yield* store.claim(unclaimed.id, 0, claim("recovery-1", 5_000))
        assert.strictEqual(got?.claimedBy, "recovery-1")

        const done = newSaga()
        yield* store.create(done)
        yield* store.update(done.id, 0, { status: "completed" })
        assert.isUndefined(yield* store.claim(done.id, 1, claim("recovery-1", 5_000)), "final sagas are not claimed")
      })))

    test("heartbeat renews the owner's claim only", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const saga = newSaga({ claim: claim("runner-1", 300) })
        yield* store.create(saga)
        assert.isFalse(yield* store.heartbeat(saga.id, claim("someone-else", 10_000)))
        yield* passTime("200 millis")
        assert.isTrue(yield* store.heartbeat(saga.id, claim("runner-1", 10_000)))
        yield* passTime("200 millis")
        const loaded = (yield* store.load(saga.id))!
        assert.isTrue(loaded.saga.claimedUntil!.getTime() > (yield* now) + 5_000)
        assert.strictEqual(loaded.saga.version, 0, "a heartbeat does not change the version")
        assert.isUndefined(yield* store.claim(saga.id, 0, claim("recovery", 1_000)), "renewed: not recoverable")
        assert.isFalse(yield* store.heartbeat(uuidv7(Date.now()), claim("runner-1", 1_000)))
      })))

    test("countByStatus counts every saga by its status, transactions included", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        assert.deepStrictEqual(yield* store.countByStatus, {
          running: 0,
          completed: 0,
          compensating: 0,
          compensated: 0,
          failed: 0
        })
        const a = newSaga({})
        const b = newSaga({})
        yield* store.create(a)
        yield* store.create(b)
        yield* store.withTransaction(
          Effect.andThen(store.create(newSaga({})), store.update(a.id, 0, { status: "completed" }))
        )
        yield* store.update(b.id, 0, { status: "compensating" })
        assert.deepStrictEqual(yield* store.countByStatus, {
          running: 1,
          completed: 1,
          compensating: 1,
          compensated: 0,
          failed: 0
        })
      })))

    test("findRecoverable: expired claims, past deadlines and stuck sagas, most overdue first", () =>
      run(Effect.gen(function*() {
        const store = yield* SagaStore
        const stuckAfter = Duration.millis(1600)
        const expired = newSaga({ claim: claim("dead-runner", 100) })
        const overdue = newSaga({ deadline: Duration.millis(800) })
        const stuck = newSaga()
        const live = newSaga({ claim: claim("live-runner", 30_000), deadline: Duration.millis(1) })
        const notYet = newSaga({ deadline: Duration.seconds(30) })
        const finished = newSaga({ deadline: Duration.millis(1) })
        const compensating = newSaga({ deadline: Duration.millis(1) })
        for (const s of [expired, overdue, stuck, live, notYet, finished, compensating]) yield* store.create(s)
        yield* store.update(finished.id, 0, { status: "compensated" })
        yield* store.update(compensating.id, 0, { status: "compensating", deadline: Duration.millis(1200) })
        yield* passTime("300 millis")
        let due = (yield* store.findRecoverable({ stuckAfter, limit: 100 })).map((s) => s.id)
        assert.deepStrictEqual(due, [expired.id])
        yield* passTime("1500 millis")
        due = (yield* store.findRecoverable({ stuckAfter, limit: 100 })).map((s) => s.id)
        assert.deepStrictEqual(due, [expired.id, overdue.id, compensating.id, stuck.id])
        assert.deepStrictEqual(
          yield* store.findRecoverable({ stuckAfter, limit: 100, types: ["other-type"] }),
          [],
          "filtered by type"
        )
        assert.strictEqual(
          (yield* store.findRecoverable({ stuckAfter, limit: 100, types: ["other-type", "create-order"] })).length,
          4
        )
        const limited = yield* store.findRecoverable({ stuckAfter, limit: 2 })
        assert.deepStrictEqual(limited.map((s) => s.id), [expired.id, overdue.id])
        assert.strictEqual(limited[0]!.claimedBy, "dead-runner")
        // a claim takes it off the list until its own lease expires
        yield* store.claim(overdue.id, 0, claim("recovery", 30_000))
        due = (yield* store.findRecoverable({ stuckAfter, limit: 100 })).map((s) => s.id)
        assert.notInclude(due, overdue.id)
      })))
  })
}

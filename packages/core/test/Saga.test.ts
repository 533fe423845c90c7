/**
 * The saga engine on the memory stores, on TestClock: timeouts, retry delays, leases and deadlines
 * pass by moving the clock (`onTestClock`, `TestClock.adjust`), never by waiting.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Layer, Metric, Option, Schedule, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as MemorySagaStore from "../src/MemorySagaStore.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import * as Saga from "../src/Saga.ts"
import * as SagaRecovery from "../src/SagaRecovery.ts"
import * as SagaStore from "../src/SagaStore.ts"
import * as Settings from "../src/Settings.ts"
import {
  Charge,
  clockUntil,
  commandOrder,
  Confirm,
  failureTag,
  localOrder,
  makeScript,
  onTestClock,
  participants,
  pump,
  Refund,
  Release,
  Reserve
} from "./SagaFixtures.ts"

const withStores = <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.provide(body, Layer.mergeAll(Layer.fresh(MemorySagaStore.layer), Layer.fresh(MemoryOutboxStore.layer)))

const order = { orderId: "o-1", sku: "book", cents: 2599 }

const firstError = (exit: Exit.Exit<unknown, unknown>): any =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined

const statuses = (state: Saga.State) => state.steps.map((s) => s.status)

const counter = (m: Metric.Metric<number, Metric.CounterState<number>>, attributes?: Record<string, string>) =>
  Effect.map(Metric.value(attributes === undefined ? m : Metric.withAttributes(m, attributes)), (s) => Number(s.count))

describe("Saga definitions", () => {
  it("a typed builder: results of earlier steps are typed; names are checked", () => {
    const definition = Saga.make("typed", { input: Schema.Struct({ n: Schema.Int }) })
      .step("a", { result: Schema.Struct({ x: Schema.String }), action: () => Effect.succeed({ x: "1" }) })
      .step("b", {
        result: Schema.Number,
        action: (ctx) => Effect.succeed(Number(ctx.results.a.x) + ctx.input.n),
        // @ts-expect-error a later step's result is not available
        compensate: (ctx) => Effect.succeed(ctx.results.b)
      })
    assert.deepStrictEqual(definition.steps.map((s) => [s._tag, s.name]), [["Local", "a"], ["Local", "b"]])
    assert.throws(
      () => definition.step("a", { action: () => Effect.void }),
      Saga.InvalidSagaDefinition,
      /duplicate step name/
    )
    assert.throws(() => Saga.make("bad name!", { input: Schema.String }), Saga.InvalidSagaDefinition, /saga name/)
    assert.throws(
      () => definition.step("c", { action: () => Effect.void, timeout: 0 }),
      Saga.InvalidSagaDefinition,
      /c\.timeout: must be a finite positive duration/
    )
    assert.throws(
      () =>
        definition.command("d", {
          send: () => Reserve.make({ aggregateId: "o", payload: { orderId: "o", sku: "s" } }),
          compensation: { timeout: -5 }
        }),
      Saga.InvalidSagaDefinition,
      /d\.compensation\.timeout/
    )
    assert.throws(
      () => Saga.registry(definition, Saga.make("typed", { input: Schema.String })),
      Saga.InvalidSagaDefinition,
      /two definitions named "typed"/
    )
  })
})

describe("Saga.run (memory stores)", () => {
  it.effect("runs the steps in order and persists each outcome; results are stored encoded and decoded for later steps", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript()
      const startedBefore = yield* counter(Saga.metrics.started)
      const completedBefore = yield* counter(Saga.metrics.finished, { status: "completed" })
      const done = yield* Saga.run(localOrder(script), order)
      assert.deepStrictEqual(script.log, ["reserve", "charge", "confirm"])
      assert.deepStrictEqual(done.results.charge, { paymentId: "pay-res-o-1-2030" })
      assert.instanceOf(done.results.reserve.until, Date)
      const state = yield* Saga.get(done.id)
      assert.strictEqual(state.status, "completed")
      assert.strictEqual(state.type, "local-order")
      assert.deepStrictEqual(statuses(state), ["completed", "completed", "completed"])
      assert.deepStrictEqual(
        state.steps[0]!.result,
        { reservationId: "res-o-1", until: "2030-01-01T00:00:00.000Z" },
        "stored encoded"
      )
      assert.isNull(state.steps[2]!.result)
      assert.deepStrictEqual(state.input, order)
      assert.isNull(state.claimedBy, "the claim is released at the end")
      assert.deepStrictEqual(state.steps.map((s) => s.attempts), [1, 1, 1])
      assert.strictEqual((yield* counter(Saga.metrics.started)) - startedBefore, 1)
      assert.strictEqual((yield* counter(Saga.metrics.finished, { status: "completed" })) - completedBefore, 1)
      const durations = yield* Metric.value(
        Metric.withAttributes(Saga.metrics.stepDuration, { saga: "local-order", step: "charge" })
      )
      assert.isAtLeast(durations.count, 1)
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.get("no-such-saga"))), "SagaNotFound")
    })))

  it.effect("a failing step compensates the completed steps in reverse order, each given its result", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity } })
      const before = yield* counter(Saga.metrics.compensations, { outcome: "compensated" })
      const exit = yield* Effect.exit(
        Saga.run(localOrder(script), order, { id: "0193b4a2-7c1e-7000-8000-000000000001" })
      )
      const error = firstError(exit)
      assert.strictEqual(error?._tag, "SagaStepFailed")
      assert.strictEqual(error.step, "confirm")
      assert.match(error.message, /Declined/)
      assert.isFalse(error.isRetryable, "Declined is not retryable")
      assert.deepStrictEqual(script.log, [
        "reserve",
        "charge",
        "confirm",
        "undo:charge",
        "refunded pay-res-o-1-2030",
        "undo:reserve",
        "released res-o-1 until 2030-01-01T00:00:00.000Z"
      ])
      const state = yield* Saga.get("0193b4a2-7c1e-7000-8000-000000000001")
      assert.strictEqual(state.status, "compensated")
      assert.deepStrictEqual(statuses(state), ["compensated", "compensated", "failed"])
      assert.match(state.error!, /^step confirm failed: Declined/)
      assert.deepStrictEqual(state.steps.map((s) => s.compensationAttempts), [1, 1, 0])
      assert.strictEqual((yield* counter(Saga.metrics.compensations, { outcome: "compensated" })) - before, 2)
    })))

  it.effect("a step is retried by its schedule while its error is retryable", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { charge: 2 } })
      const { exit: ran, took } = yield* onTestClock(Saga.run(localOrder(script), order))
      const done = yield* ran
      assert.strictEqual(took, 20, "two retries, 10 ms apart")
      assert.deepStrictEqual(script.log, ["reserve", "charge", "charge", "charge", "confirm"])
      assert.deepStrictEqual((yield* Saga.get(done.id)).steps.map((s) => s.attempts), [1, 3, 1])
      // out of retries: the step fails and the saga compensates
      const exhausted = makeScript({ failAction: { charge: 3 } })
      const { exit } = yield* onTestClock(Saga.run(localOrder(exhausted), order))
      assert.strictEqual(firstError(exit)?._tag, "SagaStepFailed")
      assert.deepStrictEqual(exhausted.log.filter((k) => k === "charge").length, 3)
      // a non-retryable error is not retried
      const declined = makeScript({ failAction: { reserve: 1 } })
      const reserveOnce = localOrder(declined)
      assert.strictEqual(firstError(yield* Effect.exit(Saga.run(reserveOnce, order)))?._tag, "SagaStepFailed")
      assert.deepStrictEqual(declined.log, ["reserve"])
    })))

  it.effect("a step timeout compensates the completed steps", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ slowAction: { charge: "5 seconds" } })
      const { exit, took } = yield* onTestClock(
        Saga.run(localOrder(script, { chargeTimeout: "100 millis" }), order, {
          id: "0193b4a2-7c1e-7000-8000-000000000002"
        })
      )
      const error = firstError(exit)
      assert.strictEqual(error?._tag, "SagaStepTimeout")
      assert.strictEqual(error.timeoutMs, 100)
      assert.isTrue(error.isRetryable)
      assert.strictEqual(took, 320, "3 attempts of 100 ms and 2 pauses of 10 ms, not 5 s")
      assert.deepStrictEqual(script.log.filter((k) => k === "charge").length, 3, "each attempt timed out, then retried")
      const state = yield* Saga.get("0193b4a2-7c1e-7000-8000-000000000002")
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.match(state.steps[1]!.error!, /timed out after 100/)
      assert.include(script.log, "undo:reserve")
      assert.notInclude(script.log, "undo:charge", "the timed-out step did not complete, so it is not compensated")
    })))

  it.effect("a compensation that keeps failing is retried by its schedule, then the saga is failed with the step and error recorded", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity }, failCompensation: { charge: Infinity } })
      const failedBefore = yield* counter(Saga.metrics.finished, { status: "failed" })
      const { exit } = yield* onTestClock(
        Saga.run(localOrder(script), order, { id: "0193b4a2-7c1e-7000-8000-000000000003" })
      )
      const error = firstError(exit)
      assert.strictEqual(error?._tag, "SagaCompensationFailed")
      assert.strictEqual(error.step, "charge")
      assert.match(error.message, /compensation of charge failed after 3 attempts: StoreError: gateway down/)
      assert.match(error.reason, /step confirm failed/)
      assert.strictEqual(script.log.filter((k) => k === "undo:charge").length, 3)
      assert.notInclude(script.log, "undo:reserve", "compensation stops at the step that needs a person")
      const state = yield* Saga.get("0193b4a2-7c1e-7000-8000-000000000003")
      assert.strictEqual(state.status, "failed")
      assert.deepStrictEqual(statuses(state), ["completed", "compensation_failed", "failed"])
      assert.strictEqual(state.steps[1]!.compensationAttempts, 3)
      assert.match(state.steps[1]!.error!, /gateway down/)
      assert.match(state.error!, /compensation of charge failed/)
      assert.isNull(state.claimedBy)
      assert.strictEqual((yield* counter(Saga.metrics.finished, { status: "failed" })) - failedBefore, 1)
    })))

  it.effect("a compensation that times out is retried and may then succeed", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({
        failAction: { confirm: Infinity },
        slowCompensation: { charge: "1 second" },
        failCompensation: { reserve: 1 }
      })
      // undo:charge sleeps 1 s and its timeout is 300 ms: every attempt times out, and a timeout is retried
      const { exit, took } = yield* onTestClock(Saga.run(localOrder(script), order))
      assert.strictEqual(firstError(exit)?._tag, "SagaCompensationFailed")
      assert.match(firstError(exit).message, /compensation of charge failed after 3 attempts: timed out after 300/)
      assert.strictEqual(script.log.filter((k) => k === "undo:charge").length, 3)
      assert.strictEqual(took, 920, "3 attempts of 300 ms and 2 pauses of 10 ms")
      const quick = makeScript({ failAction: { confirm: Infinity }, failCompensation: { reserve: 1, charge: 2 } })
      assert.strictEqual(failureTag((yield* onTestClock(Saga.run(localOrder(quick), order))).exit), "SagaStepFailed")
      assert.deepStrictEqual(quick.log.filter((k) => k.startsWith("undo:")), [
        "undo:charge",
        "undo:charge",
        "undo:charge",
        "undo:reserve",
        "undo:reserve"
      ])
    })))

  it.effect("the caller's interruption during compensation does not stop it", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity }, slowCompensation: { reserve: "300 millis" } })
      const id = "0193b4a2-7c1e-7000-8000-000000000004"
      const fiber = yield* Effect.forkChild(Saga.run(localOrder(script), order, { id }))
      yield* script.reached("undo:reserve")
      const interrupting = yield* Effect.forkChild(Fiber.interrupt(fiber))
      yield* TestClock.adjust("200 millis")
      assert.isUndefined(interrupting.pollUnsafe(), "the interruption waits for the compensation under way")
      assert.notInclude(script.log, "released res-o-1 until 2030-01-01T00:00:00.000Z")
      yield* TestClock.adjust("100 millis")
      yield* Fiber.join(interrupting)
      // the compensation was neither stopped nor left behind: it had finished when the interruption returned
      assert.include(script.log, "released res-o-1 until 2030-01-01T00:00:00.000Z")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause))
      assert.strictEqual((yield* Saga.get(id)).status, "compensated")
    })))

  it.effect("interrupting the caller during a step stops that step and compensates the completed ones", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ slowAction: { charge: "10 seconds" } })
      const id = "0193b4a2-7c1e-7000-8000-000000000005"
      const fiber = yield* Effect.forkChild(Saga.run(localOrder(script), order, { id }))
      yield* script.reached("charge")
      yield* Fiber.interrupt(fiber)
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.strictEqual(state.steps[1]!.error, "interrupted by the caller")
      assert.deepStrictEqual(script.log, [
        "reserve",
        "charge",
        "undo:reserve",
        "released res-o-1 until 2030-01-01T00:00:00.000Z"
      ])
    })))

  it.effect("what is retried is Errors.isRetryable's rule, in actions and compensations alike", () =>
    withStores(Effect.gen(function*() {
      const tries: Array<string> = []
      const spaced = Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 2 }))
      const failing = (key: string, error: unknown) => Effect.suspend(() => (tries.push(key), Effect.fail(error)))
      const definition = (error: unknown) =>
        Saga.make("retry-rule", { input: Schema.Null })
          .step("a", {
            action: () => Effect.void,
            compensate: () => failing("undo:a", error),
            compensation: { retry: spaced }
          })
          .step("b", { action: () => failing("b", error), retry: spaced })
      // an error that says nothing (a plain Error) is permanent: one attempt each, and the saga needs a person
      const plain = yield* onTestClock(Saga.run(definition(new Error("boom")), null))
      assert.strictEqual(failureTag(plain.exit), "SagaCompensationFailed")
      assert.deepStrictEqual(tries.splice(0), ["b", "undo:a"])
      assert.strictEqual(plain.took, 0)
      // an error that says it is transient (`retryable: true`) is retried by the schedules
      const transient = yield* onTestClock(Saga.run(definition({ _tag: "Busy", retryable: true }), null))
      assert.strictEqual(failureTag(transient.exit), "SagaCompensationFailed")
      assert.deepStrictEqual(tries.splice(0), ["b", "b", "b", "undo:a", "undo:a", "undo:a"])
      assert.strictEqual(transient.took, 40)
      const stepFailed = yield* Effect.flip(
        Saga.run(
          Saga.make("once", { input: Schema.Null }).step("x", { action: () => Effect.fail({ retryable: true }) }),
          null
        )
      )
      assert.isTrue(
        stepFailed._tag === "SagaStepFailed" && stepFailed.isRetryable,
        "SagaStepFailed is as retryable as its cause"
      )
    })))

  it.effect("a saga without steps completes at once", () =>
    withStores(Effect.gen(function*() {
      const done = yield* Saga.run(Saga.make("nothing", { input: Schema.Null }), null)
      const state = yield* Saga.get(done.id)
      assert.deepStrictEqual([state.status, state.steps.length, state.claimedBy], ["completed", 0, null])
    })))

  it.effect("invalid input and the wrong engine are typed errors that write nothing", () =>
    withStores(Effect.gen(function*() {
      const exit = yield* Effect.exit(Saga.run(localOrder(makeScript()), { orderId: "o", sku: "s", cents: 1.5 }))
      assert.strictEqual(failureTag(exit), "InvalidSagaInput")
      assert.strictEqual(
        failureTag(yield* Effect.exit(Saga.run(localOrder(makeScript()), order, { id: "order-1" }))),
        "InvalidSagaInput",
        "ids are UUIDs"
      )
      const mixed = commandOrder() as unknown as Saga.SagaDefinition<typeof order, {}, never, "local">
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.run(mixed, order))), "InvalidSagaDefinition")
      const local = localOrder(makeScript()) as unknown as Saga.SagaDefinition<typeof order, {}, never, "command">
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.start(local, order))), "InvalidSagaDefinition")
      // bad options: one InvalidConfig naming every wrong one
      const badOptions = yield* Effect.flip(
        Saga.run(localOrder(makeScript()), order, { lease: 0, maxCompensationAttempts: 0.5 })
      )
      assert.strictEqual(badOptions._tag, "InvalidConfig")
      assert.deepStrictEqual(badOptions._tag === "InvalidConfig" ? badOptions.issues?.map((i) => i.path) : [], [
        "lease",
        "maxCompensationAttempts"
      ])
      const store = yield* SagaStore.SagaStore
      assert.deepStrictEqual(yield* store.findRecoverable({ stuckAfter: Duration.zero, limit: 10 }), [])
      assert.deepStrictEqual(yield* store.countByStatus, {
        running: 0,
        completed: 0,
        compensating: 0,
        compensated: 0,
        failed: 0
      }, "nothing written")
    })))
})

describe("Saga recovery (memory stores)", () => {
  /** A saga whose runner died after `completed` steps: a claim that has expired, the next step in flight. */
  const orphan = (id: string, completed: number) =>
    Effect.gen(function*() {
      const store = yield* SagaStore.SagaStore
      const results = [{ reservationId: "res-o-1", until: "2030-01-01T00:00:00.000Z" }, { paymentId: "pay-1" }]
      yield* store.create({
        id,
        type: "local-order",
        input: order,
        steps: ["reserve", "charge", "confirm"],
        claim: { owner: "dead", lease: Duration.millis(50) }
      })
      yield* store.update(id, 0, {
        currentStep: completed,
        steps: [
          ...results.slice(0, completed).map((result, index) => ({
            index,
            status: "completed" as const,
            result,
            attemptStarted: true,
            finished: true
          })),
          { index: completed, attemptStarted: true }
        ]
      })
      yield* TestClock.adjust("100 millis") // the dead runner's lease expires
    })

  it.effect("a saga whose runner died is compensated from what the store recorded, once, by one of several workers", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript()
      const registry = Saga.registry(localOrder(script))
      const id = "0193b4a2-7c1e-7000-8000-000000000010"
      yield* orphan(id, 2)
      const recoveriesBefore = yield* counter(Saga.metrics.recoveries)
      const reports = yield* Effect.forEach(
        ["w1", "w2", "w3"],
        (owner) => Saga.recoverOnce({ registry, owner, stuckAfter: "1 minute" }),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(reports.flatMap((r) => r.recovered.map((x) => [x.id, x.outcome])), [[id, "compensated"]])
      assert.deepStrictEqual(script.log, [
        "undo:charge",
        "refunded pay-1",
        "undo:reserve",
        "released res-o-1 until 2030-01-01T00:00:00.000Z"
      ])
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], [
        "compensated",
        "compensated",
        "compensated",
        "failed"
      ])
      assert.match(state.error!, /step confirm was interrupted: its executor dead stopped/)
      assert.strictEqual((yield* counter(Saga.metrics.recoveries)) - recoveriesBefore, 1)
      assert.deepStrictEqual((yield* Saga.recoverOnce({ registry })).recovered, [], "nothing left to do")
      // each recovery round refreshes the sagas-by-status gauge
      const gauge = (status: string) => Metric.value(Metric.withAttributes(Saga.metrics.byStatus, { status }))
      assert.strictEqual((yield* gauge("compensated")).value, 1)
      assert.strictEqual((yield* gauge("running")).value, 0)
    })))

  it.effect("recovery of a saga of an unknown type is left to instances that know it; a stuck compensation ends failed", () =>
    withStores(Effect.gen(function*() {
      const id = "0193b4a2-7c1e-7000-8000-000000000011"
      yield* orphan(id, 1)
      const other = Saga.registry(Saga.make("other", { input: Schema.String }))
      assert.deepStrictEqual((yield* Saga.recoverOnce({ registry: other })).recovered, [])
      // the reserve compensation has already been attempted 3 times (crashes): one more is the limit
      const store = yield* SagaStore.SagaStore
      const seen = (yield* store.load(id))!
      yield* store.update(id, seen.saga.version, {
        status: "compensating",
        claim: { owner: "dead", lease: Duration.millis(10) },
        steps: [0, 1, 2].map(() => ({ index: 0, compensationStarted: true }))
      })
      yield* TestClock.adjust("50 millis")
      const script = makeScript({ failCompensation: { reserve: Infinity } })
      const report = yield* Effect.flatten(Effect.map(
        onTestClock(Saga.recoverOnce({ registry: Saga.registry(localOrder(script)), maxCompensationAttempts: 4 })),
        ({ exit }) => exit
      ))
      assert.deepStrictEqual(report.recovered.map((r) => r.outcome), ["failed"])
      assert.deepStrictEqual(script.log, ["undo:reserve"], "one attempt left of four")
      const state = yield* Saga.get(id)
      assert.strictEqual(state.status, "failed")
      assert.strictEqual(state.steps[0]!.status, "compensation_failed")
      assert.match(state.error!, /failed 4 times \(the most allowed\)/)
    })))

  it.effect("the recovery layer runs rounds until it is closed; bad settings are InvalidConfig", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript()
      const registry = Saga.registry(localOrder(script))
      const id = "0193b4a2-7c1e-7000-8000-000000000012"
      const later = "0193b4a2-7c1e-7000-8000-000000000013"
      const recoveriesBefore = yield* counter(Saga.metrics.recoveries)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(Saga.recovery({ registry, interval: "20 millis" }))
        // the orphan's lease expires only after the first rounds: a later round recovers it
        yield* orphan(id, 1)
        yield* clockUntil(
          Effect.map(Saga.get(id), (s) => s.status === "compensated"),
          "the orphan recovered by a later round"
        )
      }))
      assert.deepStrictEqual(script.log, ["undo:reserve", "released res-o-1 until 2030-01-01T00:00:00.000Z"])
      // closed: no more rounds
      yield* orphan(later, 1)
      yield* TestClock.adjust("1 minute")
      assert.strictEqual((yield* Saga.get(later)).status, "running")
      assert.strictEqual((yield* counter(Saga.metrics.recoveries)) - recoveriesBefore, 1)
      const bad = yield* Effect.exit(
        Layer.build(Saga.recovery({ registry: Saga.registry(), batchSize: 0 })).pipe(Effect.scoped)
      )
      assert.strictEqual(failureTag(bad), "InvalidConfig")
      // every wrong setting at once, by its name (SagaRecovery.ConfigSchema, as Settings decodes it)
      const worse = yield* Effect.flip(
        Saga.recoverOnce({ registry: Saga.registry(), interval: -1, batchSize: 1.5, owner: "" })
      )
      assert.deepStrictEqual(worse._tag === "InvalidConfig" ? worse.issues?.map((i) => i.path) : worse._tag, [
        "interval",
        "batchSize",
        "owner"
      ])
      const defaults = yield* Settings.decode(SagaRecovery.ConfigSchema, {})
      assert.deepStrictEqual(
        [
          Duration.toMillis(defaults.interval),
          Duration.toMillis(defaults.stuckAfter),
          Duration.toMillis(defaults.lease),
          defaults.batchSize,
          defaults.maxCompensationAttempts
        ],
        [1_000, 300_000, 30_000, 20, 10]
      )
    })))
})

describe("Saga.start and replies (memory stores)", () => {
  const registry = Saga.registry(commandOrder())

  // (That a rolled-back caller's transaction leaves no saga either is shown on Postgres: the memory
  // saga store's transactions are its own.)
  it.effect("start writes the saga and its first command; a rolled-back caller's transaction sends no command", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const exit = yield* Effect.exit(
        outbox.withTransaction(Effect.andThen(Saga.start(commandOrder(), order), Effect.fail("business rule" as const)))
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual((yield* outbox.stats).pending, 0)
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, state.currentStep, state.steps[0]!.attempts], ["running", 0, 1])
      const [command] = yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })
      assert.strictEqual(command!.message.type, Reserve.type)
      assert.deepStrictEqual(command!.message.payload, { orderId: "o-1", sku: "book" })
      const parsed = Option.getOrThrow(Saga.commandOf(command!.message))
      assert.deepStrictEqual([
        parsed.sagaId,
        parsed.sagaType,
        parsed.step,
        parsed.stepName,
        parsed.kind,
        parsed.attempt
      ], [id, "command-order", 0, "reserve", "action", 1])
      assert.strictEqual(parsed.idempotencyKey, `${id}/reserve`)
      assert.isTrue(Option.isNone(Saga.commandOf({ ...command!.message, headers: {} })))
    })))

  it.effect("replies advance the saga to completion; duplicates are ignored", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes, seen } = yield* pump(registry, participants())
      assert.deepStrictEqual(outcomes, ["advanced", "advanced", "completed"])
      assert.deepStrictEqual(seen.map((m) => m.type), [
        Reserve.type,
        "tidings.saga.reply",
        Charge.type,
        "tidings.saga.reply",
        Confirm.type,
        "tidings.saga.reply"
      ])
      assert.deepStrictEqual(
        seen[2]!.payload,
        { reservationId: "res-o-1", cents: 2599 },
        "the charge is built from the reserve's result"
      )
      assert.deepStrictEqual(seen[4]!.payload, { orderId: "o-1", paymentId: "pay-res-o-1" })
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["completed", "completed", "completed", "completed"])
      assert.deepStrictEqual(state.steps[1]!.result, { paymentId: "pay-res-o-1" })
      // the same replies again change nothing
      for (const reply of seen.filter((m) => m.type === "tidings.saga.reply")) {
        assert.strictEqual(yield* Saga.handleReply(registry, reply), "ignored")
      }
      assert.strictEqual((yield* Saga.get(id)).version, state.version)
      assert.strictEqual(yield* Saga.handleReply(registry, seen[0]!), "ignored", "not a reply")
    })))

  it.effect("a failing participant: the completed steps are compensated by commands, in reverse", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes, seen } = yield* pump(registry, participants({ declineCharge: true }))
      assert.deepStrictEqual(outcomes, ["advanced", "compensating", "compensated"])
      assert.deepStrictEqual(seen.filter((m) => m.type !== "tidings.saga.reply").map((m) => m.type), [
        Reserve.type,
        Charge.type,
        Release.type
      ])
      const release = Option.getOrThrow(Saga.commandOf(seen.find((m) => m.type === Release.type)!))
      assert.deepStrictEqual([release.kind, release.stepName, release.idempotencyKey], [
        "compensation",
        "reserve",
        `${id}/reserve/compensation`
      ])
      assert.deepStrictEqual(seen.find((m) => m.type === Release.type)!.payload, { reservationId: "res-o-1" })
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.strictEqual(state.error, "step charge failed: card declined")
    })))

  it.effect("a failed compensation is resent by recovery after its retry delay, then the saga is failed", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const definition = commandOrder({ name: "refunds" })
      const refunds = Saga.registry(definition)
      const id = yield* outbox.withTransaction(Saga.start(definition, order))
      const silentConfirm = participants({ failRefunds: 10, silent: [Confirm.type] })
      let result = yield* pump(refunds, silentConfirm)
      assert.deepStrictEqual(result.outcomes, ["advanced", "advanced"])
      // confirm never answers: a reply that does not come makes the saga stuck
      yield* TestClock.adjust("60 millis")
      const first = yield* Saga.recoverOnce({ registry: refunds, stuckAfter: "50 millis" })
      assert.deepStrictEqual(first.recovered.map((r) => r.outcome), ["compensating"])
      assert.match((yield* Saga.get(id)).error!, /step confirm failed: no reply \(stuck\)/)
      const rounds: Array<string> = []
      for (let i = 0; i < 10 && (yield* Saga.get(id)).status === "compensating"; i++) {
        result = yield* pump(refunds, silentConfirm)
        rounds.push(...result.outcomes)
        yield* TestClock.adjust("30 millis") // past the retry delay (10 ms)
        rounds.push(
          ...(yield* Saga.recoverOnce({ registry: refunds, stuckAfter: "50 millis" })).recovered.map((r) =>
            `recovered:${r.outcome}`
          )
        )
      }
      // refund: sent, failed → retry in 10 ms → resent (2nd) → failed → resent (3rd) → failed: schedule exhausted
      assert.deepStrictEqual(rounds, [
        "retrying",
        "recovered:compensating",
        "retrying",
        "recovered:compensating",
        "failed"
      ])
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], [
        "failed",
        "completed",
        "compensation_failed",
        "failed"
      ])
      assert.strictEqual(state.steps[1]!.compensationAttempts, 3)
      assert.match(state.error!, /compensation of charge failed after 3 attempts: refund gateway down/)
    })))

  it.effect("a step without a reply within its timeout is compensated; a success that comes later is undone too", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const definition = commandOrder({ name: "slow-charge", chargeTimeout: "50 millis" })
      const slow = Saga.registry(definition)
      const id = yield* outbox.withTransaction(Saga.start(definition, order))
      const { seen } = yield* pump(slow, participants({ silent: [Charge.type] }))
      const charge = Option.getOrThrow(Saga.commandOf(seen.find((m) => m.type === Charge.type)!))
      const early = yield* Saga.recoverOnce({ registry: slow })
      assert.deepStrictEqual(early.recovered, [], "not overdue yet")
      yield* TestClock.adjust("80 millis")
      const report = yield* Saga.recoverOnce({ registry: slow })
      assert.deepStrictEqual(report.recovered.map((r) => r.outcome), ["compensating"])
      const after = yield* pump(slow, participants())
      assert.deepStrictEqual(after.outcomes, ["compensated"])
      let state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.match(state.steps[1]!.error!, /timed out: no reply within 50/)
      // the payment service answers at last: the charge happened, so it is refunded
      yield* outbox.withTransaction(Saga.reply(charge, Saga.completed({ paymentId: "pay-late" })))
      const late = yield* pump(slow, participants())
      assert.deepStrictEqual(late.outcomes, ["late", "late"])
      assert.deepStrictEqual(late.seen.filter((m) => m.type === Refund.type).map((m) => m.payload), [{
        paymentId: "pay-late"
      }])
      state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], [
        "compensated",
        "compensated",
        "compensated",
        "pending"
      ])
    })))

  it.effect("a reply whose result does not match its schema fails the step", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes } = yield* pump(registry, (command) =>
        command.message.type === Reserve.type ? Saga.completed({ wrong: 1 }) : Saga.completed())
      assert.deepStrictEqual(outcomes, ["compensated"])
      const state = yield* Saga.get(id)
      assert.match(state.steps[0]!.error!, /does not match its schema/)
      const unknown = yield* Effect.exit(Saga.handleReply(Saga.registry(), yield* makeReply(id)))
      assert.strictEqual(failureTag(unknown), "InvalidSagaDefinition")
    })))

  it.effect("handleReply takes any delivery with an id, type, payload and headers; malformed replies and unknown sagas are ignored", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const delivery = (payload: unknown): Saga.Received => ({
        id: "d-1",
        type: Saga.ReplyEvent.type,
        payload,
        headers: { "x-broker": 1 }
      })
      const reply = {
        sagaId: id,
        sagaType: "command-order",
        step: 0,
        stepName: "reserve",
        kind: "action",
        attempt: 1,
        outcome: "completed",
        result: { reservationId: "r-7" }
      }
      assert.strictEqual(
        yield* Saga.handleReply(registry, delivery({ ...reply, step: -1 })),
        "ignored",
        "does not decode"
      )
      assert.strictEqual(
        yield* Saga.handleReply(registry, delivery({ ...reply, sagaId: "0193b4a2-7c1e-7000-8000-0000000000ff" })),
        "ignored",
        "no such saga"
      )
      assert.strictEqual(
        yield* Saga.handleReply(registry, delivery({ ...reply, stepName: "charge" })),
        "ignored",
        "the step's name does not match"
      )
      assert.strictEqual((yield* Saga.get(id)).version, 0, "nothing changed")
      assert.strictEqual(yield* Saga.handleReply(registry, delivery(reply)), "advanced")
      assert.deepStrictEqual((yield* Saga.get(id)).steps[0]!.result, { reservationId: "r-7" })
    })))

  const makeReply = (sagaId: string) =>
    Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const message = yield* outbox.withTransaction(Saga.reply(
        {
          sagaId,
          sagaType: "command-order",
          step: 0,
          stepName: "reserve",
          kind: "action",
          attempt: 1,
          idempotencyKey: "",
          message: undefined as never
        },
        Saga.completed()
      ))
      return message
    })

  it.effect("concurrent handling of the same reply advances the saga once", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })
      const reply = yield* outbox.withTransaction(Saga.reply(
        {
          sagaId: id,
          sagaType: "command-order",
          step: 0,
          stepName: "reserve",
          kind: "action",
          attempt: 1,
          idempotencyKey: "",
          message: undefined as never
        },
        Saga.completed({ reservationId: "r-1" })
      ))
      const gate = yield* Deferred.make<void>()
      const handlers = yield* Effect.forEach(
        Array.from({ length: 6 }),
        () => Effect.andThen(Deferred.await(gate), Saga.handleReply(registry, reply)),
        { concurrency: "unbounded" }
      ).pipe(Effect.forkChild)
      yield* Deferred.succeed(gate, undefined)
      yield* TestClock.adjust("1 minute") // the losers' conflict retries wait on the clock
      const outcomes = yield* Fiber.join(handlers)
      assert.deepStrictEqual([...outcomes].sort(), ["advanced", "ignored", "ignored", "ignored", "ignored", "ignored"])
      const charges = (yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })).filter((c) =>
        c.message.type === Charge.type
      )
      assert.strictEqual(charges.length, 1, "one charge command")
      assert.strictEqual((yield* Saga.get(id)).currentStep, 1)
    })))
})

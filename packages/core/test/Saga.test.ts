import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Layer, Metric, Option, Schema } from "effect"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import * as Saga from "../src/Saga.ts"
import * as SagaStore from "../src/SagaStore.ts"
import { eventually, failureTag } from "@tidings/core/testing"
import { Charge, commandOrder, Confirm, localOrder, makeScript, participants, pump, Refund, Release, Reserve } from "./SagaFixtures.ts"

const withStores = <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.provide(body, Layer.mergeAll(Layer.fresh(SagaStore.layerMemory), Layer.fresh(MemoryOutboxStore.layer)))

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
    assert.throws(() => definition.step("a", { action: () => Effect.void }), /duplicate step name/)
    assert.throws(() => Saga.make("bad name!", { input: Schema.String }), /saga name/)
    assert.throws(() => definition.step("c", { action: () => Effect.void, timeout: 0 }), /positive duration/)
  })
})

describe("Saga.run (memory stores)", () => {
  it.live("runs the steps in order and persists each outcome; results are stored encoded and decoded for later steps", () =>
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
      assert.deepStrictEqual(state.steps[0]!.result, { reservationId: "res-o-1", until: "2030-01-01T00:00:00.000Z" }, "stored encoded")
      assert.isNull(state.steps[2]!.result)
      assert.deepStrictEqual(state.input, order)
      assert.isNull(state.claimedBy, "the claim is released at the end")
      assert.deepStrictEqual(state.steps.map((s) => s.attempts), [1, 1, 1])
      assert.strictEqual((yield* counter(Saga.metrics.started)) - startedBefore, 1)
      assert.strictEqual((yield* counter(Saga.metrics.finished, { status: "completed" })) - completedBefore, 1)
      const durations = yield* Metric.value(Metric.withAttributes(Saga.metrics.stepDuration, { saga: "local-order", step: "charge" }))
      assert.isAtLeast(durations.count, 1)
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.get("no-such-saga"))), "SagaNotFound")
    })))

  it.live("a failing step compensates the completed steps in reverse order, each given its result", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity } })
      const before = yield* counter(Saga.metrics.compensations, { outcome: "compensated" })
      const exit = yield* Effect.exit(Saga.run(localOrder(script), order, { id: "0193b4a2-7c1e-7000-8000-000000000001" }))
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

  it.live("a step is retried by its schedule while its error is retryable", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { charge: 2 } })
      const done = yield* Saga.run(localOrder(script), order)
      assert.deepStrictEqual(script.log, ["reserve", "charge", "charge", "charge", "confirm"])
      assert.deepStrictEqual((yield* Saga.get(done.id)).steps.map((s) => s.attempts), [1, 3, 1])
      // out of retries: the step fails and the saga compensates
      const exhausted = makeScript({ failAction: { charge: 3 } })
      const exit = yield* Effect.exit(Saga.run(localOrder(exhausted), order))
      assert.strictEqual(firstError(exit)?._tag, "SagaStepFailed")
      assert.deepStrictEqual(exhausted.log.filter((k) => k === "charge").length, 3)
      // a non-retryable error is not retried
      const declined = makeScript({ failAction: { reserve: 1 } })
      const reserveOnce = localOrder(declined)
      assert.strictEqual(firstError(yield* Effect.exit(Saga.run(reserveOnce, order)))?._tag, "SagaStepFailed")
      assert.deepStrictEqual(declined.log, ["reserve"])
    })))

  it.live("a step timeout compensates the completed steps", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ slowAction: { charge: "5 seconds" } })
      const started = Date.now()
      const exit = yield* Effect.exit(Saga.run(localOrder(script, { chargeTimeout: "100 millis" }), order, { id: "0193b4a2-7c1e-7000-8000-000000000002" }))
      const elapsed = Date.now() - started
      const error = firstError(exit)
      assert.strictEqual(error?._tag, "SagaStepTimeout")
      assert.strictEqual(error.timeoutMs, 100)
      assert.isTrue(error.isRetryable)
      assert.isBelow(elapsed, 2000, "3 attempts of 100 ms, not 5 s")
      assert.deepStrictEqual(script.log.filter((k) => k === "charge").length, 3, "each attempt timed out, then retried")
      const state = yield* Saga.get("0193b4a2-7c1e-7000-8000-000000000002")
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.match(state.steps[1]!.error!, /timed out after 100/)
      assert.include(script.log, "undo:reserve")
      assert.notInclude(script.log, "undo:charge", "the timed-out step did not complete, so it is not compensated")
    })))

  it.live("a compensation that keeps failing is retried by its schedule, then the saga is failed with the step and error recorded", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity }, failCompensation: { charge: Infinity } })
      const failedBefore = yield* counter(Saga.metrics.finished, { status: "failed" })
      const exit = yield* Effect.exit(Saga.run(localOrder(script), order, { id: "0193b4a2-7c1e-7000-8000-000000000003" }))
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

  it.live("a compensation that times out is retried and may then succeed", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity }, slowCompensation: { charge: "1 second" }, failCompensation: { reserve: 1 } })
      // undo:charge sleeps 1 s and its timeout is 300 ms: every attempt times out
      const exit = yield* Effect.exit(Saga.run(localOrder(script), order))
      assert.strictEqual(firstError(exit)?._tag, "SagaCompensationFailed")
      assert.match(firstError(exit).message, /timed out after 300/)
      const quick = makeScript({ failAction: { confirm: Infinity }, failCompensation: { reserve: 1, charge: 2 } })
      yield* Effect.exit(Saga.run(localOrder(quick), order))
      assert.deepStrictEqual(quick.log.filter((k) => k.startsWith("undo:")), ["undo:charge", "undo:charge", "undo:charge", "undo:reserve", "undo:reserve"])
    })))

  it.live("the caller's interruption during compensation does not stop it", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ failAction: { confirm: Infinity }, slowCompensation: { reserve: "300 millis" } })
      const id = "0193b4a2-7c1e-7000-8000-000000000004"
      const fiber = yield* Effect.forkChild(Saga.run(localOrder(script), order, { id }))
      yield* eventually(Effect.sync(() => script.log.includes("undo:reserve")), "5 seconds", "the compensation to start")
      yield* Fiber.interrupt(fiber)
      // the compensation was neither stopped nor left behind: it had finished when the interruption returned
      assert.include(script.log, "released res-o-1 until 2030-01-01T00:00:00.000Z")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause))
      assert.strictEqual((yield* Saga.get(id)).status, "compensated")
    })))

  it.live("interrupting the caller during a step stops that step and compensates the completed ones", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript({ slowAction: { charge: "10 seconds" } })
      const id = "0193b4a2-7c1e-7000-8000-000000000005"
      const fiber = yield* Effect.forkChild(Saga.run(localOrder(script), order, { id }))
      yield* eventually(Effect.sync(() => script.log.includes("charge")), "5 seconds", "the charge to start")
      yield* Fiber.interrupt(fiber)
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.strictEqual(state.steps[1]!.error, "interrupted by the caller")
      assert.deepStrictEqual(script.log, ["reserve", "charge", "undo:reserve", "released res-o-1 until 2030-01-01T00:00:00.000Z"])
    })))

  it.live("a saga without steps completes at once", () =>
    withStores(Effect.gen(function*() {
      const done = yield* Saga.run(Saga.make("nothing", { input: Schema.Null }), null)
      const state = yield* Saga.get(done.id)
      assert.deepStrictEqual([state.status, state.steps.length, state.claimedBy], ["completed", 0, null])
    })))

  it.live("invalid input and the wrong engine are typed errors that write nothing", () =>
    withStores(Effect.gen(function*() {
      const exit = yield* Effect.exit(Saga.run(localOrder(makeScript()), { orderId: "o", sku: "s", cents: 1.5 }))
      assert.strictEqual(failureTag(exit), "InvalidSagaInput")
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.run(localOrder(makeScript()), order, { id: "order-1" }))), "InvalidSagaInput", "ids are UUIDs")
      const mixed = commandOrder() as unknown as Saga.SagaDefinition<typeof order, {}, never, "local">
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.run(mixed, order))), "InvalidSagaDefinition")
      const local = localOrder(makeScript()) as unknown as Saga.SagaDefinition<typeof order, {}, never, "command">
      assert.strictEqual(failureTag(yield* Effect.exit(Saga.start(local, order))), "InvalidSagaDefinition")
      const store = yield* SagaStore.SagaStore
      assert.deepStrictEqual(yield* store.findRecoverable({ stuckAfter: Duration.zero, limit: 10 }), [])
    })))
})

describe("Saga recovery (memory stores)", () => {
  /** A saga whose runner died after `completed` steps: a claim that has expired, the next step in flight. */
  const orphan = (id: string, completed: number) =>
    Effect.gen(function*() {
      const store = yield* SagaStore.SagaStore
      const results = [{ reservationId: "res-o-1", until: "2030-01-01T00:00:00.000Z" }, { paymentId: "pay-1" }]
      yield* store.create({ id, type: "local-order", input: order, steps: ["reserve", "charge", "confirm"], claim: { owner: "dead", lease: Duration.millis(50) } })
      yield* store.update(id, 0, {
        currentStep: completed,
        steps: [
          ...results.slice(0, completed).map((result, index) => ({ index, status: "completed" as const, result, attemptStarted: true, finished: true })),
          { index: completed, attemptStarted: true }
        ]
      })
      yield* Effect.sleep("100 millis")
    })

  it.live("a saga whose runner died is compensated from what the store recorded, once, by one of several workers", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript()
      const registry = Saga.registry(localOrder(script))
      const id = "0193b4a2-7c1e-7000-8000-000000000010"
      yield* orphan(id, 2)
      const recoveriesBefore = yield* counter(Saga.metrics.recoveries)
      const reports = yield* Effect.forEach(["w1", "w2", "w3"], (owner) => Saga.recoverOnce({ registry, owner, stuckAfter: "1 minute" }), { concurrency: "unbounded" })
      assert.deepStrictEqual(reports.flatMap((r) => r.recovered.map((x) => [x.id, x.outcome])), [[id, "compensated"]])
      assert.deepStrictEqual(script.log, ["undo:charge", "refunded pay-1", "undo:reserve", "released res-o-1 until 2030-01-01T00:00:00.000Z"])
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "compensated", "failed"])
      assert.match(state.error!, /step confirm was interrupted: its executor dead stopped/)
      assert.strictEqual((yield* counter(Saga.metrics.recoveries)) - recoveriesBefore, 1)
      assert.deepStrictEqual((yield* Saga.recoverOnce({ registry })).recovered, [], "nothing left to do")
      // each recovery round refreshes the sagas-by-status gauge
      const gauge = (status: string) => Metric.value(Metric.withAttributes(Saga.metrics.byStatus, { status }))
      assert.strictEqual((yield* gauge("compensated")).value, 1)
      assert.strictEqual((yield* gauge("running")).value, 0)
    })))

  it.live("recovery of a saga of an unknown type is left to instances that know it; a stuck compensation ends failed", () =>
    withStores(Effect.gen(function*() {
      const id = "0193b4a2-7c1e-7000-8000-000000000011"
      yield* orphan(id, 1)
      const other = Saga.registry(Saga.make("other", { input: Schema.String }))
      assert.deepStrictEqual((yield* Saga.recoverOnce({ registry: other })).recovered, [])
      // the reserve compensation has already been attempted 3 times (crashes): one more is the limit
      const store = yield* SagaStore.SagaStore
      const seen = (yield* store.load(id))!
      yield* store.update(id, seen.saga.version, { status: "compensating", claim: { owner: "dead", lease: Duration.millis(10) }, steps: [0, 1, 2].map(() => ({ index: 0, compensationStarted: true })) })
      yield* Effect.sleep("50 millis")
      const script = makeScript({ failCompensation: { reserve: Infinity } })
      const report = yield* Saga.recoverOnce({ registry: Saga.registry(localOrder(script)), maxCompensationAttempts: 4 })
      assert.deepStrictEqual(report.recovered.map((r) => r.outcome), ["failed"])
      assert.deepStrictEqual(script.log, ["undo:reserve"], "one attempt left of four")
      const state = yield* Saga.get(id)
      assert.strictEqual(state.status, "failed")
      assert.strictEqual(state.steps[0]!.status, "compensation_failed")
      assert.match(state.error!, /failed 4 times \(the most allowed\)/)
    })))

  it.live("the recovery layer runs rounds until it is closed; bad settings are InvalidConfig", () =>
    withStores(Effect.gen(function*() {
      const script = makeScript()
      const id = "0193b4a2-7c1e-7000-8000-000000000012"
      yield* orphan(id, 1)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(Saga.recovery({ registry: Saga.registry(localOrder(script)), interval: "20 millis" }))
        yield* eventually(Effect.map(Saga.get(id), (s) => s.status === "compensated"), "5 seconds", "recovery")
      }))
      assert.deepStrictEqual(script.log, ["undo:reserve", "released res-o-1 until 2030-01-01T00:00:00.000Z"])
      const bad = yield* Effect.exit(Layer.build(Saga.recovery({ registry: Saga.registry(), batchSize: 0 })).pipe(Effect.scoped))
      assert.strictEqual(failureTag(bad), "InvalidConfig")
    })))
})

describe("Saga.start and replies (memory stores)", () => {
  const registry = Saga.registry(commandOrder())

  // (That a rolled-back caller's transaction leaves no saga either is shown on Postgres: the memory
  // saga store's transactions are its own.)
  it.live("start writes the saga and its first command; a rolled-back caller's transaction sends no command", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const exit = yield* Effect.exit(outbox.withTransaction(Effect.andThen(Saga.start(commandOrder(), order), Effect.fail("business rule" as const))))
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual((yield* outbox.stats).pending, 0)
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, state.currentStep, state.steps[0]!.attempts], ["running", 0, 1])
      const [command] = yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })
      assert.strictEqual(command!.message.type, Reserve.type)
      assert.deepStrictEqual(command!.message.payload, { orderId: "o-1", sku: "book" })
      const parsed = Option.getOrThrow(Saga.commandOf(command!.message))
      assert.deepStrictEqual([parsed.sagaId, parsed.sagaType, parsed.step, parsed.stepName, parsed.kind, parsed.attempt], [id, "command-order", 0, "reserve", "action", 1])
      assert.strictEqual(parsed.idempotencyKey, `${id}/reserve`)
      assert.isTrue(Option.isNone(Saga.commandOf({ ...command!.message, headers: {} })))
    })))

  it.live("replies advance the saga to completion; duplicates are ignored", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes, seen } = yield* pump(registry, participants())
      assert.deepStrictEqual(outcomes, ["advanced", "advanced", "completed"])
      assert.deepStrictEqual(seen.map((m) => m.type), [Reserve.type, "tidings.saga.reply", Charge.type, "tidings.saga.reply", Confirm.type, "tidings.saga.reply"])
      assert.deepStrictEqual(seen[2]!.payload, { reservationId: "res-o-1", cents: 2599 }, "the charge is built from the reserve's result")
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

  it.live("a failing participant: the completed steps are compensated by commands, in reverse", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes, seen } = yield* pump(registry, participants({ declineCharge: true }))
      assert.deepStrictEqual(outcomes, ["advanced", "compensating", "compensated"])
      assert.deepStrictEqual(seen.filter((m) => m.type !== "tidings.saga.reply").map((m) => m.type), [Reserve.type, Charge.type, Release.type])
      const release = Option.getOrThrow(Saga.commandOf(seen.find((m) => m.type === Release.type)!))
      assert.deepStrictEqual([release.kind, release.stepName, release.idempotencyKey], ["compensation", "reserve", `${id}/reserve/compensation`])
      assert.deepStrictEqual(seen.find((m) => m.type === Release.type)!.payload, { reservationId: "res-o-1" })
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "failed", "pending"])
      assert.strictEqual(state.error, "step charge failed: card declined")
    })))

  it.live("a failed compensation is resent by recovery after its retry delay, then the saga is failed", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const definition = commandOrder({ name: "refunds" })
      const refunds = Saga.registry(definition)
      const id = yield* outbox.withTransaction(Saga.start(definition, order))
      const silentConfirm = participants({ failRefunds: 10, silent: [Confirm.type] })
      let result = yield* pump(refunds, silentConfirm)
      assert.deepStrictEqual(result.outcomes, ["advanced", "advanced"])
      // confirm never answers: a reply that does not come makes the saga stuck
      yield* Effect.sleep("60 millis")
      const first = yield* Saga.recoverOnce({ registry: refunds, stuckAfter: "50 millis" })
      assert.deepStrictEqual(first.recovered.map((r) => r.outcome), ["compensating"])
      assert.match((yield* Saga.get(id)).error!, /step confirm failed: no reply \(stuck\)/)
      const rounds: Array<string> = []
      for (let i = 0; i < 10 && (yield* Saga.get(id)).status === "compensating"; i++) {
        result = yield* pump(refunds, silentConfirm)
        rounds.push(...result.outcomes)
        yield* Effect.sleep("30 millis")
        rounds.push(...(yield* Saga.recoverOnce({ registry: refunds, stuckAfter: "50 millis" })).recovered.map((r) => `recovered:${r.outcome}`))
      }
      // refund: sent, failed → retry in 10 ms → resent (2nd) → failed → resent (3rd) → failed: schedule exhausted
      assert.deepStrictEqual(rounds.filter((r) => r !== "recovered:error"), ["retrying", "recovered:compensating", "retrying", "recovered:compensating", "failed"])
      const state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["failed", "completed", "compensation_failed", "failed"])
      assert.strictEqual(state.steps[1]!.compensationAttempts, 3)
      assert.match(state.error!, /compensation of charge failed after 3 attempts: refund gateway down/)
    })))

  it.live("a step without a reply within its timeout is compensated; a success that comes later is undone too", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const definition = commandOrder({ name: "slow-charge", chargeTimeout: "50 millis" })
      const slow = Saga.registry(definition)
      const id = yield* outbox.withTransaction(Saga.start(definition, order))
      const { seen } = yield* pump(slow, participants({ silent: [Charge.type] }))
      const charge = Option.getOrThrow(Saga.commandOf(seen.find((m) => m.type === Charge.type)!))
      yield* Effect.sleep("80 millis")
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
      assert.deepStrictEqual(late.seen.filter((m) => m.type === Refund.type).map((m) => m.payload), [{ paymentId: "pay-late" }])
      state = yield* Saga.get(id)
      assert.deepStrictEqual([state.status, ...statuses(state)], ["compensated", "compensated", "compensated", "pending"])
    })))

  it.live("a reply whose result does not match its schema fails the step", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      const { outcomes } = yield* pump(registry, (command) => command.message.type === Reserve.type ? Saga.completed({ wrong: 1 }) : Saga.completed())
      assert.deepStrictEqual(outcomes, ["compensated"])
      const state = yield* Saga.get(id)
      assert.match(state.steps[0]!.error!, /does not match its schema/)
      const unknown = yield* Effect.exit(Saga.handleReply(Saga.registry(), yield* makeReply(id)))
      assert.strictEqual(failureTag(unknown), "InvalidSagaDefinition")
    })))

  const makeReply = (sagaId: string) =>
    Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const message = yield* outbox.withTransaction(Saga.reply(
        { sagaId, sagaType: "command-order", step: 0, stepName: "reserve", kind: "action", attempt: 1, idempotencyKey: "", message: undefined as never },
        Saga.completed()
      ))
      return message
    })

  it.live("concurrent handling of the same reply advances the saga once", () =>
    withStores(Effect.gen(function*() {
      const outbox = yield* OutboxStore.OutboxStore
      const id = yield* outbox.withTransaction(Saga.start(commandOrder(), order))
      yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })
      const reply = yield* outbox.withTransaction(Saga.reply(
        { sagaId: id, sagaType: "command-order", step: 0, stepName: "reserve", kind: "action", attempt: 1, idempotencyKey: "", message: undefined as never },
        Saga.completed({ reservationId: "r-1" })
      ))
      const gate = yield* Deferred.make<void>()
      const outcomes = yield* Effect.forEach(
        Array.from({ length: 6 }),
        () => Effect.andThen(Deferred.await(gate), Saga.handleReply(registry, reply)),
        { concurrency: "unbounded" }
      ).pipe(Effect.forkChild, Effect.tap(() => Deferred.succeed(gate, undefined)), Effect.flatMap(Fiber.join))
      assert.deepStrictEqual([...outcomes].sort(), ["advanced", "ignored", "ignored", "ignored", "ignored", "ignored"])
      const charges = (yield* outbox.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(5) })).filter((c) => c.message.type === Charge.type)
      assert.strictEqual(charges.length, 1, "one charge command")
      assert.strictEqual((yield* Saga.get(id)).currentStep, 1)
    })))
})




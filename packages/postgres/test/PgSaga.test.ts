/**
 * Sagas on a real Postgres: the synchronous engine's timeouts, failing compensations and caller
 * interruption, and the asynchronous engine end to end — outbox, relay, the in-memory broker, and
 * participants that write their own tables and reply in the same transaction.
 */
import { assert, describe, it } from "@effect/vitest"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Relay from "@tidings/core/Relay"
import * as Saga from "@tidings/core/Saga"
import { SagaStore } from "@tidings/core/SagaStore"
import { eventually } from "@tidings/core/testing"
import { Cause, Deferred, Effect, Exit, Fiber, Layer, Option, type Scope, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, pgClientLayer } from "../../../test/support/pg.ts"
import { commandOrder, localOrder, makeScript } from "../../core/test/SagaFixtures.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"
import { orderScenario, participantTables, participate } from "./fixtures/sagaParticipants.ts"

type Env =
  | SagaStore
  | OutboxStore
  | SqlClient.SqlClient
  | MemoryBroker.MemoryBroker
  | import("@tidings/core/Publisher").Publisher
  | Scope.Scope

/** A fresh schema with the saga and outbox stores on it, for one test. */
const withPg = <A, E>(body: (schema: string) => Effect.Effect<A, E, Env>) =>
  Effect.scoped(Effect.gen(function*() {
    const schema = yield* freshSchema("saga")
    return yield* body(schema).pipe(
      Effect.provide(
        Layer.mergeAll(PgSagaStore.layer({ schema }), PgOutboxStore.layer({ schema }), MemoryBroker.layer())
      )
    )
  })).pipe(Effect.provide(pgClientLayer()))

const order = { orderId: "o-1", sku: "book", cents: 2599 }

const firstError = (exit: Exit.Exit<unknown, unknown>): any =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined

/** The stored rows, read with plain SQL. */
const rows = (schema: string, id: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [saga] = yield* sql<{ status: string; error: string | null; version: number; claimed_by: string | null }>`
      SELECT status, error, version, claimed_by FROM ${sql(`${schema}.saga`)} WHERE id = ${id}`
    const steps = yield* sql<
      { name: string; status: string; attempts: number; compensation_attempts: number; error: string | null }
    >`
      SELECT name, status, attempts, compensation_attempts, error FROM ${
      sql(`${schema}.saga_step`)
    } WHERE saga_id = ${id} ORDER BY index`
    return { saga: saga!, steps }
  })

describe("Saga.run on Postgres", () => {
  it.live("a step timeout compensates the completed steps", () =>
    withPg((schema) =>
      Effect.gen(function*() {
        const script = makeScript({ slowAction: { charge: "10 seconds" } })
        const started = Date.now()
        const exit = yield* Effect.exit(Saga.run(localOrder(script, { chargeTimeout: "150 millis" }), order))
        assert.isBelow(Date.now() - started, 3000)
        const error = firstError(exit)
        assert.strictEqual(error?._tag, "SagaStepTimeout")
        assert.strictEqual(error.step, "charge")
        const { saga, steps } = yield* rows(schema, error.sagaId)
        assert.strictEqual(saga.status, "compensated")
        assert.match(saga.error!, /^step charge failed: timed out after 150/)
        assert.isNull(saga.claimed_by)
        assert.deepStrictEqual(steps.map((s) => [s.name, s.status, s.attempts, s.compensation_attempts]), [
          ["reserve", "compensated", 1, 1],
          ["charge", "failed", 3, 0],
          ["confirm", "pending", 0, 0]
        ])
        assert.deepStrictEqual(script.log.filter((k) => k.startsWith("undo:") || k.startsWith("released")), [
          "undo:reserve",
          "released res-o-1 until 2030-01-01T00:00:00.000Z"
        ])
      })
    ))

  it.live("a failing compensation is retried by its schedule and then marks the saga failed", () =>
    withPg((schema) =>
      Effect.gen(function*() {
        const script = makeScript({ failAction: { confirm: Infinity }, failCompensation: { charge: Infinity } })
        const exit = yield* Effect.exit(Saga.run(localOrder(script), order))
        const error = firstError(exit)
        assert.strictEqual(error?._tag, "SagaCompensationFailed")
        assert.strictEqual(error.step, "charge")
        assert.strictEqual(script.log.filter((k) => k === "undo:charge").length, 3, "1 attempt + 2 retries")
        const { saga, steps } = yield* rows(schema, error.sagaId)
        assert.strictEqual(saga.status, "failed")
        assert.match(saga.error!, /compensation of charge failed after 3 attempts: StoreError: gateway down/)
        assert.deepStrictEqual(steps.map((s) => [s.name, s.status, s.compensation_attempts]), [
          ["reserve", "completed", 0],
          ["charge", "compensation_failed", 3],
          ["confirm", "failed", 0]
        ])
        assert.match(steps[1]!.error!, /gateway down/)
        const state = yield* Saga.get(error.sagaId)
        assert.strictEqual(state.status, "failed")
        assert.strictEqual(state.steps[1]!.status, "compensation_failed")
      })
    ))

  it.live("the caller's interruption during compensation does not stop it", () =>
    withPg((schema) =>
      Effect.gen(function*() {
        const script = makeScript({ failAction: { confirm: Infinity }, slowCompensation: { reserve: "400 millis" } })
        const id = "0193b4a2-7c1e-7000-8000-0000000000a1"
        const fiber = yield* Effect.forkChild(Saga.run(localOrder(script), order, { id }))
        yield* eventually(
          Effect.sync(() => script.log.includes("undo:reserve")),
          "10 seconds",
          "the compensation to start"
        )
        const before = yield* rows(schema, id)
        assert.strictEqual(before.saga.status, "compensating")
        yield* Fiber.interrupt(fiber)
        // the compensation was neither stopped nor left behind: it had finished when the interruption returned
        assert.include(script.log, "released res-o-1 until 2030-01-01T00:00:00.000Z")
        const exit = yield* Fiber.await(fiber)
        // the caller sees its interruption, next to the saga's own outcome
        assert.isTrue(Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause), String(exit))
        assert.strictEqual(firstError(exit)?._tag, "SagaStepFailed")
        assert.includeMembers(script.log, [
          "refunded pay-res-o-1-2030",
          "undo:reserve",
          "released res-o-1 until 2030-01-01T00:00:00.000Z"
        ])
        const after = yield* rows(schema, id)
        assert.strictEqual(after.saga.status, "compensated")
        assert.deepStrictEqual(after.steps.map((s) => s.status), ["compensated", "compensated", "failed"])
      })
    ))
})

/**
 * The consumers of the in-memory broker's stream: commands go to the participants, replies to the
 * orchestrator. Returns once the subscription is live (checked with a ping through the relay).
 */
const startConsumers = (schema: string, registry: Saga.Registry<never>) =>
  Effect.gen(function*() {
    const broker = yield* MemoryBroker.MemoryBroker
    const outbox = yield* OutboxStore
    const live = yield* Deferred.make<void>()
    const outcomes: Array<Saga.ReplyOutcome> = []
    const handle = (message: Message) =>
      Effect.gen(function*() {
        if (message.type === "test.ping") return yield* Deferred.succeed(live, undefined)
        if (message.type === Saga.ReplyEvent.type) return void outcomes.push(yield* Saga.handleReply(registry, message))
        const command = Saga.commandOf(message)
        if (Option.isSome(command)) yield* participate(schema, command.value)
      }).pipe(Effect.catchCause((cause) => Effect.logError(`consumer failed on ${message.type}`, cause)))
    yield* broker.subscribe.pipe(Stream.runForEach(({ message }) => handle(message)), Effect.forkScoped)
    const ping = outbox.withTransaction(Effect.suspend(() =>
      outbox.append([{
        id: crypto.randomUUID(),
        type: "test.ping",
        version: 1,
        aggregateType: "test",
        aggregateId: "ping",
        orderingKey: "ping",
        payload: {},
        headers: {},
        occurredAt: new Date()
      }])
    ))
    for (let i = 0; i < 50 && !(yield* Deferred.isDone(live)); i++) {
      yield* ping
      yield* Deferred.await(live).pipe(Effect.timeout("200 millis"), Effect.ignore)
    }
    assert.isTrue(yield* Deferred.isDone(live), "the consumer's subscription is live")
    return outcomes
  })

describe("Saga.start on Postgres, through the outbox, the relay and the in-memory broker", () => {
  it.live("sagas run to completion, and with a failing participant to compensated", () =>
    withPg((schema) =>
      Effect.gen(function*() {
        yield* participantTables(schema)
        const definition = commandOrder()
        // the relay lives as long as the test's scope (closed before the schema is dropped)
        yield* Layer.build(
          Relay.layer({
            statsInterval: false,
            retention: false,
            pollInterval: { base: "20 millis", max: "100 millis" }
          })
        )
        const outcomes = yield* startConsumers(schema, Saga.registry(definition))
        yield* orderScenario(schema, definition, outcomes)
      })
    ))
})

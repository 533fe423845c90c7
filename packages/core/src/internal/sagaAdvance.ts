/**
 * Moves an asynchronous saga on: loads it, lets a decision (`sagaPlan`) choose the next state, and
 * commits that state with its commands in one transaction, by compare-and-set on the version.
 */
import { Effect, Schedule } from "effect"
import type { InvalidEvent, NotInTransaction, StoreError } from "../Errors.ts"
import * as Outbox from "../Outbox.ts"
import { OutboxStore } from "../OutboxStore.ts"
import type { ReplyOutcome } from "../SagaCommand.ts"
import type { Any } from "../SagaDefinition.ts"
import { type SagaConflict, SagaNotFound } from "../SagaErrors.ts"
import type { Execution, SagaStore } from "../SagaStore.ts"
import { type Decoded, decodeExecution } from "./sagaCodec.ts"
import * as SagaMetrics from "./sagaMetrics.ts"
import { ignored, type Plan } from "./sagaPlan.ts"

/**
 * Loads a saga and applies the plan `decide` makes of it with compare-and-set, committing the
 * update and its commands together. A saga whose stored data no longer decodes is failed (a person
 * must look). Metrics are recorded once the transaction has committed.
 * @since 0.1.0
 * @category combinators
 */
export const advance = (
  store: SagaStore["Service"],
  outbox: OutboxStore["Service"],
  definition: Any,
  sagaId: string,
  decide: (execution: Execution, decoded: Decoded) => Effect.Effect<Plan | undefined>
): Effect.Effect<ReplyOutcome, SagaConflict | SagaNotFound | InvalidEvent | NotInTransaction | StoreError> =>
  outbox.withTransaction(store.withTransaction(Effect.gen(function*() {
    const execution = yield* store.load(sagaId)
    if (execution === undefined) return yield* new SagaNotFound({ sagaId })
    const decoded = yield* Effect.result(decodeExecution(definition, execution))
    if (decoded._tag === "Failure") {
      // The stored data no longer matches the definition: nothing can be built from it; a person must look.
      if (execution.saga.status !== "running" && execution.saga.status !== "compensating") return ignored
      const message = `stored data does not decode with the definition: ${decoded.failure}`
      yield* store.update(sagaId, execution.saga.version, {
        status: "failed",
        error: message,
        deadline: null,
        claim: null
      })
      yield* Effect.logError(`saga ${sagaId} failed: ${message}`)
      return { update: {}, commands: [], outcome: "failed", after: [SagaMetrics.finished("failed")] } satisfies Plan
    }
    const plan = yield* decide(execution, decoded.success)
    if (plan === undefined || plan.outcome === "ignored") return ignored
    yield* store.update(sagaId, execution.saga.version, plan.update)
    if (plan.commands.length > 0) yield* Outbox.appendAll(plan.commands)
    return plan
  }))).pipe(
    Effect.provideService(OutboxStore, outbox),
    // metrics once committed (a transaction that lost a race is retried, and must not count twice)
    Effect.tap((plan) => Effect.forEach(plan.after, (f) => f, { discard: true })),
    Effect.map((plan) => plan.outcome)
  )

/**
 * Lost compare-and-sets (a concurrent reply or recovery) and serialization failures: load and
 * decide again, after a short jittered pause (retry `while: Errors.isRetryable`).
 * @since 0.1.0
 * @category constants
 */
export const conflictRetry = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.upTo({ times: 8 }))

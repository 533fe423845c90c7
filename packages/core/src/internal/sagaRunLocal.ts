/**
 * The in-process engine behind `Saga.run`: each local step runs in order (its attempts, timeout and
 * retries), its outcome is persisted before the next begins, and a failure compensates the
 * completed steps, detached from the caller.
 */
import { Cause, Clock, Effect, Exit, Option } from "effect"
import { describe, describeCause, isRetryable, type StoreError } from "../Errors.ts"
import type { Any, LocalStep, StepContext } from "../SagaDefinition.ts"
import {
  SagaCompensationFailed,
  type SagaConflict,
  type SagaNotFound,
  SagaStepFailed,
  SagaStepTimeout
} from "../SagaErrors.ts"
import type { Claim, StepRecord } from "../SagaStore.ts"
import { SagaStore } from "../SagaStore.ts"
import { ActionFailed, EngineFailed, timedOutText, timeoutAttempt } from "./sagaAttempt.ts"
import { encodeJson } from "./sagaCodec.ts"
import { compensateLocal, detached } from "./sagaCompensateLocal.ts"
import { contextOf } from "./sagaContext.ts"
import * as SagaMetrics from "./sagaMetrics.ts"
import { spanName } from "./sagaSpans.ts"
import { pendingStep } from "./sagaSteps.ts"
import { persist, type Tracker, withHeartbeat } from "./sagaTracker.ts"

/** Runs a local step's action: its attempts (each persisted first), timeout and retries, in a span. */
const runAction = (definition: Any, t: Tracker, step: LocalStep, context: StepContext<any, any>) => {
  const attempt = persist(t, {
    currentStep: context.index,
    deadline: step.timeout ?? null,
    steps: [{ index: context.index, attemptStarted: true }]
  }).pipe(
    Effect.mapError((e) => new EngineFailed(e)),
    Effect.andThen(
      Effect.suspend(() => step.action(context)).pipe(Effect.mapError((e) => new ActionFailed(e, undefined)))
    ),
    timeoutAttempt(step.timeout)
  )
  // What is retried: a timed-out attempt, and an action error that is transient (`ActionFailed.isRetryable`); never the engine's own failure.
  const retried = step.retry === undefined
    ? attempt
    : attempt.pipe(Effect.retry({ schedule: step.retry, while: isRetryable }))
  return retried.pipe(
    Effect.withSpan(spanName("step", step.name), {
      attributes: {
        "tidings.saga.id": t.id,
        "tidings.saga.type": definition.name,
        "tidings.saga.step": step.name,
        "tidings.saga.step_index": context.index
      }
    })
  )
}

type StepFailure = {
  readonly text: string
  readonly error: SagaStepFailed | SagaStepTimeout
  readonly cause: Cause.Cause<unknown>
}

/** Why a step's exit is a failure, as stored and as the caller's error; the engine's own failures pass through. */
const failureOf = (
  definition: Any,
  sagaId: string,
  step: LocalStep,
  cause: Cause.Cause<ActionFailed | EngineFailed>
): Effect.Effect<StepFailure, SagaConflict | SagaNotFound | StoreError> => {
  const at = { sagaId, saga: definition.name, step: step.name }
  const error = Option.getOrUndefined(Cause.findErrorOption(cause))
  // The store failed or the saga was lost: nothing more is ours to do (recovery takes over).
  if (error instanceof EngineFailed) return Effect.fail(error.error)
  if (error instanceof ActionFailed && error.timeoutMs !== undefined) {
    return Effect.succeed({
      text: timedOutText(error.timeoutMs),
      error: new SagaStepTimeout({ ...at, timeoutMs: error.timeoutMs }),
      cause
    })
  }
  if (error instanceof ActionFailed) {
    const text = describe(error.error)
    return Effect.succeed({ text, error: new SagaStepFailed({ ...at, message: text, cause: error.error }), cause })
  }
  if (Cause.hasInterruptsOnly(cause)) {
    const text = "interrupted by the caller"
    return Effect.succeed({ text, error: new SagaStepFailed({ ...at, message: text }), cause })
  }
  const text = describeCause(cause)
  return Effect.succeed({
    text,
    error: new SagaStepFailed({ ...at, message: text, cause: Cause.squash(cause) }),
    cause
  })
}

/**
 * A new local saga, checked and encoded: what `runLocal` needs.
 * @since 0.1.0
 * @category models
 */
export interface LocalRun {
  readonly id: string
  readonly input: unknown
  readonly encodedInput: unknown
  readonly claim: Claim
  readonly maxCompensationAttempts: number
}

/**
 * Creates the execution (claimed by this instance, renewed by a heartbeat) and runs its steps; see
 * `Saga.run` for the outcomes.
 * @since 0.1.0
 * @category constructors
 */
export const runLocal = (def: Any, run: LocalRun) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    const { id, input, claim } = run
    const created = yield* store.create({
      id,
      type: def.name,
      input: run.encodedInput,
      steps: def.steps.map((s) => s.name),
      claim
    })
    yield* SagaMetrics.started
    const t: Tracker = { store, id, version: created.version }

    const body = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const results: Record<string, unknown> = {}
        const records: Array<StepRecord> = def.steps.map((s, index) => pendingStep(index, s.name))
        for (let i = 0; i < def.steps.length; i++) {
          const step = def.steps[i] as LocalStep
          const context = contextOf(def, id, input, results, i)
          const began = yield* Clock.currentTimeMillis
          const exit = yield* Effect.exit(restore(runAction(def, t, step, context)))
          yield* SagaMetrics.stepTook(def.name, step.name, (yield* Clock.currentTimeMillis) - began)
          let failure: StepFailure
          if (Exit.isSuccess(exit)) {
            const encoded = yield* Effect.result(encodeJson(step.result, exit.value))
            if (encoded._tag === "Success") {
              const last = i === def.steps.length - 1
              yield* persist(t, {
                ...(last ? { status: "completed" as const, claim: null } : {}),
                deadline: null,
                steps: [{ index: i, status: "completed", result: encoded.success, error: null, finished: true }]
              })
              records[i] = { ...records[i]!, status: "completed", result: encoded.success }
              results[step.name] = exit.value
              if (last) yield* SagaMetrics.finished("completed")
              continue
            }
            const text = `the result does not match its schema: ${encoded.failure}`
            failure = {
              text,
              error: new SagaStepFailed({ sagaId: id, saga: def.name, step: step.name, message: text }),
              cause: Cause.die(text)
            }
          } else {
            failure = yield* failureOf(def, id, step, exit.cause)
          }
          const reason = `step ${step.name} failed: ${failure.text}`
          yield* Effect.logWarning(`saga ${id} (${def.name}): ${reason}; compensating`)
          yield* persist(t, {
            status: "compensating",
            error: reason,
            deadline: null,
            steps: [{ index: i, status: "failed", error: failure.text, finished: true }]
          })
          records[i] = { ...records[i]!, status: "failed" }
          const outcome = yield* detached(
            compensateLocal(def, t, { input, results }, records, run.maxCompensationAttempts)
          )
          if (Cause.hasInterruptsOnly(failure.cause)) {
            return yield* Effect.failCause(failure.cause as Cause.Cause<never>)
          }
          if (outcome._tag === "Compensated") return yield* Effect.fail(failure.error)
          return yield* new SagaCompensationFailed({
            sagaId: id,
            saga: def.name,
            step: outcome.step,
            message: outcome.message,
            reason,
            ...(outcome.cause === undefined ? {} : { cause: outcome.cause })
          })
        }
        if (def.steps.length === 0) {
          yield* persist(t, { status: "completed", claim: null })
          yield* SagaMetrics.finished("completed")
        }
        return { id, results }
      })
    )
    return yield* body.pipe(withHeartbeat(store, id, claim))
  })

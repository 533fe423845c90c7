/**
 * Compensation of local steps, in this process: `Saga.run` after a step failed, and the recovery
 * worker for a saga whose executor died. Every attempt and outcome is persisted before the next.
 */
import { Cause, Clock, type Duration, Effect, Exit, Fiber, Option, Pull, Schedule } from "effect"
import { describeCause, isRetryable, type StoreError } from "../Errors.ts"
import type { Any } from "../SagaDefinition.ts"
import type { SagaConflict, SagaNotFound } from "../SagaErrors.ts"
import type { StepRecord } from "../SagaStore.ts"
import { ActionFailed, timedOutText, timeoutAttempt } from "./sagaAttempt.ts"
import type { Decoded } from "./sagaCodec.ts"
import { contextOf } from "./sagaContext.ts"
import * as SagaMetrics from "./sagaMetrics.ts"
import { spanName } from "./sagaSpans.ts"
import { persist, type Tracker } from "./sagaTracker.ts"

/**
 * How a local compensation ended.
 * @since 0.1.0
 * @category models
 */
export type LocalOutcome =
  | { readonly _tag: "Compensated" }
  | { readonly _tag: "Failed"; readonly step: string; readonly message: string; readonly cause: unknown }

/** Delay before the next retry of a schedule (`None` once the schedule is done). */
const retryDelay = (schedule: Schedule.Schedule<unknown, unknown>) =>
  Effect.map(
    Schedule.toStep(schedule),
    (step) => (input: unknown): Effect.Effect<Option.Option<Duration.Duration>> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => step(now, input)).pipe(
        Effect.map(([, delay]) => Option.some(delay)),
        Pull.catchDone(() => Effect.succeedNone)
      )
  )

const failSaga = (t: Tracker, index: number, step: string, message: string, cause: unknown) =>
  Effect.gen(function*() {
    yield* persist(t, {
      status: "failed",
      error: message,
      deadline: null,
      claim: null,
      steps: [{ index, status: "compensation_failed", error: message, finished: true }]
    })
    yield* SagaMetrics.compensated("failed")
    yield* SagaMetrics.finished("failed")
    yield* Effect.logError(`saga ${t.id} failed: ${message}`)
    return { _tag: "Failed", step, message, cause } as LocalOutcome
  })

/**
 * Compensates, in reverse order, the completed local steps of an execution (as recorded), each with
 * its timeout and retry schedule, persisting every attempt and outcome. Ends the saga
 * `compensated`, or `failed` at the first compensation that keeps failing (an error that is not
 * transient by `Errors.isRetryable`, the schedule's end, or `maxAttempts` across crashes).
 * @since 0.1.0
 * @category combinators
 */
export const compensateLocal = (
  definition: Any,
  t: Tracker,
  decoded: Decoded,
  steps: ReadonlyArray<StepRecord>,
  maxAttempts: number
): Effect.Effect<LocalOutcome, SagaConflict | SagaNotFound | StoreError, any> =>
  Effect.gen(function*() {
    for (let j = steps.length - 1; j >= 0; j--) {
      const record = steps[j]!
      const step = definition.steps[j]
      if (
        record.status !== "completed" || step === undefined || step._tag !== "Local" || step.compensate === undefined
      ) continue
      const compensate = step.compensate
      const context = contextOf(definition, t.id, decoded.input, decoded.results, j)
      const result = decoded.results[step.name]
      const next = yield* retryDelay(step.compensation.retry)
      let attempts = record.compensationAttempts
      let lastError = record.error ?? "no attempt finished"
      let lastCause: unknown = undefined
      while (true) {
        if (attempts >= maxAttempts) {
          return yield* failSaga(
            t,
            j,
            step.name,
            `compensation of ${step.name} failed ${attempts} times (the most allowed): ${lastError}`,
            lastCause
          )
        }
        yield* persist(t, {
          currentStep: j,
          deadline: step.compensation.timeout ?? null,
          steps: [{ index: j, compensationStarted: true }]
        })
        attempts++
        const exit = yield* Effect.exit(
          Effect.suspend(() => compensate(context, result)).pipe(
            timeoutAttempt(step.compensation.timeout),
            Effect.withSpan(spanName("compensate", step.name), {
              attributes: {
                "tidings.saga.id": t.id,
                "tidings.saga.type": definition.name,
                "tidings.saga.step": step.name,
                "tidings.saga.attempt": attempts
              }
            })
          )
        )
        if (Exit.isSuccess(exit)) {
          yield* persist(t, { steps: [{ index: j, status: "compensated", error: null, finished: true }] })
          yield* SagaMetrics.compensated("compensated")
          break
        }
        if (Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
        const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
        lastError = error instanceof ActionFailed && error.timeoutMs !== undefined
          ? timedOutText(error.timeoutMs)
          : describeCause(exit.cause)
        lastCause = error ?? Cause.squash(exit.cause)
        yield* Effect.logWarning(
          `saga ${t.id}: compensation of ${step.name} failed (attempt ${attempts}): ${lastError}`
        )
        const delay = error === undefined || !isRetryable(error) ? Option.none() : yield* next(error)
        if (Option.isNone(delay)) {
          return yield* failSaga(
            t,
            j,
            step.name,
            `compensation of ${step.name} failed after ${attempts} attempts: ${lastError}`,
            lastCause
          )
        }
        yield* persist(t, { steps: [{ index: j, error: lastError }] })
        yield* Effect.sleep(delay.value)
      }
    }
    yield* persist(t, { status: "compensated", deadline: null, claim: null })
    yield* SagaMetrics.finished("compensated")
    return { _tag: "Compensated" } as const
  })

/**
 * Runs the compensation in a fiber of its own, detached from the caller, and waits for it without
 * being interruptible: the caller's interruption can neither stop a compensation nor return before
 * it ends (it takes effect afterwards).
 * @since 0.1.0
 * @category combinators
 */
export const detached = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.uninterruptible(Effect.flatMap(Effect.forkDetach(effect, { uninterruptible: false }), Fiber.join))

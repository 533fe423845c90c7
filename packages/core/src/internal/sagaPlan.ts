/**
 * The state machine of asynchronous (command) sagas: given the stored execution and what happened
 * (a reply, or the saga being overdue), the next state and the commands to send with it. Pure
 * decisions: `sagaAdvance` loads, applies and commits them.
 */
import { Clock, Duration, Effect, Option } from "effect"
import type { EventDraft } from "../Event.ts"
import * as Retry from "../Retry.ts"
import type { ReplyOutcome, ReplyPayload } from "../SagaCommand.ts"
import type { Any, CommandStep } from "../SagaDefinition.ts"
import type { Execution, SagaUpdate, StepStatus, StepUpdate } from "../SagaStore.ts"
import { type Decoded, decodeJson, encodeJson } from "./sagaCodec.ts"
import { buildCommand } from "./sagaCommandDraft.ts"
import { contextOf } from "./sagaContext.ts"
import * as SagaMetrics from "./sagaMetrics.ts"

/**
 * A decision: the saga's update and the commands committed with it, what it amounts to, and the
 * metrics to record once it has committed.
 * @since 0.1.0
 * @category models
 */
export interface Plan {
  readonly update: SagaUpdate
  readonly commands: ReadonlyArray<EventDraft>
  readonly outcome: ReplyOutcome
  /** Metrics to record after the commit. */
  readonly after: ReadonlyArray<Effect.Effect<void>>
}

/**
 * Nothing to do.
 * @since 0.1.0
 * @category constructors
 */
export const ignored: Plan = { update: {}, commands: [], outcome: "ignored", after: [] }

/**
 * What happened to the saga: a participant's reply, or the recovery worker found it overdue.
 * @since 0.1.0
 * @category models
 */
export type Trigger =
  | { readonly _tag: "Reply"; readonly reply: ReplyPayload }
  | { readonly _tag: "Overdue"; readonly maxCompensationAttempts: number }

/** What every decision reads. */
interface Facts {
  readonly definition: Any
  readonly execution: Execution
  readonly decoded: Decoded
  readonly now: number
}

const stepAt = (f: Facts, i: number) => f.definition.steps[i] as CommandStep | undefined

const withAfterFirst = (before: ReadonlyArray<Effect.Effect<void>>) => (plan: Plan): Plan => ({
  ...plan,
  after: [...before, ...plan.after]
})

/**
 * The saga ends `failed`. `release`: it was the saga's current work (clear its deadline and claim);
 * otherwise a late event on a saga that has moved on (only its status and error change).
 */
const failedPlan = (f: Facts, message: string, steps: ReadonlyArray<StepUpdate>, release: boolean): Plan => ({
  update: release
    ? { status: "failed", error: message, deadline: null, claim: null, steps }
    : { status: "failed", error: message, steps },
  commands: [],
  outcome: "failed",
  after: [
    SagaMetrics.compensated("failed"),
    ...(f.execution.saga.status === "failed" ? [] : [SagaMetrics.finished("failed")])
  ]
})

const sendCompensation = (
  f: Facts,
  k: number,
  attempt: number,
  results: Record<string, unknown> = f.decoded.results
) => {
  const step = stepAt(f, k)!
  const sagaId = f.execution.saga.id
  const context = contextOf(f.definition, sagaId, f.decoded.input, results, k)
  return buildCommand(
    sagaId,
    f.definition,
    k,
    "compensation",
    attempt,
    () => step.compensate!(context, results[step.name])
  )
}

/**
 * Compensates backwards from step `from`: sends the compensation of the last completed step with
 * one, or ends the saga `compensated` when there is none. `extra` are updates of other steps.
 */
const compensateFrom = (
  f: Facts,
  from: number,
  reason: string | undefined,
  extra: ReadonlyArray<StepUpdate>
): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    for (let k = from; k >= 0; k--) {
      const step = stepAt(f, k)
      const record = f.execution.steps[k]
      if (
        step === undefined || record === undefined || record.status !== "completed" || step.compensate === undefined
      ) continue
      const command = yield* Effect.result(sendCompensation(f, k, record.compensationAttempts + 1))
      if (command._tag === "Failure") {
        const message = `compensation of ${step.name} could not be sent: ${command.failure}`
        return failedPlan(f, message, [...extra, {
          index: k,
          status: "compensation_failed",
          error: message,
          finished: true
        }], true)
      }
      return {
        update: {
          status: "compensating",
          currentStep: k,
          ...(reason === undefined ? {} : { error: reason }),
          deadline: step.compensation.timeout ?? null,
          claim: null,
          steps: [...extra, { index: k, compensationStarted: true }]
        },
        commands: [command.success],
        outcome: "compensating",
        after: []
      } satisfies Plan
    }
    return {
      update: {
        status: "compensated",
        ...(reason === undefined ? {} : { error: reason }),
        deadline: null,
        claim: null,
        steps: extra
      },
      commands: [],
      outcome: "compensated",
      after: [SagaMetrics.finished("compensated")]
    } satisfies Plan
  })

/** A compensation failed (or got no reply): retry it after the schedule's delay, or fail the saga. */
const compensationFailed = (
  f: Facts,
  j: number,
  error: string,
  retryable: boolean,
  resendNow: boolean,
  maxAttempts: number
): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const step = stepAt(f, j)!
    const attempts = f.execution.steps[j]!.compensationAttempts
    const delay = retryable && attempts < maxAttempts
      ? yield* Retry.delayFor(step.compensation.retry, attempts, error)
      : Option.none()
    if (Option.isNone(delay)) {
      const message = `compensation of ${step.name} failed after ${attempts} attempts: ${error}`
      return failedPlan(f, message, [{ index: j, status: "compensation_failed", error: message, finished: true }], true)
    }
    if (!resendNow) {
      return {
        update: { deadline: delay.value, claim: null, steps: [{ index: j, error }] },
        commands: [],
        outcome: "retrying",
        after: []
      } satisfies Plan
    }
    const command = yield* Effect.result(sendCompensation(f, j, attempts + 1))
    if (command._tag === "Failure") return yield* compensationFailed(f, j, command.failure, false, false, maxAttempts)
    return {
      update: {
        deadline: step.compensation.timeout ?? null,
        claim: null,
        steps: [{ index: j, error, compensationStarted: true }]
      },
      commands: [command.success],
      outcome: "compensating",
      after: []
    } satisfies Plan
  })

/** The saga is overdue: its step got no reply in time, or its compensation is due to be sent again. */
const planOverdue = (f: Facts, maxCompensationAttempts: number): Effect.Effect<Plan> => {
  const { saga } = f.execution
  const i = saga.currentStep
  const record = f.execution.steps[i]
  const step = stepAt(f, i)
  if (record === undefined || step === undefined) return Effect.succeed(ignored)
  if (saga.status === "running") {
    const error = step.timeout === undefined
      ? "no reply (stuck)"
      : `timed out: no reply within ${Duration.format(step.timeout)}`
    return compensateFrom(f, i - 1, `step ${step.name} failed: ${error}`, [{
      index: i,
      status: "failed",
      error,
      finished: true
    }])
  }
  if (saga.status === "compensating") {
    if (record.status !== "completed") return compensateFrom(f, i - 1, undefined, [])
    return compensationFailed(f, i, record.error ?? "no reply to the compensation", true, true, maxCompensationAttempts)
  }
  return Effect.succeed(ignored)
}

/** An action's result as the reply carries it, checked by the step's schema (decoded, and encoded again to store it). */
const replyResult = (step: CommandStep, reply: ReplyPayload) =>
  Effect.gen(function*() {
    if (reply.outcome !== "completed") return { error: reply.error ?? "failed" } as const
    const value = yield* Effect.result(decodeJson(step.result, reply.result ?? null))
    const encoded = value._tag === "Success" ? yield* Effect.result(encodeJson(step.result, value.success)) : undefined
    if (value._tag === "Success" && encoded?._tag === "Success") {
      return { result: { encoded: encoded.success, decoded: value.success } } as const
    }
    const why = value._tag === "Failure" ? value.failure : encoded?._tag === "Failure" ? encoded.failure : ""
    return { error: `the reply's result does not match its schema: ${why}` } as const
  })

/** The current step's action answered: move on to the next step, complete, or compensate. */
const planCurrentAction = (
  f: Facts,
  i: number,
  outcome: { readonly result?: { readonly encoded: unknown; readonly decoded: unknown }; readonly error?: string }
) =>
  Effect.gen(function*() {
    const step = stepAt(f, i)!
    const record = f.execution.steps[i]!
    const sagaId = f.execution.saga.id
    const took = record.startedAt === null
      ? []
      : [SagaMetrics.stepTook(f.definition.name, step.name, f.now - record.startedAt.getTime())]
    const result = outcome.result
    if (result === undefined) {
      const error = outcome.error ?? "failed"
      return withAfterFirst(took)(
        yield* compensateFrom(f, i - 1, `step ${step.name} failed: ${error}`, [{
          index: i,
          status: "failed",
          error,
          finished: true
        }])
      )
    }
    const done: StepUpdate = { index: i, status: "completed", result: result.encoded, error: null, finished: true }
    if (i === f.definition.steps.length - 1) {
      return {
        update: { status: "completed", deadline: null, claim: null, steps: [done] },
        commands: [],
        outcome: "completed",
        after: [...took, SagaMetrics.finished("completed")]
      } satisfies Plan
    }
    const next = stepAt(f, i + 1)!
    const results = { ...f.decoded.results, [step.name]: result.decoded }
    const command = yield* Effect.result(
      buildCommand(sagaId, f.definition, i + 1, "action", 1, () =>
        next.send(contextOf(f.definition, sagaId, f.decoded.input, results, i + 1)))
    )
    if (command._tag === "Failure") {
      const nextError = `its command could not be sent: ${command.failure}`
      const failedNext: StepUpdate = { index: i + 1, status: "failed", error: nextError, finished: true }
      return withAfterFirst(took)(
        yield* compensateFrom(f, i, `step ${next.name} failed: ${nextError}`, [done, failedNext])
      )
    }
    return {
      update: {
        currentStep: i + 1,
        deadline: next.timeout ?? null,
        claim: null,
        steps: [done, { index: i + 1, attemptStarted: true }]
      },
      commands: [command.success],
      outcome: "advanced",
      after: took
    } satisfies Plan
  })

/**
 * A success that comes after the step was given up (timed out): the participant did the work, so
 * it is recorded and undone at once.
 */
const planLateSuccess = (f: Facts, i: number, result: { readonly encoded: unknown; readonly decoded: unknown }) =>
  Effect.gen(function*() {
    const step = stepAt(f, i)!
    const record = f.execution.steps[i]!
    const late: { status: StepStatus; result: unknown; error: string; finished: boolean } = {
      status: "completed",
      result: result.encoded,
      error: "completed after the step had been given up; compensated",
      finished: true
    }
    if (step.compensate === undefined) {
      return { update: { steps: [{ index: i, ...late }] }, commands: [], outcome: "late", after: [] } satisfies Plan
    }
    const results = { ...f.decoded.results, [step.name]: result.decoded }
    const command = yield* Effect.result(sendCompensation(f, i, record.compensationAttempts + 1, results))
    if (command._tag === "Failure") {
      const message = `compensation of ${step.name} (completed late) could not be sent: ${command.failure}`
      return failedPlan(f, message, [{ index: i, ...late, status: "compensation_failed", error: message }], false)
    }
    return {
      update: { steps: [{ index: i, ...late, compensationStarted: true }] },
      commands: [command.success],
      outcome: "late",
      after: []
    } satisfies Plan
  })

/** An action's reply. */
const planActionReply = (f: Facts, reply: ReplyPayload): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const { saga } = f.execution
    const i = reply.step
    const record = f.execution.steps[i]!
    const outcome = yield* replyResult(stepAt(f, i)!, reply)
    if (
      saga.status === "running" && saga.currentStep === i && record.status === "pending"
    ) return yield* planCurrentAction(f, i, outcome)
    if (
      outcome.result !== undefined && record.status === "failed" && saga.status !== "running"
    ) return yield* planLateSuccess(f, i, outcome.result)
    return ignored
  })

/** A compensation's reply: compensate the step before, retry the compensation, or fail the saga. */
const planCompensationReply = (f: Facts, reply: ReplyPayload): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const { saga } = f.execution
    const i = reply.step
    const record = f.execution.steps[i]!
    const step = stepAt(f, i)!
    if (record.status !== "completed" || record.compensationAttempts === 0) return ignored
    const current = saga.status === "compensating" && saga.currentStep === i
    if (reply.outcome === "completed") {
      const done: StepUpdate = { index: i, status: "compensated", error: null, finished: true }
      const counted = SagaMetrics.compensated("compensated")
      if (!current) return { update: { steps: [done] }, commands: [], outcome: "late", after: [counted] } satisfies Plan
      return withAfterFirst([counted])(yield* compensateFrom(f, i - 1, undefined, [done]))
    }
    if (reply.attempt !== record.compensationAttempts) return ignored // an older attempt's failure: a newer one is under way
    const error = reply.error ?? "failed"
    if (!current) {
      const message = `compensation of ${step.name} failed: ${error}`
      return failedPlan(
        f,
        message,
        [{ index: i, status: "compensation_failed", error: message, finished: true }],
        false
      )
    }
    return yield* compensationFailed(f, i, error, reply.retryable !== false, false, Number.POSITIVE_INFINITY)
  })

/**
 * Decides the next state of an asynchronous saga and the commands to send with it: the whole
 * state machine, as a function of the stored execution and what happened.
 * @since 0.1.0
 * @category constructors
 */
export const planCommand = (
  definition: Any,
  execution: Execution,
  decoded: Decoded,
  trigger: Trigger
): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const f: Facts = { definition, execution, decoded, now: yield* Clock.currentTimeMillis }
    if (trigger._tag === "Overdue") return yield* planOverdue(f, trigger.maxCompensationAttempts)
    const reply = trigger.reply
    const record = execution.steps[reply.step]
    const step = stepAt(f, reply.step)
    if (record === undefined || step === undefined || step.name !== reply.stepName) return ignored
    return yield* (reply.kind === "action" ? planActionReply(f, reply) : planCompensationReply(f, reply))
  })

/**
 * Sagas: a sequence of steps, each an Effect with a compensating Effect. When a step fails (or
 * times out), the completed steps are compensated in reverse order. The state lives in a
 * `SagaStore` (Postgres in production) so that a crash at any point is recovered.
 *
 * - {@link make} starts a typed definition: `.step(...)` adds a step run in this process (for
 *   {@link run}), `.command(...)` a step carried out by another service through a command event and
 *   a reply event (for {@link start}).
 * - {@link run}: synchronous. Steps run in order; each outcome is persisted before the next step
 *   begins; on failure, compensation runs uninterruptibly, detached from the caller's interruption.
 * - {@link start}: asynchronous, with the outbox. The saga record and its first command commit in
 *   the caller's transaction; replies ({@link reply} on the participant, {@link handleReply} on the
 *   orchestrator) advance it, each state change committing with the next command.
 * - {@link recovery}: a worker (safe on every instance) that takes over sagas whose executor died,
 *   that are past their deadline or stuck, by compare-and-set on the version, and compensates them.
 *
 * Compensations must be idempotent: after a crash, a compensation that ran but whose outcome was
 * not yet recorded runs again.
 * @module
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Layer, Metric, Option, Pull, Schedule, Schema } from "effect"
import { describe as describeError, describeCause as causeText, InvalidConfig, type InvalidEvent, isRetryable, type NotInTransaction, StoreError } from "./Errors.ts"
import * as Event from "./Event.ts"
import type { EventDraft } from "./Event.ts"
import { every } from "./internal/periodic.ts"
import { pendingStep } from "./internal/sagaSteps.ts"
import * as Metrics from "./Metrics.ts"
import {
  InvalidSagaDefinition,
  InvalidSagaInput,
  SagaCompensationFailed,
  SagaConflict,
  SagaNotFound,
  SagaStepFailed,
  SagaStepTimeout
} from "./internal/sagaErrors.ts"
import { uuidv7 } from "./internal/uuid.ts"
import type { Message } from "./Message.ts"
import * as Outbox from "./Outbox.ts"
import { OutboxStore } from "./OutboxStore.ts"
import * as Retry from "./Retry.ts"
import {
  type Claim,
  type Execution,
  type SagaRecord,
  type SagaStatus,
  SagaStore,
  type SagaUpdate,
  type StepRecord,
  type StepStatus,
  type StepUpdate
} from "./SagaStore.ts"

export {
  InvalidSagaDefinition,
  InvalidSagaInput,
  SagaCompensationFailed,
  SagaConflict,
  SagaNotFound,
  SagaStepFailed,
  SagaStepTimeout
} from "./internal/sagaErrors.ts"
export type { SagaStatus, StepStatus } from "./SagaStore.ts"

/** The saga metrics: `tidings_saga_*`. */
export const metrics = Metrics.saga

/** Span names of the saga engine. */
export const spanNames = {
  run: "tidings.saga.run",
  step: "tidings.saga.step",
  compensate: "tidings.saga.compensate",
  start: "tidings.saga.start",
  reply: "tidings.saga.reply",
  recover: "tidings.saga.recover"
} as const

type AnyCodec = Schema.Codec<any, any, never, never>

// ---------------------------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------------------------

/** What a step's action and compensation are given. */
export interface StepContext<Input, Results> {
  readonly sagaId: string
  /** The saga definition's name. */
  readonly sagaType: string
  readonly input: Input
  /** Results of the steps before this one, decoded by their schemas. */
  readonly results: Results
  /** This step's name and position. */
  readonly step: string
  readonly index: number
  /** `<sagaId>/<step>`: the same on every retry and after a crash; give it to the services you call. */
  readonly idempotencyKey: string
}

/** How a step is compensated: its own timeout and retry schedule. */
export interface CompensationOptions {
  /**
   * Local steps: each compensation attempt fails after this long (default 30 s). Command steps: how
   * long to wait for the compensation's reply before sending it again (default: none, the recovery
   * worker's `stuckAfter` applies).
   */
  readonly timeout?: Duration.Input
  /**
   * Delays between attempts (any `Schedule`; its end ends the retries). Default for local steps:
   * 100 ms doubling, 5 retries; for command steps: 1 s doubling to 1 min, 5 retries. Errors with
   * `isRetryable === false` are not retried.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
}

/** A step run in this process (`.step`), for {@link run}. */
export interface StepOptions<Input, Results, S extends AnyCodec, R1, R2> {
  /** The step's work. Its result is stored, encoded by `result`, and available to later steps. */
  readonly action: (context: StepContext<Input, Results>) => Effect.Effect<S["Type"], unknown, R1>
  /** The result's schema (for storing it). Without one, the action returns nothing. */
  readonly result?: S
  /** Undoes the action; given its result. Must be idempotent. Without one, the step needs no undoing. */
  readonly compensate?: (context: StepContext<Input, Results>, result: S["Type"]) => Effect.Effect<unknown, unknown, R2>
  /** Each attempt of the action fails after this long (default: none). */
  readonly timeout?: Duration.Input
  /** Retries of the action (default: none). Errors with `isRetryable === false` are not retried. */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  readonly compensation?: CompensationOptions
}

/** A step carried out by another service (`.command`), for {@link start}. */
export interface CommandOptions<Input, Results, S extends AnyCodec> {
  /** The command event to send; the participant answers it with {@link reply}. */
  readonly send: (context: StepContext<Input, Results>) => EventDraft
  /** The schema of the reply's result. Without one, the reply carries none. */
  readonly result?: S
  /** The command undoing the step; given its result. Its participant must handle it idempotently. */
  readonly compensate?: (context: StepContext<Input, Results>, result: S["Type"]) => EventDraft
  /** No reply within this long: the step counts as failed (timed out) and the saga compensates (default: none). */
  readonly timeout?: Duration.Input
  readonly compensation?: CompensationOptions
}

interface Compensation {
  readonly timeout: Duration.Duration | undefined
  readonly retry: Schedule.Schedule<unknown, unknown>
}

/** A step run in this process. */
export interface LocalStep {
  readonly _tag: "Local"
  readonly name: string
  readonly result: AnyCodec
  readonly action: (context: StepContext<any, any>) => Effect.Effect<unknown, unknown, any>
  readonly compensate: ((context: StepContext<any, any>, result: any) => Effect.Effect<unknown, unknown, any>) | undefined
  readonly timeout: Duration.Duration | undefined
  readonly retry: Schedule.Schedule<unknown, unknown> | undefined
  readonly compensation: Compensation
}

/** A step carried out through a command event and a reply. */
export interface CommandStep {
  readonly _tag: "Command"
  readonly name: string
  readonly result: AnyCodec
  readonly send: (context: StepContext<any, any>) => EventDraft
  readonly compensate: ((context: StepContext<any, any>, result: any) => EventDraft) | undefined
  readonly timeout: Duration.Duration | undefined
  readonly compensation: Compensation
}

export type Step = LocalStep | CommandStep

/** `"local"` for `.step`, `"command"` for `.command`. */
export type StepKind = "local" | "command"

/**
 * A saga definition, and the builder of the next one: `.step` and `.command` return a new
 * definition with the step added (definitions are immutable). `Results` maps step names to their
 * results; `R` is what the steps' effects require; `Kind` the kinds of steps it holds.
 */
export interface SagaDefinition<Input, Results, R = never, Kind extends StepKind = never> {
  readonly name: string
  readonly input: Schema.Codec<Input, any, never, never>
  readonly steps: ReadonlyArray<Step>
  readonly step: <const N extends string, S extends AnyCodec = Schema.Void, R1 = never, R2 = never>(
    name: N,
    options: StepOptions<Input, Results, S, R1, R2>
  ) => SagaDefinition<Input, Results & { readonly [K in N]: S["Type"] }, R | R1 | R2, Kind | "local">
  readonly command: <const N extends string, S extends AnyCodec = Schema.Void>(
    name: N,
    options: CommandOptions<Input, Results, S>
  ) => SagaDefinition<Input, Results & { readonly [K in N]: S["Type"] }, R, Kind | "command">
  /** Phantom markers: what the steps require, and their kinds. */
  readonly "~requirements"?: (_: never) => R
  readonly "~kind"?: Kind
}

/** Any saga definition. */
export type Any = SagaDefinition<any, any, any, any>

/** What the steps of a definition require. */
export type Requirements<D> = D extends SagaDefinition<any, any, infer R, any> ? R : never

const defaultLocalCompensation: Compensation = {
  timeout: Duration.seconds(30),
  retry: Schedule.exponential("100 millis", 2).pipe(Schedule.upTo({ times: 5 }))
}
const defaultCommandCompensation: Compensation = {
  timeout: undefined,
  retry: Retry.exponentialBackoff({ base: "1 second", max: "1 minute" }).pipe(Schedule.upTo({ times: 5 }))
}

const durationOf = (path: string, input: Duration.Input | undefined): Duration.Duration | undefined => {
  if (input === undefined) return undefined
  const d = Duration.fromInputUnsafe(input)
  if (!Duration.isFinite(d) || Duration.toMillis(d) <= 0) throw new Error(`${path}: must be a finite positive duration, got ${String(input)}`)
  return d
}

const compensationOf = (path: string, options: CompensationOptions | undefined, fallback: Compensation): Compensation => ({
  timeout: options?.timeout === undefined ? fallback.timeout : durationOf(`${path}.compensation.timeout`, options.timeout),
  retry: options?.retry ?? fallback.retry
})

const build = (name: string, input: AnyCodec, steps: ReadonlyArray<Step>): Any => {
  const add = (step: Step): Any => {
    if (!/^[\w.:-]{1,100}$/.test(step.name)) throw new Error(`saga ${name}: step name ${JSON.stringify(step.name)} must be 1-100 characters of [A-Za-z0-9_.:-]`)
    if (steps.some((s) => s.name === step.name)) throw new Error(`saga ${name}: duplicate step name ${JSON.stringify(step.name)}`)
    return build(name, input, [...steps, step])
  }
  return {
    name,
    input,
    steps,
    step: (stepName: string, options: StepOptions<any, any, AnyCodec, any, any>) =>
      add({
        _tag: "Local",
        name: stepName,
        result: options.result ?? Schema.Void,
        // without a result schema, whatever the action returns is dropped (nothing is stored)
        action: options.result === undefined ? (context) => Effect.asVoid(options.action(context)) : options.action,
        compensate: options.compensate,
        timeout: durationOf(`${stepName}.timeout`, options.timeout),
        retry: options.retry,
        compensation: compensationOf(stepName, options.compensation, defaultLocalCompensation)
      }),
    command: (stepName: string, options: CommandOptions<any, any, AnyCodec>) =>
      add({
        _tag: "Command",
        name: stepName,
        result: options.result ?? Schema.Void,
        send: options.send,
        compensate: options.compensate,
        timeout: durationOf(`${stepName}.timeout`, options.timeout),
        compensation: compensationOf(stepName, options.compensation, defaultCommandCompensation)
      })
  } as Any
}

/**
 * Starts a saga definition: a name (stored as the saga's type; keep it stable) and an input schema.
 *
 * @example
 * const CreateOrder = Saga.make("create-order", { input: Schema.Struct({ orderId: Schema.String, cents: Schema.Int }) })
 *   .step("reserve", {
 *     result: Schema.Struct({ reservationId: Schema.String }),
 *     action: (ctx) => inventory.reserve(ctx.input.orderId),
 *     compensate: (ctx, r) => inventory.release(r.reservationId)
 *   })
 *   .step("charge", { action: (ctx) => payments.charge(ctx.results.reserve.reservationId, ctx.input.cents), timeout: "5 seconds" })
 */
export const make = <S extends AnyCodec>(name: string, options: { readonly input: S }): SagaDefinition<S["Type"], {}> => {
  if (!/^[\w.:-]{1,100}$/.test(name)) throw new Error(`saga name ${JSON.stringify(name)} must be 1-100 characters of [A-Za-z0-9_.:-]`)
  return build(name, options.input, []) as SagaDefinition<S["Type"], {}>
}

/** Saga definitions by name, for {@link handleReply} and {@link recovery}. */
export interface Registry<R = never> {
  readonly definitions: ReadonlyMap<string, Any>
  readonly "~requirements"?: (_: never) => R
}

/** A registry of definitions (names must be unique). */
export const registry = <const D extends ReadonlyArray<Any>>(...definitions: D): Registry<Requirements<D[number]>> => {
  const map = new Map<string, Any>()
  for (const d of definitions) {
    if (map.has(d.name) && map.get(d.name) !== d) throw new Error(`saga registry: two definitions named ${JSON.stringify(d.name)}`)
    map.set(d.name, d)
  }
  return { definitions: map }
}

// ---------------------------------------------------------------------------------------------
// Shared machinery
// ---------------------------------------------------------------------------------------------


/** Encodes a value with its schema into JSON (`undefined` → `null`). */
const encodeJson = (schema: AnyCodec, value: unknown): Effect.Effect<unknown, string> =>
  Schema.encodeUnknownEffect(schema)(value).pipe(
    Effect.mapError((e) => e.message),
    Effect.flatMap((encoded) => {
      if (encoded === undefined) return Effect.succeed(null)
      try {
        const json = JSON.stringify(encoded)
        return json === undefined ? Effect.fail("encodes to nothing") : Effect.succeed(JSON.parse(json) as unknown)
      } catch (e) {
        return Effect.fail(`not JSON-serializable: ${String(e)}`)
      }
    })
  )

/** Decodes stored JSON with its schema (a stored `null` may stand for `undefined`, e.g. `Schema.Void`). */
const decodeJson = (schema: AnyCodec, json: unknown): Effect.Effect<unknown, string> =>
  Schema.decodeUnknownEffect(schema)(json).pipe(
    Effect.catch((e) => json === null ? Schema.decodeUnknownEffect(schema)(undefined) : Effect.fail(e)),
    Effect.mapError((e) => e.message)
  )

const hasResult = (status: StepStatus) => status === "completed" || status === "compensated" || status === "compensation_failed"

interface Decoded {
  readonly input: unknown
  /** Decoded results by step name. */
  readonly results: Record<string, unknown>
}

/** Decodes a stored execution's input and results with the definition's schemas. */
const decodeExecution = (definition: Any, execution: Execution): Effect.Effect<Decoded, string> =>
  Effect.gen(function*() {
    const input = yield* decodeJson(definition.input, execution.saga.input).pipe(Effect.mapError((e) => `input: ${e}`))
    const results: Record<string, unknown> = {}
    for (const record of execution.steps) {
      const step = definition.steps[record.index]
      if (step === undefined || !hasResult(record.status)) continue
      results[step.name] = yield* decodeJson(step.result, record.result).pipe(Effect.mapError((e) => `result of ${step.name}: ${e}`))
    }
    return { input, results }
  })

const contextOf = (definition: Any, sagaId: string, input: unknown, results: Record<string, unknown>, index: number): StepContext<any, any> => {
  const name = definition.steps[index]!.name
  const before: Record<string, unknown> = {}
  for (let i = 0; i < index; i++) {
    const n = definition.steps[i]!.name
    if (n in results) before[n] = results[n]
  }
  return { sagaId, sagaType: definition.name, input, results: before, step: name, index, idempotencyKey: `${sagaId}/${name}` }
}

const kindOf = (definition: Any): "local" | "command" | "mixed" | "empty" => {
  const local = definition.steps.some((s) => s._tag === "Local")
  const command = definition.steps.some((s) => s._tag === "Command")
  return local && command ? "mixed" : local ? "local" : command ? "command" : "empty"
}

const finished = (status: SagaStatus) => Metric.update(Metric.withAttributes(Metrics.saga.finished, { status }), 1)
const compensated = (outcome: "compensated" | "failed") => Metric.update(Metric.withAttributes(Metrics.saga.compensations, { outcome }), 1)
const stepTook = (saga: string, step: string, ms: number) =>
  Metric.update(Metric.withAttributes(Metrics.saga.stepDuration, { saga, step }), Math.max(0, ms) / 1000)

/** A step runner's handle on its saga: compare-and-set writes that track the version. */
interface Tracker {
  readonly store: SagaStore["Service"]
  readonly id: string
  version: number
}

// A write that fails on a database blip is retried briefly. Writes are never interrupted halfway:
// whether they committed must be known before the next compare-and-set.
const writeRetry = Schedule.exponential("50 millis").pipe(Schedule.upTo({ times: 4 }))

const persist = (t: Tracker, update: SagaUpdate): Effect.Effect<SagaRecord, SagaConflict | SagaNotFound | StoreError> =>
  Effect.suspend(() => t.store.update(t.id, t.version, update)).pipe(
    Effect.retry({ schedule: writeRetry, while: (e) => e._tag === "StoreError" && e.isRetryable }),
    Effect.tap((record) => Effect.sync(() => void (t.version = record.version))),
    Effect.uninterruptible
  )

/** Runs `effect` while renewing the claim every third of the lease. */
const withHeartbeat = (store: SagaStore["Service"], id: string, claim: Claim) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.scoped(Effect.gen(function*() {
    const period = Duration.millis(Math.max(10, Math.floor(Duration.toMillis(claim.lease) / 3)))
    const beat: Effect.Effect<void> = Effect.sleep(period).pipe(
      Effect.andThen(store.heartbeat(id, claim)),
      Effect.catch((e) => Effect.as(Effect.logWarning("saga heartbeat failed", e), true)),
      // false: the saga ended (its claim released) or another instance took it over (its next write will conflict)
      Effect.flatMap((held) => held ? beat : Effect.logDebug(`saga ${id}: claim no longer held; heartbeat stops`))
    )
    yield* Effect.forkScoped(beat)
    return yield* effect
  }))

/** Delay before retry n of a schedule (`None` once the schedule is done). */
const retryDelay = (schedule: Schedule.Schedule<unknown, unknown>) =>
  Effect.map(Schedule.toStep(schedule), (step) => (input: unknown): Effect.Effect<Option.Option<Duration.Duration>> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => step(now, input)).pipe(
      Effect.map(([, delay]) => Option.some(delay)),
      Pull.catchDone(() => Effect.succeedNone)
    ))

// ---------------------------------------------------------------------------------------------
// Synchronous mode
// ---------------------------------------------------------------------------------------------

/** The outcome of a saga run to completion. */
export interface Completed<Results> {
  readonly id: string
  readonly results: Results
}

/** What {@link run} can fail with. */
export type RunError =
  | SagaStepFailed
  | SagaStepTimeout
  | SagaCompensationFailed
  | SagaConflict
  | SagaNotFound
  | InvalidSagaInput
  | InvalidSagaDefinition
  | StoreError

/** Options of {@link run}. */
export interface RunOptions {
  /** The saga id, a UUID (default: a new UUIDv7). */
  readonly id?: string
  /** This instance's name in `claimed_by` (default: one random name per process). */
  readonly owner?: string
  /**
   * How long the claim on the saga holds without a heartbeat (default 30 s; renewed every third of
   * it). When this process dies, a recovery worker takes the saga over once the lease has expired.
   */
  readonly lease?: Duration.Input
  /** Compensation attempts of one step, across crashes, before the saga is failed (default 10). */
  readonly maxCompensationAttempts?: number
}

const processOwner = `saga-${Math.random().toString(36).slice(2, 10)}`

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The saga id: the caller's (a UUID), or a new UUIDv7. */
const sagaId = (name: string, id: string | undefined): Effect.Effect<string, InvalidSagaInput> =>
  id === undefined
    ? Effect.map(Clock.currentTimeMillis, uuidv7)
    : uuidPattern.test(id)
    ? Effect.succeed(id.toLowerCase())
    : Effect.fail(new InvalidSagaInput({ saga: name, message: `the saga id must be a UUID, got ${JSON.stringify(id).slice(0, 80)}` }))

/** An action's failure (or timeout, when `timeoutMs` is set). */
class ActionFailed {
  readonly _tag = "ActionFailed"
  readonly error: unknown
  readonly timeoutMs: number | undefined
  constructor(error: unknown, timeoutMs: number | undefined) {
    this.error = error
    this.timeoutMs = timeoutMs
  }
}

/** The engine's own failure (a store write) during a step: told apart from the action's, which may be a `StoreError` too. */
class EngineFailed {
  readonly _tag = "EngineFailed"
  readonly error: SagaConflict | SagaNotFound | StoreError
  constructor(error: SagaConflict | SagaNotFound | StoreError) {
    this.error = error
  }
}

/** Runs a local step's action: its attempts (each persisted first), timeout and retries, in a span. */
const runAction = (definition: Any, t: Tracker, step: LocalStep, context: StepContext<any, any>) => {
  const attempt = persist(t, {
    currentStep: context.index,
    deadline: step.timeout ?? null,
    steps: [{ index: context.index, attemptStarted: true }]
  }).pipe(
    Effect.mapError((e) => new EngineFailed(e)),
    Effect.andThen(Effect.suspend(() => step.action(context)).pipe(Effect.mapError((e) => new ActionFailed(e, undefined))))
  )
  const timed = step.timeout === undefined ? attempt : attempt.pipe(
    Effect.timeoutOrElse({
      duration: step.timeout,
      orElse: () => Effect.fail(new ActionFailed(undefined, Duration.toMillis(step.timeout!)))
    })
  )
  const retried = step.retry === undefined ? timed : timed.pipe(
    Effect.retry({ schedule: step.retry, while: (e) => e instanceof ActionFailed && (e.timeoutMs !== undefined || isRetryable(e.error)) })
  )
  return retried.pipe(
    Effect.withSpan(spanNames.step, {
      attributes: { "tidings.saga.id": t.id, "tidings.saga.type": definition.name, "tidings.saga.step": step.name, "tidings.saga.step_index": context.index }
    })
  )
}

type LocalOutcome =
  | { readonly _tag: "Compensated" }
  | { readonly _tag: "Failed"; readonly step: string; readonly message: string; readonly cause: unknown }

/**
 * Compensates, in reverse order, the completed local steps of an execution (as recorded), each with
 * its timeout and retry schedule, persisting every attempt and outcome. Ends the saga
 * `compensated`, or `failed` at the first compensation that keeps failing.
 */
const compensateLocal = (
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
      if (record.status !== "completed" || step === undefined || step._tag !== "Local" || step.compensate === undefined) continue
      const compensate = step.compensate
      const context = contextOf(definition, t.id, decoded.input, decoded.results, j)
      const result = decoded.results[step.name]
      const next = yield* retryDelay(step.compensation.retry)
      let attempts = record.compensationAttempts
      let lastError = record.error ?? "no attempt finished"
      let lastCause: unknown = undefined
      while (true) {
        if (attempts >= maxAttempts) {
          return yield* failSaga(t, j, step.name, `compensation of ${step.name} failed ${attempts} times (the most allowed): ${lastError}`, lastCause)
        }
        yield* persist(t, { currentStep: j, deadline: step.compensation.timeout ?? null, steps: [{ index: j, compensationStarted: true }] })
        attempts++
        const timeout = step.compensation.timeout
        const attempt = Effect.suspend(() => compensate(context, result))
        const exit = yield* Effect.exit(
          (timeout === undefined ? attempt : attempt.pipe(
            Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.fail(new ActionFailed(undefined, Duration.toMillis(timeout))) })
          )).pipe(
            Effect.withSpan(spanNames.compensate, {
              attributes: { "tidings.saga.id": t.id, "tidings.saga.type": definition.name, "tidings.saga.step": step.name, "tidings.saga.attempt": attempts }
            })
          )
        )
        if (Exit.isSuccess(exit)) {
          yield* persist(t, { steps: [{ index: j, status: "compensated", error: null, finished: true }] })
          yield* compensated("compensated")
          break
        }
        if (Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
        const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
        lastError = error instanceof ActionFailed && error.timeoutMs !== undefined
          ? `timed out after ${Duration.format(Duration.millis(error.timeoutMs))}`
          : causeText(exit.cause)
        lastCause = error ?? Cause.squash(exit.cause)
        yield* Effect.logWarning(`saga ${t.id}: compensation of ${step.name} failed (attempt ${attempts}): ${lastError}`)
        const delay = error === undefined || !isRetryable(error) ? Option.none() : yield* next(error)
        if (Option.isNone(delay)) {
          return yield* failSaga(t, j, step.name, `compensation of ${step.name} failed after ${attempts} attempts: ${lastError}`, lastCause)
        }
        yield* persist(t, { steps: [{ index: j, error: lastError }] })
        yield* Effect.sleep(delay.value)
      }
    }
    yield* persist(t, { status: "compensated", deadline: null, claim: null })
    yield* finished("compensated")
    return { _tag: "Compensated" } as const
  })

const failSaga = (t: Tracker, index: number, step: string, message: string, cause: unknown) =>
  Effect.gen(function*() {
    yield* persist(t, {
      status: "failed",
      error: message,
      deadline: null,
      claim: null,
      steps: [{ index, status: "compensation_failed", error: message, finished: true }]
    })
    yield* compensated("failed")
    yield* finished("failed")
    yield* Effect.logError(`saga ${t.id} failed: ${message}`)
    return { _tag: "Failed", step, message, cause } as LocalOutcome
  })

/**
 * Runs the compensation in a fiber of its own, detached from the caller, and waits for it without
 * being interruptible: the caller's interruption can neither stop a compensation nor return before
 * it ends (it takes effect afterwards).
 */
const detached = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.uninterruptible(Effect.flatMap(Effect.forkDetach(effect, { uninterruptible: false }), Fiber.join))

/**
 * Runs a saga in this process. The execution is created (claimed by this instance, renewed by a
 * heartbeat), then each step runs in order and its outcome is persisted before the next begins.
 * On a failure or timeout, the completed steps are compensated in reverse order; compensation is
 * uninterruptible and detached from the caller. Interrupting the caller during a step stops that
 * step and compensates the completed ones.
 *
 * Succeeds with the results when every step completed. Fails with `SagaStepFailed` /
 * `SagaStepTimeout` once the saga is `compensated`, with `SagaCompensationFailed` when a compensation
 * kept failing (the saga is `failed`), and with `SagaConflict` / `StoreError` when the saga was lost
 * to another instance or the database (a recovery worker then finishes it).
 */
export const run = <Input, Results, R>(
  definition: SagaDefinition<Input, Results, R, "local">,
  input: Input,
  options: RunOptions = {}
): Effect.Effect<Completed<Results>, RunError, SagaStore | R> =>
  Effect.gen(function*() {
    const def = definition as Any
    if (kindOf(def) === "command" || kindOf(def) === "mixed") {
      return yield* new InvalidSagaDefinition({ saga: def.name, message: "Saga.run runs local steps only; use Saga.start for command steps" })
    }
    const store = yield* SagaStore
    const encodedInput = yield* encodeJson(def.input, input).pipe(Effect.mapError((message) => new InvalidSagaInput({ saga: def.name, message })))
    const lease = options.lease === undefined ? Duration.seconds(30) : Duration.fromInputUnsafe(options.lease)
    const maxAttempts = options.maxCompensationAttempts ?? 10
    if (!Duration.isFinite(lease) || Duration.toMillis(lease) <= 0 || !Number.isInteger(maxAttempts) || maxAttempts < 1) {
      return yield* new InvalidSagaDefinition({ saga: def.name, message: "Saga.run: lease must be a positive duration, maxCompensationAttempts a positive integer" })
    }
    const claim: Claim = { owner: options.owner ?? processOwner, lease }
    const id = yield* sagaId(def.name, options.id)
    const created = yield* store.create({ id, type: def.name, input: encodedInput, steps: def.steps.map((s) => s.name), claim })
    yield* Metric.update(Metrics.saga.started, 1)
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
          yield* stepTook(def.name, step.name, (yield* Clock.currentTimeMillis) - began)
          let failure: { readonly text: string; readonly error: SagaStepFailed | SagaStepTimeout; readonly cause: Cause.Cause<unknown> } | undefined
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
              if (last) yield* finished("completed")
              continue
            }
            const text = `the result does not match its schema: ${encoded.failure}`
            failure = { text, error: new SagaStepFailed({ sagaId: id, saga: def.name, step: step.name, message: text }), cause: Cause.die(text) }
          } else {
            const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
            // The store failed or the saga was lost: nothing more is ours to do (recovery takes over).
            if (error instanceof EngineFailed) return yield* Effect.fail(error.error)
            if (error instanceof ActionFailed && error.timeoutMs !== undefined) {
              const text = `timed out after ${Duration.format(Duration.millis(error.timeoutMs))}`
              failure = { text, error: new SagaStepTimeout({ sagaId: id, saga: def.name, step: step.name, timeoutMs: error.timeoutMs }), cause: exit.cause }
            } else if (error instanceof ActionFailed) {
              const text = describeError(error.error)
              failure = { text, error: new SagaStepFailed({ sagaId: id, saga: def.name, step: step.name, message: text, cause: error.error }), cause: exit.cause }
            } else if (Cause.hasInterruptsOnly(exit.cause)) {
              const text = "interrupted by the caller"
              failure = { text, error: new SagaStepFailed({ sagaId: id, saga: def.name, step: step.name, message: text }), cause: exit.cause }
            } else {
              const text = causeText(exit.cause)
              failure = { text, error: new SagaStepFailed({ sagaId: id, saga: def.name, step: step.name, message: text, cause: Cause.squash(exit.cause) }), cause: exit.cause }
            }
          }
          const reason = `step ${step.name} failed: ${failure.text}`
          yield* Effect.logWarning(`saga ${id} (${def.name}): ${reason}; compensating`)
          yield* persist(t, { status: "compensating", error: reason, deadline: null, steps: [{ index: i, status: "failed", error: failure.text, finished: true }] })
          records[i] = { ...records[i]!, status: "failed" }
          const outcome = yield* detached(compensateLocal(def, t, { input, results }, records, maxAttempts))
          if (Cause.hasInterruptsOnly(failure.cause)) return yield* Effect.failCause(failure.cause as Cause.Cause<never>)
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
          yield* finished("completed")
        }
        return { id, results: results as Results }
      })
    )
    return yield* body.pipe(withHeartbeat(store, id, claim))
  }).pipe(Effect.withSpan(spanNames.run, { attributes: { "tidings.saga.type": definition.name } })) as Effect.Effect<
    Completed<Results>,
    RunError,
    SagaStore | R
  >

// ---------------------------------------------------------------------------------------------
// Asynchronous mode
// ---------------------------------------------------------------------------------------------

/** Headers that mark a command event as a saga's; {@link reply} reads them. */
export const CommandHeaders = {
  sagaId: "tidings-saga-id",
  sagaType: "tidings-saga-type",
  step: "tidings-saga-step",
  stepName: "tidings-saga-step-name",
  kind: "tidings-saga-kind",
  attempt: "tidings-saga-attempt"
} as const

/** A command: the action of a step, or its compensation. */
export type CommandKind = "action" | "compensation"

/** The payload of a reply event. */
export const ReplyPayload = Schema.Struct({
  sagaId: Schema.String,
  sagaType: Schema.String,
  step: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  stepName: Schema.String,
  kind: Schema.Literals(["action", "compensation"]),
  attempt: Schema.Int,
  outcome: Schema.Literals(["completed", "failed"]),
  /** The step's result, encoded (JSON), for a completed action. */
  result: Schema.optionalKey(Schema.Unknown),
  error: Schema.optionalKey(Schema.String),
  /** For a failed compensation: false when retrying cannot help. */
  retryable: Schema.optionalKey(Schema.Boolean)
})
export type ReplyPayload = typeof ReplyPayload.Type

/** The reply event type: participants append it, the orchestrator's consumer hands it to {@link handleReply}. */
export const ReplyEvent = Event.define("tidings.saga.reply", { aggregateType: "saga", schema: ReplyPayload })

/**
 * What sagas read of a received message: a core `Message` (in-memory broker), or what a broker
 * consumer has (e.g. a RabbitMQ delivery: its message id, event type, decoded payload and headers).
 */
export interface Received {
  readonly id?: string | undefined
  readonly type: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>>
}

/** A saga command as a participant receives it. */
export interface Command<M extends Received = Received> {
  readonly sagaId: string
  readonly sagaType: string
  readonly step: number
  readonly stepName: string
  readonly kind: CommandKind
  readonly attempt: number
  /** `<sagaId>/<step>` for actions, `<sagaId>/<step>/compensation` for compensations. */
  readonly idempotencyKey: string
  readonly message: M
}

/** The saga command a message carries, if it is one. */
export const commandOf = <M extends Received>(message: M): Option.Option<Command<M>> => {
  const header = (name: string): string | undefined => {
    const value = message.headers[name]
    return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined
  }
  const sagaId = header(CommandHeaders.sagaId)
  const sagaType = header(CommandHeaders.sagaType)
  const step = Number(header(CommandHeaders.step))
  const stepName = header(CommandHeaders.stepName)
  const kind = header(CommandHeaders.kind)
  const attempt = Number(header(CommandHeaders.attempt) ?? "1")
  if (sagaId === undefined || sagaType === undefined || stepName === undefined || !Number.isInteger(step) || (kind !== "action" && kind !== "compensation")) {
    return Option.none()
  }
  return Option.some({
    sagaId,
    sagaType,
    step,
    stepName,
    kind,
    attempt: Number.isInteger(attempt) ? attempt : 1,
    idempotencyKey: kind === "action" ? `${sagaId}/${stepName}` : `${sagaId}/${stepName}/compensation`,
    message
  })
}

/** What a participant answers. */
export type Outcome =
  | { readonly _tag: "Completed"; readonly result?: unknown }
  | { readonly _tag: "Failed"; readonly error: string; readonly retryable?: boolean }

/** The command was carried out; `result` is the step's result, encoded as its schema expects (JSON). */
export const completed = (result?: unknown): Outcome => result === undefined ? { _tag: "Completed" } : { _tag: "Completed", result }

/** The command failed. A failed action compensates the saga; a failed compensation is retried while `retryable`. */
export const failed = (error: string, options: { readonly retryable?: boolean } = {}): Outcome =>
  options.retryable === undefined ? { _tag: "Failed", error } : { _tag: "Failed", error, retryable: options.retryable }

/**
 * A participant's answer to a command: appends the reply event in the current transaction (the one
 * holding the participant's own changes), so that the reply is sent if and only if they commit.
 */
export const reply = (command: Command<Received>, outcome: Outcome): Effect.Effect<Message, InvalidEvent | NotInTransaction | StoreError, OutboxStore> =>
  Outbox.append(ReplyEvent, {
    aggregateId: command.sagaId,
    payload: {
      sagaId: command.sagaId,
      sagaType: command.sagaType,
      step: command.step,
      stepName: command.stepName,
      kind: command.kind,
      attempt: command.attempt,
      outcome: outcome._tag === "Completed" ? "completed" : "failed",
      ...(outcome._tag === "Completed" && outcome.result !== undefined ? { result: outcome.result } : {}),
      ...(outcome._tag === "Failed" ? { error: outcome.error } : {}),
      ...(outcome._tag === "Failed" && outcome.retryable !== undefined ? { retryable: outcome.retryable } : {})
    }
  })

/** Builds a command of a saga, with its headers, checked against its event schema before anything is written. */
const buildCommand = (
  sagaId: string,
  definition: Any,
  index: number,
  kind: CommandKind,
  attempt: number,
  make: () => EventDraft
): Effect.Effect<EventDraft, string> =>
  Effect.gen(function*() {
    let draft: EventDraft
    try {
      draft = make()
    } catch (e) {
      return yield* Effect.fail(`building the ${kind} command threw: ${String(e)}`)
    }
    const headers: Record<string, string> = {
      ...draft.headers,
      [CommandHeaders.sagaId]: sagaId,
      [CommandHeaders.sagaType]: definition.name,
      [CommandHeaders.step]: String(index),
      [CommandHeaders.stepName]: definition.steps[index]!.name,
      [CommandHeaders.kind]: kind,
      [CommandHeaders.attempt]: String(attempt)
    }
    const withHeaders: EventDraft = { ...draft, headers }
    yield* Outbox.encode(withHeaders, yield* Clock.currentTimeMillis, Option.none()).pipe(Effect.mapError((e) => e.message))
    return withHeaders
  })

/** What {@link start} can fail with. */
export type StartError = InvalidSagaInput | InvalidSagaDefinition | InvalidEvent | NotInTransaction | StoreError

/** Options of {@link start}. */
export interface StartOptions {
  /** The saga id, a UUID (default: a new UUIDv7). */
  readonly id?: string
}

/**
 * Starts an asynchronous saga: writes the saga record and its first command (through
 * `Outbox.append`) in the current transaction — open one around the business change and call
 * `start` inside it, so that the three commit together — and returns the saga id at once. The
 * saga advances as {@link handleReply} receives the participants' replies.
 */
export const start = <Input, Results, R>(
  definition: SagaDefinition<Input, Results, R, "command">,
  input: Input,
  options: StartOptions = {}
): Effect.Effect<string, StartError, SagaStore | OutboxStore> =>
  Effect.gen(function*() {
    const def = definition as Any
    const kind = kindOf(def)
    if (kind !== "command") {
      return yield* new InvalidSagaDefinition({
        saga: def.name,
        message: kind === "empty" ? "a saga needs at least one step" : "Saga.start runs command steps only; use Saga.run for local steps"
      })
    }
    const store = yield* SagaStore
    const outbox = yield* OutboxStore
    const encodedInput = yield* encodeJson(def.input, input).pipe(Effect.mapError((message) => new InvalidSagaInput({ saga: def.name, message })))
    const id = yield* sagaId(def.name, options.id)
    const first = def.steps[0] as CommandStep
    const context = contextOf(def, id, input, {}, 0)
    const command = yield* buildCommand(id, def, 0, "action", 1, () => first.send(context)).pipe(
      Effect.mapError((message) => new InvalidSagaInput({ saga: def.name, message: `step ${first.name}: ${message}` }))
    )
    yield* outbox.withTransaction(store.withTransaction(Effect.gen(function*() {
      yield* store.create({
        id,
        type: def.name,
        input: encodedInput,
        steps: def.steps.map((s) => s.name),
        ...(first.timeout === undefined ? {} : { deadline: first.timeout }),
        stepUpdates: [{ index: 0, attemptStarted: true }]
      })
      yield* Outbox.appendAll([command])
    })))
    yield* Metric.update(Metrics.saga.started, 1)
    return id
  }).pipe(Effect.withSpan(spanNames.start, { attributes: { "tidings.saga.type": definition.name } }))

/** What {@link handleReply} did with a reply. */
export type ReplyOutcome =
  /** The next step's command was sent. */
  | "advanced"
  /** Every step completed. */
  | "completed"
  /** A compensation command was sent. */
  | "compensating"
  /** Every completed step is compensated. */
  | "compensated"
  /** A compensation will be sent again after its retry delay. */
  | "retrying"
  /** A compensation kept failing: the saga is `failed`. */
  | "failed"
  /** A reply that came after its step timed out: recorded, and the step compensated. */
  | "late"
  /** Not a reply this saga waits for (a duplicate, or for a step already settled): nothing changed. */
  | "ignored"

interface Plan {
  readonly update: SagaUpdate
  readonly commands: ReadonlyArray<EventDraft>
  readonly outcome: ReplyOutcome
  /** Metrics to record after the commit. */
  readonly after: ReadonlyArray<Effect.Effect<void>>
}

const ignored: Plan = { update: {}, commands: [], outcome: "ignored", after: [] }

type Trigger =
  | { readonly _tag: "Reply"; readonly reply: ReplyPayload }
  | { readonly _tag: "Overdue"; readonly maxCompensationAttempts: number }

/**
 * Decides the next state of an asynchronous saga and the commands to send with it: the whole
 * state machine, as a function of the stored execution and what happened.
 */
const planCommand = (definition: Any, execution: Execution, decoded: Decoded, trigger: Trigger): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const { saga, steps } = execution
    const sagaId = saga.id
    const now = yield* Clock.currentTimeMillis
    const stepAt = (i: number) => definition.steps[i] as CommandStep | undefined
    const sendCompensation = (k: number, attempt: number) => {
      const step = stepAt(k)!
      const context = contextOf(definition, sagaId, decoded.input, decoded.results, k)
      return buildCommand(sagaId, definition, k, "compensation", attempt, () => step.compensate!(context, decoded.results[step.name]))
    }

    /**
     * Compensates backwards from step `from`: sends the compensation of the last completed step with
     * one, or ends the saga `compensated` when there is none. `extra` are updates of other steps.
     */
    const compensateFrom = (from: number, reason: string | undefined, extra: ReadonlyArray<StepUpdate>): Effect.Effect<Plan> =>
      Effect.gen(function*() {
        for (let k = from; k >= 0; k--) {
          const step = stepAt(k)
          const record = steps[k]
          if (step === undefined || record === undefined || record.status !== "completed" || step.compensate === undefined) continue
          const command = yield* Effect.result(sendCompensation(k, record.compensationAttempts + 1))
          if (command._tag === "Failure") {
            const message = `compensation of ${step.name} could not be sent: ${command.failure}`
            return {
              update: { status: "failed", error: message, deadline: null, claim: null, steps: [...extra, { index: k, status: "compensation_failed", error: message, finished: true }] },
              commands: [],
              outcome: "failed",
              after: [compensated("failed"), finished("failed")]
            } satisfies Plan
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
          update: { status: "compensated", ...(reason === undefined ? {} : { error: reason }), deadline: null, claim: null, steps: extra },
          commands: [],
          outcome: "compensated",
          after: [finished("compensated")]
        } satisfies Plan
      })

    /** A compensation failed (or got no reply): retry it after the schedule's delay, or fail the saga. */
    const compensationFailed = (j: number, error: string, retryable: boolean, resendNow: boolean, maxAttempts: number): Effect.Effect<Plan> =>
      Effect.gen(function*() {
        const step = stepAt(j)!
        const attempts = steps[j]!.compensationAttempts
        const delay = retryable && attempts < maxAttempts ? yield* Retry.delayFor(step.compensation.retry, attempts, error) : Option.none()
        if (Option.isNone(delay)) {
          const message = `compensation of ${step.name} failed after ${attempts} attempts: ${error}`
          return {
            update: { status: "failed", error: message, deadline: null, claim: null, steps: [{ index: j, status: "compensation_failed", error: message, finished: true }] },
            commands: [],
            outcome: "failed",
            after: [compensated("failed"), finished("failed")]
          } satisfies Plan
        }
        if (!resendNow) {
          return {
            update: { deadline: delay.value, claim: null, steps: [{ index: j, error }] },
            commands: [],
            outcome: "retrying",
            after: []
          } satisfies Plan
        }
        const command = yield* Effect.result(sendCompensation(j, attempts + 1))
        if (command._tag === "Failure") return yield* compensationFailed(j, command.failure, false, false, maxAttempts)
        return {
          update: { deadline: step.compensation.timeout ?? null, claim: null, steps: [{ index: j, error, compensationStarted: true }] },
          commands: [command.success],
          outcome: "compensating",
          after: []
        } satisfies Plan
      })

    if (trigger._tag === "Overdue") {
      const i = saga.currentStep
      const record = steps[i]
      const step = stepAt(i)
      if (record === undefined || step === undefined) return ignored
      if (saga.status === "running") {
        const error = step.timeout === undefined ? "no reply (stuck)" : `timed out: no reply within ${Duration.format(step.timeout)}`
        return yield* compensateFrom(i - 1, `step ${step.name} failed: ${error}`, [{ index: i, status: "failed", error, finished: true }])
      }
      if (saga.status === "compensating") {
        if (record.status !== "completed") return yield* compensateFrom(i - 1, undefined, [])
        return yield* compensationFailed(i, record.error ?? "no reply to the compensation", true, true, trigger.maxCompensationAttempts)
      }
      return ignored
    }

    const reply = trigger.reply
    const i = reply.step
    const record = steps[i]
    const step = stepAt(i)
    if (record === undefined || step === undefined || step.name !== reply.stepName) return ignored

    if (reply.kind === "action") {
      let result: { readonly encoded: unknown; readonly decoded: unknown } | undefined
      let error = reply.error ?? "failed"
      if (reply.outcome === "completed") {
        const value = yield* Effect.result(decodeJson(step.result, reply.result ?? null))
        const encoded = value._tag === "Success" ? yield* Effect.result(encodeJson(step.result, value.success)) : undefined
        if (value._tag === "Success" && encoded?._tag === "Success") result = { encoded: encoded.success, decoded: value.success }
        else error = `the reply's result does not match its schema: ${value._tag === "Failure" ? value.failure : encoded?._tag === "Failure" ? encoded.failure : ""}`
      }
      const took = record.startedAt === null ? [] : [stepTook(definition.name, step.name, now - record.startedAt.getTime())]
      if (saga.status === "running" && saga.currentStep === i && record.status === "pending") {
        if (result === undefined) {
          return yield* compensateFrom(i - 1, `step ${step.name} failed: ${error}`, [{ index: i, status: "failed", error, finished: true }]).pipe(
            Effect.map((plan) => ({ ...plan, after: [...took, ...plan.after] }))
          )
        }
        const done: StepUpdate = { index: i, status: "completed", result: result.encoded, error: null, finished: true }
        if (i === definition.steps.length - 1) {
          return { update: { status: "completed", deadline: null, claim: null, steps: [done] }, commands: [], outcome: "completed", after: [...took, finished("completed")] } satisfies Plan
        }
        const next = stepAt(i + 1)!
        const results = { ...decoded.results, [step.name]: result.decoded }
        const command = yield* Effect.result(
          buildCommand(sagaId, definition, i + 1, "action", 1, () => next.send(contextOf(definition, sagaId, decoded.input, results, i + 1)))
        )
        if (command._tag === "Failure") {
          const nextError = `its command could not be sent: ${command.failure}`
          return yield* compensateFrom(i, `step ${next.name} failed: ${nextError}`, [done, { index: i + 1, status: "failed", error: nextError, finished: true }]).pipe(
            Effect.map((plan) => ({ ...plan, after: [...took, ...plan.after] }))
          )
        }
        return {
          update: { currentStep: i + 1, deadline: next.timeout ?? null, claim: null, steps: [done, { index: i + 1, attemptStarted: true }] },
          commands: [command.success],
          outcome: "advanced",
          after: took
        } satisfies Plan
      }
      // A success that comes after the step was given up (timed out): the participant did the work,
      // so it is recorded and undone at once.
      if (result !== undefined && record.status === "failed" && saga.status !== "running") {
        const late: { status: StepStatus; result: unknown; error: string; finished: boolean } = {
          status: "completed",
          result: result.encoded,
          error: "completed after the step had been given up; compensated",
          finished: true
        }
        if (step.compensate === undefined) return { update: { steps: [{ index: i, ...late }] }, commands: [], outcome: "late", after: [] } satisfies Plan
        const results = { ...decoded.results, [step.name]: result.decoded }
        const context = contextOf(definition, sagaId, decoded.input, results, i)
        const command = yield* Effect.result(buildCommand(sagaId, definition, i, "compensation", record.compensationAttempts + 1, () => step.compensate!(context, result.decoded)))
        if (command._tag === "Failure") {
          const message = `compensation of ${step.name} (completed late) could not be sent: ${command.failure}`
          return {
            update: { status: "failed", error: message, steps: [{ index: i, ...late, status: "compensation_failed", error: message }] },
            commands: [],
            outcome: "failed",
            after: [compensated("failed"), ...(saga.status === "failed" ? [] : [finished("failed")])]
          } satisfies Plan
        }
        return { update: { steps: [{ index: i, ...late, compensationStarted: true }] }, commands: [command.success], outcome: "late", after: [] } satisfies Plan
      }
      return ignored
    }

    // A compensation's reply.
    if (record.status !== "completed" || record.compensationAttempts === 0) return ignored
    const current = saga.status === "compensating" && saga.currentStep === i
    if (reply.outcome === "completed") {
      const done: StepUpdate = { index: i, status: "compensated", error: null, finished: true }
      if (!current) return { update: { steps: [done] }, commands: [], outcome: "late", after: [compensated("compensated")] } satisfies Plan
      return yield* compensateFrom(i - 1, undefined, [done]).pipe(Effect.map((plan) => ({ ...plan, after: [compensated("compensated"), ...plan.after] })))
    }
    if (reply.attempt !== record.compensationAttempts) return ignored // an older attempt's failure: a newer one is under way
    const error = reply.error ?? "failed"
    if (!current) {
      const message = `compensation of ${step.name} failed: ${error}`
      return {
        update: { status: "failed", error: message, steps: [{ index: i, status: "compensation_failed", error: message, finished: true }] },
        commands: [],
        outcome: "failed",
        after: [compensated("failed"), ...(saga.status === "failed" ? [] : [finished("failed")])]
      } satisfies Plan
    }
    return yield* compensationFailed(i, error, reply.retryable !== false, false, Number.POSITIVE_INFINITY)
  })

/** Loads a saga and applies a plan with compare-and-set, committing the update and its commands together. */
const advance = (
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
      yield* store.update(sagaId, execution.saga.version, { status: "failed", error: message, deadline: null, claim: null })
      yield* Effect.logError(`saga ${sagaId} failed: ${message}`)
      return { update: {}, commands: [], outcome: "failed", after: [finished("failed")] } satisfies Plan
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

// Lost compare-and-sets (a concurrent reply or recovery) and serialization failures: load and decide again.
const conflictRetry = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.upTo({ times: 8 }))
const isConflict = (e: { readonly _tag: string }) => e._tag === "SagaConflict" || (e._tag === "StoreError" && (e as StoreError).isRetryable)

/** What {@link handleReply} can fail with. */
export type HandleReplyError = InvalidSagaDefinition | SagaConflict | InvalidEvent | NotInTransaction | StoreError

/**
 * Advances an asynchronous saga with a reply event; call it from the consumer of reply events (it
 * ignores other events). In one transaction: reads the saga, records the step's outcome, and sends
 * the next command (or the next compensation), with compare-and-set on the version. Duplicates and
 * replies for settled steps change nothing (`"ignored"`), so at-least-once delivery is fine.
 */
export const handleReply = <R>(registry: Registry<R>, message: Received): Effect.Effect<ReplyOutcome, HandleReplyError, SagaStore | OutboxStore> =>
  Effect.gen(function*() {
    if (message.type !== ReplyEvent.type) return "ignored" as ReplyOutcome
    const decodedReply = Schema.decodeUnknownExit(ReplyPayload)(message.payload)
    if (Exit.isFailure(decodedReply)) {
      yield* Effect.logWarning(`saga reply ${message.id ?? ""} does not decode; ignored`, decodedReply.cause)
      return "ignored" as ReplyOutcome
    }
    const payload = decodedReply.value
    const definition = registry.definitions.get(payload.sagaType)
    if (definition === undefined) {
      return yield* new InvalidSagaDefinition({ saga: payload.sagaType, message: "no definition registered under this name" })
    }
    const store = yield* SagaStore
    const outbox = yield* OutboxStore
    return yield* advance(store, outbox, definition, payload.sagaId, (execution, decoded) =>
      planCommand(definition, execution, decoded, { _tag: "Reply", reply: payload })).pipe(
      Effect.retry({ schedule: conflictRetry, while: isConflict }),
      Effect.catchTag("SagaNotFound", () => Effect.as(Effect.logWarning(`saga reply ${message.id ?? ""} for unknown saga ${payload.sagaId}; ignored`), "ignored" as const))
    )
  }).pipe(Effect.withSpan(spanNames.reply, { attributes: { "messaging.message.id": message.id ?? "" } }))

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/** A saga's state, for status endpoints. */
export interface State extends SagaRecord {
  readonly steps: ReadonlyArray<StepRecord>
}

/** The status, steps (outcomes, results, errors, attempts, timestamps) and error of a saga. */
export const get = (id: string): Effect.Effect<State, SagaNotFound | StoreError, SagaStore> =>
  SagaStore.use((store) => store.load(id)).pipe(
    Effect.flatMap((execution) => execution === undefined ? Effect.fail(new SagaNotFound({ sagaId: id })) : Effect.succeed({ ...execution.saga, steps: execution.steps }))
  )

// ---------------------------------------------------------------------------------------------
// Recovery
// ---------------------------------------------------------------------------------------------

/** Settings of the recovery worker. */
export interface RecoveryConfig<R> {
  /** The definitions this instance can recover; sagas of other types are left to instances that have them. */
  readonly registry: Registry<R>
  /** How often to look for sagas to recover (default 1 s, jittered ×0.8..1.2). */
  readonly interval?: Duration.Input
  /** An unclaimed saga without a deadline counts as stuck after this long without a change (default 5 min). */
  readonly stuckAfter?: Duration.Input
  /** The claim held while compensating local steps, renewed by a heartbeat (default 30 s). */
  readonly lease?: Duration.Input
  /** Sagas looked at per round (default 20). */
  readonly batchSize?: number
  /** Compensation attempts of one step, across crashes and resends, before the saga is failed (default 10). */
  readonly maxCompensationAttempts?: number
  /** This instance's name in `claimed_by` (default: a random name per process). */
  readonly owner?: string
}

interface RecoverySettings {
  readonly interval: Duration.Duration
  readonly stuckAfter: Duration.Duration
  readonly lease: Duration.Duration
  readonly batchSize: number
  readonly maxCompensationAttempts: number
  readonly owner: string
}

const recoverySettings = <R>(config: RecoveryConfig<R>): Effect.Effect<RecoverySettings, InvalidConfig> =>
  Effect.try({
    try: () => {
      const duration = (path: string, input: Duration.Input | undefined, fallback: Duration.Input) => {
        const d = Duration.fromInputUnsafe(input ?? fallback)
        if (!Duration.isFinite(d) || Duration.toMillis(d) <= 0) throw new InvalidConfig({ path, message: `must be a finite positive duration, got ${String(input)}` })
        return d
      }
      const integer = (path: string, input: number | undefined, fallback: number) => {
        const n = input ?? fallback
        if (!Number.isInteger(n) || n < 1 || n > 100_000) throw new InvalidConfig({ path, message: `must be an integer from 1 to 100000, got ${String(input)}` })
        return n
      }
      return {
        interval: duration("interval", config.interval, "1 second"),
        stuckAfter: duration("stuckAfter", config.stuckAfter, "5 minutes"),
        lease: duration("lease", config.lease, "30 seconds"),
        batchSize: integer("batchSize", config.batchSize, 20),
        maxCompensationAttempts: integer("maxCompensationAttempts", config.maxCompensationAttempts, 10),
        owner: config.owner ?? processOwner
      }
    },
    catch: (e) => e instanceof InvalidConfig ? e : new InvalidConfig({ path: "", message: String(e) })
  })

/** Recovers one claimed saga. */
const recoverSaga = (definition: Any, claimed: SagaRecord, seen: SagaRecord, s: RecoverySettings) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    yield* Metric.update(Metrics.saga.recoveries, 1)
    const why = seen.claimedUntil !== null
      ? `its executor ${seen.claimedBy ?? "?"} stopped (claim expired)`
      : seen.deadline !== null
      ? "it is past its deadline"
      : `it has not changed for ${Duration.format(s.stuckAfter)}`
    yield* Effect.logInfo(`recovering saga ${claimed.id} (${claimed.type}, ${claimed.status}): ${why}`)
    const kind = kindOf(definition)
    if (kind === "command") {
      const outbox = yield* Effect.serviceOption(OutboxStore)
      if (Option.isNone(outbox)) return yield* Effect.die(new Error("recovering an asynchronous saga needs an OutboxStore"))
      return yield* advance(store, outbox.value, definition, claimed.id, (execution, decoded) =>
        execution.saga.version === claimed.version
          ? planCommand(definition, execution, decoded, { _tag: "Overdue", maxCompensationAttempts: s.maxCompensationAttempts })
          : Effect.succeed(undefined))
    }
    const claim: Claim = { owner: s.owner, lease: s.lease }
    const t: Tracker = { store, id: claimed.id, version: claimed.version }
    return yield* Effect.gen(function*() {
      const execution = yield* store.load(claimed.id)
      if (execution === undefined || execution.saga.version !== t.version) return "ignored" as ReplyOutcome
      const decoded = yield* Effect.result(decodeExecution(definition, execution))
      if (decoded._tag === "Failure") {
        const message = `stored data does not decode with the definition: ${decoded.failure}`
        yield* persist(t, { status: "failed", error: message, deadline: null, claim: null })
        yield* finished("failed")
        return "failed" as ReplyOutcome
      }
      let steps = execution.steps
      if (execution.saga.status === "running") {
        const i = execution.saga.currentStep
        const inFlight = steps[i]
        const stepName = definition.steps[i]?.name ?? String(i)
        const reason = `step ${stepName} was interrupted: ${why}`
        const updates: Array<StepUpdate> = inFlight !== undefined && inFlight.status === "pending" && inFlight.attempts > 0
          ? [{ index: i, status: "failed", error: `interrupted: ${why}`, finished: true }]
          : []
        yield* persist(t, { status: "compensating", error: reason, deadline: null, steps: updates })
        steps = steps.map((st) => st.index === i && updates.length > 0 ? { ...st, status: "failed" as const } : st)
      }
      const outcome = yield* detached(compensateLocal(definition, t, decoded.success, steps, s.maxCompensationAttempts))
      return outcome._tag === "Compensated" ? "compensated" as ReplyOutcome : "failed" as ReplyOutcome
    }).pipe(withHeartbeat(store, claimed.id, claim))
  }).pipe(Effect.withSpan(spanNames.recover, { attributes: { "tidings.saga.id": claimed.id, "tidings.saga.type": claimed.type } }))

/** What one recovery round did. */
export interface RecoveryReport {
  /** Sagas this instance claimed and resumed, with what became of them. */
  readonly recovered: ReadonlyArray<{ readonly id: string; readonly type: string; readonly outcome: ReplyOutcome | "error" }>
}

/**
 * One recovery round: finds sagas whose executor died, that are past their deadline or stuck,
 * claims each with compare-and-set on its version (only one instance wins), and resumes it.
 * Local steps are compensated in this process (as recorded in the store); a command saga is moved
 * on by sending its next compensation, or by resending a compensation that got no reply.
 */
export const recoverOnce = <R>(config: RecoveryConfig<R>): Effect.Effect<RecoveryReport, InvalidConfig | StoreError, SagaStore | R> =>
  Effect.gen(function*() {
    const s = yield* recoverySettings(config)
    return yield* recoverRound(config.registry, s)
  }) as Effect.Effect<RecoveryReport, InvalidConfig | StoreError, SagaStore | R>

const recoverRound = (registry: Registry<any>, s: RecoverySettings) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    const counts = yield* store.countByStatus
    for (const [status, n] of Object.entries(counts)) yield* Metric.update(Metric.withAttributes(Metrics.saga.byStatus, { status }), n)
    const due = yield* store.findRecoverable({ stuckAfter: s.stuckAfter, limit: s.batchSize, types: [...registry.definitions.keys()] })
    const recovered: Array<RecoveryReport["recovered"][number]> = []
    for (const seen of due) {
      const definition = registry.definitions.get(seen.type)
      if (definition === undefined) continue
      const claimed = yield* store.claim(seen.id, seen.version, { owner: s.owner, lease: s.lease })
      if (claimed === undefined) continue
      const outcome = yield* recoverSaga(definition, claimed, seen, s).pipe(
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : Effect.as(Effect.logWarning(`saga ${seen.id}: recovery failed; it will be retried`, cause), "error" as const)
        )
      )
      recovered.push({ id: seen.id, type: seen.type, outcome })
    }
    return { recovered }
  })

/**
 * The recovery worker: a recovery round every `interval` while the layer lives. Safe to run on
 * every instance: claims are compare-and-set, so each saga is resumed by one of them. Closing the
 * layer waits for a compensation under way to end (each is bounded by its timeout and retries).
 */
export const recovery = <R>(config: RecoveryConfig<R>): Layer.Layer<never, InvalidConfig, SagaStore | R> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const s = yield* recoverySettings(config)
    yield* Effect.forkScoped(every(s.interval, "saga recovery round", recoverRound(config.registry, s), { jitter: 0.2 }))
  })) as Layer.Layer<never, InvalidConfig, SagaStore | R>

/**
 * What a saga is: a name, an input schema and its steps, built with {@link make} and `.step` /
 * `.command`, and a {@link Registry} of definitions by name. Definitions are plain immutable
 * values; the engine (`Saga.run`, `Saga.start`, `Saga.handleReply`, `SagaRecovery`) executes them.
 * `Saga` re-exports everything here.
 * @since 0.1.0
 * @module
 */
import { Duration, Effect, Schedule, Schema } from "effect"
import { InvalidConfig } from "./Errors.ts"
import type { EventDraft } from "./Event.ts"
import * as Retry from "./Retry.ts"
import { InvalidSagaDefinition } from "./SagaErrors.ts"
import * as Settings from "./Settings.ts"

type AnyCodec = Schema.Codec<any, any, never, never>

/**
 * What a step's action and compensation are given.
 * @since 0.1.0
 * @category models
 */
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

/**
 * How a step is compensated: its own timeout and retry schedule.
 * @since 0.1.0
 * @category models
 */
export interface CompensationOptions {
  /**
   * Local steps: each compensation attempt fails after this long (default 30 s). Command steps: how
   * long to wait for the compensation's reply before sending it again (default: none, the recovery
   * worker's `stuckAfter` applies).
   */
  readonly timeout?: Duration.Input
  /**
   * Delays between attempts (any `Schedule`; its end ends the retries). Default for local steps:
   * 100 ms doubling, 5 retries; for command steps: 1 s doubling to 1 min, 5 retries.
   *
   * What is retried, for local steps: an attempt that timed out, and an error that is transient by
   * `Errors.isRetryable` (its `isRetryable` or `retryable` is `true`, or an Effect `TimeoutError`);
   * any other error (a plain `Error`, a tagged error that says nothing) fails the saga at once. For
   * command steps: a failed compensation reply unless it says `retryable: false` (`Saga.failed`),
   * and a compensation that got no reply within `timeout`.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
}

/**
 * A step run in this process (`.step`), for `Saga.run`.
 * @since 0.1.0
 * @category models
 */
export interface StepOptions<Input, Results, S extends AnyCodec, R1, R2> {
  /** The step's work. Its result is stored, encoded by `result`, and available to later steps. */
  readonly action: (context: StepContext<Input, Results>) => Effect.Effect<S["Type"], unknown, R1>
  /** The result's schema (for storing it). Without one, the action returns nothing. */
  readonly result?: S
  /** Undoes the action; given its result. Must be idempotent. Without one, the step needs no undoing. */
  readonly compensate?: (context: StepContext<Input, Results>, result: S["Type"]) => Effect.Effect<unknown, unknown, R2>
  /** Each attempt of the action fails after this long (default: none). */
  readonly timeout?: Duration.Input
  /**
   * Retries of the action (default: none). What is retried: an attempt that timed out (`timeout`),
   * and an error that is transient by `Errors.isRetryable` (its `isRetryable` or `retryable` is
   * `true`, or an Effect `TimeoutError`). Any other error fails the step at once: a business rule or
   * a decode failure would fail the same way again.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  readonly compensation?: CompensationOptions
}

/**
 * A step carried out by another service (`.command`), for `Saga.start`.
 * @since 0.1.0
 * @category models
 */
export interface CommandOptions<Input, Results, S extends AnyCodec> {
  /** The command event to send; the participant answers it with `Saga.reply`. */
  readonly send: (context: StepContext<Input, Results>) => EventDraft
  /** The schema of the reply's result. Without one, the reply carries none. */
  readonly result?: S
  /** The command undoing the step; given its result. Its participant must handle it idempotently. */
  readonly compensate?: (context: StepContext<Input, Results>, result: S["Type"]) => EventDraft
  /** No reply within this long: the step counts as failed (timed out) and the saga compensates (default: none). */
  readonly timeout?: Duration.Input
  readonly compensation?: CompensationOptions
}

/**
 * A step's compensation settings, resolved.
 * @since 0.1.0
 * @category models
 */
export interface Compensation {
  readonly timeout: Duration.Duration | undefined
  readonly retry: Schedule.Schedule<unknown, unknown>
}

/**
 * A step run in this process.
 * @since 0.1.0
 * @category models
 */
export interface LocalStep {
  readonly _tag: "Local"
  readonly name: string
  readonly result: AnyCodec
  readonly action: (context: StepContext<any, any>) => Effect.Effect<unknown, unknown, any>
  readonly compensate:
    | ((context: StepContext<any, any>, result: any) => Effect.Effect<unknown, unknown, any>)
    | undefined
  readonly timeout: Duration.Duration | undefined
  readonly retry: Schedule.Schedule<unknown, unknown> | undefined
  readonly compensation: Compensation
}

/**
 * A step carried out through a command event and a reply.
 * @since 0.1.0
 * @category models
 */
export interface CommandStep {
  readonly _tag: "Command"
  readonly name: string
  readonly result: AnyCodec
  readonly send: (context: StepContext<any, any>) => EventDraft
  readonly compensate: ((context: StepContext<any, any>, result: any) => EventDraft) | undefined
  readonly timeout: Duration.Duration | undefined
  readonly compensation: Compensation
}

/**
 * A step of a definition.
 * @since 0.1.0
 * @category models
 */
export type Step = LocalStep | CommandStep

/**
 * `"local"` for `.step`, `"command"` for `.command`.
 * @since 0.1.0
 * @category models
 */
export type StepKind = "local" | "command"

/**
 * A saga definition, and the builder of the next one: `.step` and `.command` return a new
 * definition with the step added (definitions are immutable). `Results` maps step names to their
 * results; `R` is what the steps' effects require; `Kind` the kinds of steps it holds.
 * @since 0.1.0
 * @category models
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

/**
 * Any saga definition.
 * @since 0.1.0
 * @category models
 */
export type Any = SagaDefinition<any, any, any, any>

/**
 * What the steps of a definition require.
 * @since 0.1.0
 * @category models
 */
export type Requirements<D> = D extends SagaDefinition<any, any, infer R, any> ? R : never

const defaultLocalCompensation: Compensation = {
  timeout: Duration.seconds(30),
  retry: Schedule.exponential("100 millis", 2).pipe(Schedule.upTo({ times: 5 }))
}
const defaultCommandCompensation: Compensation = {
  timeout: undefined,
  retry: Retry.exponentialBackoff({ base: "1 second", max: "1 minute" }).pipe(Schedule.upTo({ times: 5 }))
}

const namePattern = /^[\w.:-]{1,100}$/

// A definition is built when its module loads: a mistake in it is a programming error, thrown at once.
const durationOf = (saga: string, path: string, input: Duration.Input | undefined): Duration.Duration | undefined => {
  if (input === undefined) return undefined
  try {
    return Settings.decodeSync(Settings.duration(), input, path)
  } catch (e) {
    throw new InvalidSagaDefinition({
      saga,
      message: e instanceof InvalidConfig ? `${e.path}: ${e.message}` : String(e)
    })
  }
}

const compensationOf = (
  saga: string,
  step: string,
  options: CompensationOptions | undefined,
  fallback: Compensation
): Compensation => ({
  timeout: options?.timeout === undefined
    ? fallback.timeout
    : durationOf(saga, `${step}.compensation.timeout`, options.timeout),
  retry: options?.retry ?? fallback.retry
})

const build = (name: string, input: AnyCodec, steps: ReadonlyArray<Step>): Any => {
  const add = (step: Step): Any => {
    if (!namePattern.test(step.name)) {
      throw new InvalidSagaDefinition({
        saga: name,
        message: `step name ${JSON.stringify(step.name)} must be 1-100 characters of [A-Za-z0-9_.:-]`
      })
    }
    if (steps.some((s) => s.name === step.name)) {
      throw new InvalidSagaDefinition({ saga: name, message: `duplicate step name ${JSON.stringify(step.name)}` })
    }
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
        timeout: durationOf(name, `${stepName}.timeout`, options.timeout),
        retry: options.retry,
        compensation: compensationOf(name, stepName, options.compensation, defaultLocalCompensation)
      }),
    command: (stepName: string, options: CommandOptions<any, any, AnyCodec>) =>
      add({
        _tag: "Command",
        name: stepName,
        result: options.result ?? Schema.Void,
        send: options.send,
        compensate: options.compensate,
        timeout: durationOf(name, `${stepName}.timeout`, options.timeout),
        compensation: compensationOf(name, stepName, options.compensation, defaultCommandCompensation)
      })
  } as Any
}

/**
 * Starts a saga definition: a name (stored as the saga's type; keep it stable) and an input schema.
 * A bad name, a duplicate step name or a non-positive timeout throws `InvalidSagaDefinition`.
 *
 * @example
 * const CreateOrder = Saga.make("create-order", { input: Schema.Struct({ orderId: Schema.String, cents: Schema.Int }) })
 *   .step("reserve", {
 *     result: Schema.Struct({ reservationId: Schema.String }),
 *     action: (ctx) => inventory.reserve(ctx.input.orderId),
 *     compensate: (ctx, r) => inventory.release(r.reservationId)
 *   })
 *   .step("charge", { action: (ctx) => payments.charge(ctx.results.reserve.reservationId, ctx.input.cents), timeout: "5 seconds" })
 * @since 0.1.0
 * @category constructors
 */
export const make = <S extends AnyCodec>(
  name: string,
  options: { readonly input: S }
): SagaDefinition<S["Type"], {}> => {
  if (!namePattern.test(name)) {
    throw new InvalidSagaDefinition({
      saga: name.slice(0, 100),
      message: `saga name ${JSON.stringify(name)} must be 1-100 characters of [A-Za-z0-9_.:-]`
    })
  }
  return build(name, options.input, []) as SagaDefinition<S["Type"], {}>
}

/**
 * Saga definitions by name, for `Saga.handleReply` and the recovery worker.
 * @since 0.1.0
 * @category models
 */
export interface Registry<R = never> {
  readonly definitions: ReadonlyMap<string, Any>
  readonly "~requirements"?: (_: never) => R
}

/**
 * A registry of definitions (names must be unique: two different definitions under one name throw
 * `InvalidSagaDefinition`).
 * @since 0.1.0
 * @category constructors
 */
export const registry = <const D extends ReadonlyArray<Any>>(...definitions: D): Registry<Requirements<D[number]>> => {
  const map = new Map<string, Any>()
  for (const d of definitions) {
    if (map.has(d.name) && map.get(d.name) !== d) {
      throw new InvalidSagaDefinition({
        saga: d.name,
        message: `saga registry: two definitions named ${JSON.stringify(d.name)}`
      })
    }
    map.set(d.name, d)
  }
  return { definitions: map }
}

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
 *
 * This module is the entry point; the parts live in `SagaDefinition` (definitions and the builder),
 * `SagaCommand` (the participants' side of commands and replies), `SagaRecovery` (the worker) and
 * `SagaErrors`, all re-exported here.
 * @since 0.1.0
 * @module
 */
import { Clock, type Duration, Effect, Schema } from "effect"
import { type InvalidConfig, type InvalidEvent, isRetryable, type NotInTransaction, type StoreError } from "./Errors.ts"
import { advance, conflictRetry } from "./internal/sagaAdvance.ts"
import { encodeJson } from "./internal/sagaCodec.ts"
import { buildCommand } from "./internal/sagaCommandDraft.ts"
import { contextOf, kindOf } from "./internal/sagaContext.ts"
import * as SagaMetrics from "./internal/sagaMetrics.ts"
import { planCommand } from "./internal/sagaPlan.ts"
import { runLocal } from "./internal/sagaRunLocal.ts"
import { spanName, spanNames as spans } from "./internal/sagaSpans.ts"
import { processOwner } from "./internal/sagaTracker.ts"
import { uuidv7 } from "./internal/uuid.ts"
import * as Metrics from "./Metrics.ts"
import * as Outbox from "./Outbox.ts"
import { OutboxStore } from "./OutboxStore.ts"
import { type Received, ReplyEvent, type ReplyOutcome, ReplyPayload } from "./SagaCommand.ts"
import type { Any, CommandStep, Registry, SagaDefinition } from "./SagaDefinition.ts"
import {
  InvalidSagaDefinition,
  InvalidSagaInput,
  type SagaCompensationFailed,
  type SagaConflict,
  SagaNotFound,
  type SagaStepFailed,
  type SagaStepTimeout
} from "./SagaErrors.ts"
import { type SagaRecord, SagaStore, type StepRecord } from "./SagaStore.ts"
import * as Settings from "./Settings.ts"

export * from "./SagaCommand.ts"
export * from "./SagaDefinition.ts"
export * from "./SagaErrors.ts"
export {
  /**
   * @since 0.1.0
   * @category combinators
   */
  recoverOnce,
  /**
   * @since 0.1.0
   * @category layers
   */
  recovery,
  /**
   * @since 0.1.0
   * @category config
   */
  type RecoveryConfig,
  /**
   * @since 0.1.0
   * @category models
   */
  type RecoveryReport
} from "./SagaRecovery.ts"
export type {
  /**
   * @since 0.1.0
   * @category models
   */
  SagaStatus,
  /**
   * @since 0.1.0
   * @category models
   */
  StepStatus
} from "./SagaStore.ts"

/**
 * The saga metrics: `tidings_saga_*` (defined in `Metrics.saga`).
 * @since 0.1.0
 * @category metrics
 */
export const metrics = Metrics.saga

/**
 * Span names of the saga engine.
 * @since 0.1.0
 * @category constants
 */
export const spanNames = spans

// ---------------------------------------------------------------------------------------------
// Synchronous mode
// ---------------------------------------------------------------------------------------------

/**
 * The outcome of a saga run to completion.
 * @since 0.1.0
 * @category models
 */
export interface Completed<Results> {
  readonly id: string
  readonly results: Results
}

/**
 * What {@link run} can fail with.
 * @since 0.1.0
 * @category errors
 */
export type RunError =
  | SagaStepFailed
  | SagaStepTimeout
  | SagaCompensationFailed
  | SagaConflict
  | SagaNotFound
  | InvalidSagaInput
  | InvalidSagaDefinition
  | InvalidConfig
  | StoreError

/**
 * Options of {@link run}.
 * @since 0.1.0
 * @category models
 */
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

/**
 * The settings among {@link RunOptions}, with their defaults, decoded by `Settings.decode`.
 * @since 0.1.0
 * @category config
 */
export const RunConfigSchema: Schema.Struct<{
  readonly lease: Settings.Defaulted<Settings.DurationSetting>
  readonly maxCompensationAttempts: Settings.Defaulted<Settings.IntSetting>
  readonly owner: Schema.optional<Schema.String>
}> = Schema.Struct({
  lease: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
  maxCompensationAttempts: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(10))),
  owner: Schema.optional(Schema.String.check(Schema.isNonEmpty()))
})

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The saga id: the caller's (a UUID), or a new UUIDv7. */
const sagaIdOf = (name: string, id: string | undefined): Effect.Effect<string, InvalidSagaInput> =>
  id === undefined
    ? Effect.map(Clock.currentTimeMillis, uuidv7)
    : uuidPattern.test(id)
    ? Effect.succeed(id.toLowerCase())
    : Effect.fail(
      new InvalidSagaInput({
        saga: name,
        message: `the saga id must be a UUID, got ${JSON.stringify(id).slice(0, 80)}`
      })
    )

const encodeInput = (def: Any, input: unknown) =>
  encodeJson(def.input, input).pipe(Effect.mapError((message) => new InvalidSagaInput({ saga: def.name, message })))

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
 * to another instance or the database (a recovery worker then finishes it). Bad options fail with
 * `InvalidConfig`, a bad input or id with `InvalidSagaInput`; neither writes anything.
 * @since 0.1.0
 * @category execution
 */
export const run = <Input, Results, R>(
  definition: SagaDefinition<Input, Results, R, "local">,
  input: Input,
  options: RunOptions = {}
): Effect.Effect<Completed<Results>, RunError, SagaStore | R> =>
  Effect.gen(function*() {
    const def = definition as Any
    if (kindOf(def) === "command" || kindOf(def) === "mixed") {
      return yield* new InvalidSagaDefinition({
        saga: def.name,
        message: "Saga.run runs local steps only; use Saga.start for command steps"
      })
    }
    const encodedInput = yield* encodeInput(def, input)
    const { id: _, ...settings } = options
    const s = yield* Settings.decode(RunConfigSchema, settings)
    const id = yield* sagaIdOf(def.name, options.id)
    const claim = { owner: s.owner ?? processOwner, lease: s.lease }
    return yield* runLocal(def, { id, input, encodedInput, claim, maxCompensationAttempts: s.maxCompensationAttempts })
  }).pipe(
    Effect.withSpan(spanName("run", definition.name), { attributes: { "tidings.saga.type": definition.name } })
  ) as Effect.Effect<
    Completed<Results>,
    RunError,
    SagaStore | R
  >

// ---------------------------------------------------------------------------------------------
// Asynchronous mode
// ---------------------------------------------------------------------------------------------

/**
 * What {@link start} can fail with.
 * @since 0.1.0
 * @category errors
 */
export type StartError = InvalidSagaInput | InvalidSagaDefinition | InvalidEvent | NotInTransaction | StoreError

/**
 * Options of {@link start}.
 * @since 0.1.0
 * @category models
 */
export interface StartOptions {
  /** The saga id, a UUID (default: a new UUIDv7). */
  readonly id?: string
}

/**
 * Starts an asynchronous saga: writes the saga record and its first command (through
 * `Outbox.append`) in the current transaction — open one around the business change and call
 * `start` inside it, so that the three commit together — and returns the saga id at once. The
 * saga advances as {@link handleReply} receives the participants' replies.
 * @since 0.1.0
 * @category execution
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
        message: kind === "empty"
          ? "a saga needs at least one step"
          : "Saga.start runs command steps only; use Saga.run for local steps"
      })
    }
    const store = yield* SagaStore
    const outbox = yield* OutboxStore
    const encodedInput = yield* encodeInput(def, input)
    const id = yield* sagaIdOf(def.name, options.id)
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
    yield* SagaMetrics.started
    return id
  }).pipe(Effect.withSpan(spanName("start", definition.name), { attributes: { "tidings.saga.type": definition.name } }))

/**
 * What {@link handleReply} can fail with.
 * @since 0.1.0
 * @category errors
 */
export type HandleReplyError = InvalidSagaDefinition | SagaConflict | InvalidEvent | NotInTransaction | StoreError

/**
 * Advances an asynchronous saga with a reply event; call it from the consumer of reply events (it
 * ignores other events). In one transaction: reads the saga, records the step's outcome, and sends
 * the next command (or the next compensation), with compare-and-set on the version. Duplicates and
 * replies for settled steps change nothing (`"ignored"`), so at-least-once delivery is fine. A lost
 * compare-and-set or a transient store failure (`Errors.isRetryable`) is retried a few times.
 * `message` is any delivery with an id, type, payload and headers (any `Consumer.Delivery`).
 * @since 0.1.0
 * @category execution
 */
export const handleReply = <R>(
  registry: Registry<R>,
  message: Received
): Effect.Effect<ReplyOutcome, HandleReplyError, SagaStore | OutboxStore> =>
  Effect.gen(function*() {
    if (message.type !== ReplyEvent.type) return "ignored" as ReplyOutcome
    const decodedReply = Schema.decodeUnknownExit(ReplyPayload)(message.payload)
    if (decodedReply._tag === "Failure") {
      yield* Effect.logWarning(`saga reply ${message.id ?? ""} does not decode; ignored`, decodedReply.cause)
      return "ignored" as ReplyOutcome
    }
    const payload = decodedReply.value
    const definition = registry.definitions.get(payload.sagaType)
    if (definition === undefined) {
      return yield* new InvalidSagaDefinition({
        saga: payload.sagaType,
        message: "no definition registered under this name"
      })
    }
    const store = yield* SagaStore
    const outbox = yield* OutboxStore
    return yield* advance(store, outbox, definition, payload.sagaId, (execution, decoded) =>
      planCommand(definition, execution, decoded, { _tag: "Reply", reply: payload })).pipe(
        Effect.retry({ schedule: conflictRetry, while: isRetryable }),
        Effect.catchTag("SagaNotFound", () =>
          Effect.as(
            Effect.logWarning(`saga reply ${message.id ?? ""} for unknown saga ${payload.sagaId}; ignored`),
            "ignored" as const
          )),
        // The step's outcome, as a command step has no span of its own in this process.
        Effect.withSpan(spanName("step", payload.stepName), {
          attributes: {
            "tidings.saga.id": payload.sagaId,
            "tidings.saga.type": payload.sagaType,
            "tidings.saga.step": payload.stepName,
            "tidings.saga.step_index": payload.step,
            "tidings.saga.step_kind": payload.kind,
            "tidings.saga.step_outcome": payload.outcome
          }
        })
      )
  }).pipe(Effect.withSpan(spanNames.reply, { attributes: { "messaging.message.id": message.id ?? "" } }))

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/**
 * A saga's state, for status endpoints.
 * @since 0.1.0
 * @category models
 */
export interface State extends SagaRecord {
  readonly steps: ReadonlyArray<StepRecord>
}

/**
 * The status, steps (outcomes, results, errors, attempts, timestamps) and error of a saga.
 * @since 0.1.0
 * @category accessors
 */
export const get = (id: string): Effect.Effect<State, SagaNotFound | StoreError, SagaStore> =>
  SagaStore.use((store) => store.load(id)).pipe(
    Effect.flatMap((execution) =>
      execution === undefined
        ? Effect.fail(new SagaNotFound({ sagaId: id }))
        : Effect.succeed({ ...execution.saga, steps: execution.steps })
    )
  )

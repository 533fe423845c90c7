/**
 * The recovery worker: takes over sagas whose executor died (its claim expired), that are past
 * their deadline, or that have not changed for `stuckAfter`, by compare-and-set on the version (one
 * instance wins each), and moves them on. Local steps are compensated in this process, as the store
 * recorded them; a command saga is moved on by sending its next compensation, or by resending one
 * that got no reply. Safe to run on every instance. `Saga` re-exports {@link recovery},
 * {@link recoverOnce} and their types.
 * @since 0.1.0
 * @module
 */
import { Cause, Duration, Effect, Layer, Option, Schema } from "effect"
import type { InvalidConfig, StoreError } from "./Errors.ts"
import { every } from "./internal/periodic.ts"
import { advance } from "./internal/sagaAdvance.ts"
import { decodeExecution } from "./internal/sagaCodec.ts"
import { compensateLocal, detached } from "./internal/sagaCompensateLocal.ts"
import { kindOf } from "./internal/sagaContext.ts"
import * as SagaMetrics from "./internal/sagaMetrics.ts"
import { planCommand } from "./internal/sagaPlan.ts"
import { spanName } from "./internal/sagaSpans.ts"
import { persist, processOwner, type Tracker, withHeartbeat } from "./internal/sagaTracker.ts"
import * as Metrics from "./Metrics.ts"
import { OutboxStore } from "./OutboxStore.ts"
import type { ReplyOutcome } from "./SagaCommand.ts"
import type { Any, Registry } from "./SagaDefinition.ts"
import { type Claim, type SagaRecord, SagaStore, type StepUpdate } from "./SagaStore.ts"
import * as Settings from "./Settings.ts"

/**
 * The worker's settings, with their defaults (everything but the registry): what
 * {@link RecoveryConfig} accepts besides `registry`, decoded by `Settings.decode`.
 * @since 0.1.0
 * @category config
 */
export const ConfigSchema: Schema.Struct<{
  /** How often to look for sagas to recover (jittered ×0.8..1.2). */
  readonly interval: Settings.Defaulted<Settings.DurationSetting>
  /** An unclaimed saga without a deadline counts as stuck after this long without a change. */
  readonly stuckAfter: Settings.Defaulted<Settings.DurationSetting>
  /** The claim held while compensating local steps, renewed by a heartbeat. */
  readonly lease: Settings.Defaulted<Settings.DurationSetting>
  /** Sagas looked at per round. */
  readonly batchSize: Settings.Defaulted<Settings.IntSetting>
  /** Compensation attempts of one step, across crashes and resends, before the saga is failed. */
  readonly maxCompensationAttempts: Settings.Defaulted<Settings.IntSetting>
  /** This instance's name in `claimed_by` (default: a random name per process). */
  readonly owner: Schema.optional<Schema.String>
}> = Schema.Struct({
  /** How often to look for sagas to recover (jittered ×0.8..1.2). */
  interval: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("1 second"))),
  /** An unclaimed saga without a deadline counts as stuck after this long without a change. */
  stuckAfter: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("5 minutes"))),
  /** The claim held while compensating local steps, renewed by a heartbeat. */
  lease: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
  /** Sagas looked at per round. */
  batchSize: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(20))),
  /** Compensation attempts of one step, across crashes and resends, before the saga is failed. */
  maxCompensationAttempts: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(10))),
  /** This instance's name in `claimed_by` (default: a random name per process). */
  owner: Schema.optional(Schema.String.check(Schema.isNonEmpty()))
})

/**
 * The worker's settings, decoded.
 * @since 0.1.0
 * @category config
 */
export type Config = typeof ConfigSchema.Type

/**
 * Settings of the recovery worker.
 * @since 0.1.0
 * @category config
 */
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

/**
 * What one recovery round did.
 * @since 0.1.0
 * @category models
 */
export interface RecoveryReport {
  /** Sagas this instance claimed and resumed, with what became of them. */
  readonly recovered: ReadonlyArray<
    { readonly id: string; readonly type: string; readonly outcome: ReplyOutcome | "error" }
  >
}

const decodeConfig = <R>({ registry: _, ...options }: RecoveryConfig<R>): Effect.Effect<Config, InvalidConfig> =>
  Settings.decode(ConfigSchema, options)

/** Compensates a claimed local saga in this process, from what the store recorded. */
const recoverLocal = (definition: Any, claimed: SagaRecord, why: string, s: Config) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    const claim: Claim = { owner: s.owner ?? processOwner, lease: s.lease }
    const t: Tracker = { store, id: claimed.id, version: claimed.version }
    return yield* Effect.gen(function*() {
      const execution = yield* store.load(claimed.id)
      if (execution === undefined || execution.saga.version !== t.version) return "ignored" as ReplyOutcome
      const decoded = yield* Effect.result(decodeExecution(definition, execution))
      if (decoded._tag === "Failure") {
        const message = `stored data does not decode with the definition: ${decoded.failure}`
        yield* persist(t, { status: "failed", error: message, deadline: null, claim: null })
        yield* SagaMetrics.finished("failed")
        return "failed" as ReplyOutcome
      }
      let steps = execution.steps
      if (execution.saga.status === "running") {
        const i = execution.saga.currentStep
        const inFlight = steps[i]
        const stepName = definition.steps[i]?.name ?? String(i)
        const reason = `step ${stepName} was interrupted: ${why}`
        const updates: Array<StepUpdate> =
          inFlight !== undefined && inFlight.status === "pending" && inFlight.attempts > 0
            ? [{ index: i, status: "failed", error: `interrupted: ${why}`, finished: true }]
            : []
        yield* persist(t, { status: "compensating", error: reason, deadline: null, steps: updates })
        steps = steps.map((st) => st.index === i && updates.length > 0 ? { ...st, status: "failed" as const } : st)
      }
      const outcome = yield* detached(compensateLocal(definition, t, decoded.success, steps, s.maxCompensationAttempts))
      return outcome._tag === "Compensated" ? "compensated" as ReplyOutcome : "failed" as ReplyOutcome
    }).pipe(withHeartbeat(store, claimed.id, claim))
  })

/** Recovers one claimed saga. */
const recoverSaga = (definition: Any, claimed: SagaRecord, seen: SagaRecord, s: Config) =>
  Effect.gen(function*() {
    yield* SagaMetrics.recovered
    const why = seen.claimedUntil !== null
      ? `its executor ${seen.claimedBy ?? "?"} stopped (claim expired)`
      : seen.deadline !== null
      ? "it is past its deadline"
      : `it has not changed for ${Duration.format(s.stuckAfter)}`
    yield* Effect.logInfo(`recovering saga ${claimed.id} (${claimed.type}, ${claimed.status}): ${why}`)
    if (kindOf(definition) !== "command") return yield* recoverLocal(definition, claimed, why, s)
    const store = yield* SagaStore
    const outbox = yield* Effect.serviceOption(OutboxStore)
    if (Option.isNone(outbox)) {
      return yield* Effect.die(new Error("recovering an asynchronous saga needs an OutboxStore"))
    }
    return yield* advance(store, outbox.value, definition, claimed.id, (execution, decoded) =>
      execution.saga.version === claimed.version
        ? planCommand(definition, execution, decoded, {
          _tag: "Overdue",
          maxCompensationAttempts: s.maxCompensationAttempts
        })
        : Effect.succeed(undefined))
  }).pipe(
    Effect.withSpan(spanName("recover", claimed.type), {
      attributes: { "tidings.saga.id": claimed.id, "tidings.saga.type": claimed.type }
    })
  )

const recoverRound = (registry: Registry<any>, s: Config) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    yield* SagaMetrics.byStatus(yield* store.countByStatus)
    const due = yield* store.findRecoverable({
      stuckAfter: s.stuckAfter,
      limit: s.batchSize,
      types: [...registry.definitions.keys()]
    })
    const recovered: Array<RecoveryReport["recovered"][number]> = []
    for (const seen of due) {
      const definition = registry.definitions.get(seen.type)
      if (definition === undefined) continue
      const claimed = yield* store.claim(seen.id, seen.version, { owner: s.owner ?? processOwner, lease: s.lease })
      if (claimed === undefined) continue
      // Traced: recovery rounds run untraced, a saga recovered is worth its span.
      const outcome = yield* recoverSaga(definition, claimed, seen, s).pipe(
        Effect.withTracerEnabled(true),
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : Effect.as(
              Effect.logWarning(`saga ${seen.id}: recovery failed; it will be retried`, cause),
              "error" as const
            )
        )
      )
      recovered.push({ id: seen.id, type: seen.type, outcome })
    }
    return { recovered }
  })

/**
 * One recovery round: finds sagas whose executor died, that are past their deadline or stuck,
 * claims each with compare-and-set on its version (only one instance wins), and resumes it.
 * Local steps are compensated in this process (as recorded in the store); a command saga is moved
 * on by sending its next compensation, or by resending a compensation that got no reply.
 * @since 0.1.0
 * @category combinators
 */
export const recoverOnce = <R>(
  config: RecoveryConfig<R>
): Effect.Effect<RecoveryReport, InvalidConfig | StoreError, SagaStore | R> =>
  Effect.flatMap(decodeConfig(config), (s) => recoverRound(config.registry, s)) as Effect.Effect<
    RecoveryReport,
    InvalidConfig | StoreError,
    SagaStore | R
  >

/**
 * The recovery worker: a recovery round every `interval` while the layer lives. Safe to run on
 * every instance: claims are compare-and-set, so each saga is resumed by one of them. Closing the
 * layer waits for a compensation under way to end (each is bounded by its timeout and retries).
 * Bad settings fail the layer with `InvalidConfig`, naming every wrong one.
 * @since 0.1.0
 * @category layers
 */
export const recovery = <R>(config: RecoveryConfig<R>): Layer.Layer<never, InvalidConfig, SagaStore | R> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const s = yield* decodeConfig(config)
    yield* Metrics.initializeSagas
    yield* Effect.forkScoped(
      every(s.interval, "saga recovery round", recoverRound(config.registry, s), { jitter: 0.2 })
    )
  })) as Layer.Layer<never, InvalidConfig, SagaStore | R>

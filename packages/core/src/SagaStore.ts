/**
 * The saga storage port. The saga engine (`Saga`) is written once against it; `@tidings/postgres`
 * implements it on Postgres (`PgSagaStore`) and `MemorySagaStore` in memory, and both pass the
 * same contract (`sagaStoreContract` in `@tidings/core/testing`).
 *
 * Every change of a saga is a compare-and-set on its `version`: {@link Service.update} applies only
 * when the version is the one the caller read, and bumps it. That is how a recovery worker takes a
 * saga over from a dead instance without two instances ever acting on it, and how two concurrent
 * replies cannot both advance the same step.
 * @since 0.1.0
 * @module
 */
import { Context, type Duration, type Effect } from "effect"
import type { StoreError } from "./Errors.ts"
import type { SagaConflict, SagaNotFound } from "./SagaErrors.ts"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  SagaConflict,
  /**
   * @since 0.1.0
   * @category errors
   */
  SagaNotFound
} from "./SagaErrors.ts"

/**
 * Lifecycle of a saga: `running` (steps going forward), `compensating` (undoing the completed steps
 * in reverse), and the final states `completed`, `compensated` and `failed` (a compensation kept
 * failing: the state that needs a person).
 * @since 0.1.0
 * @category models
 */
export type SagaStatus = "running" | "completed" | "compensating" | "compensated" | "failed"

/**
 * Lifecycle of a step: `pending` (not run yet, or running), `completed` (its result is stored),
 * `failed` (its action failed or timed out), `compensated`, `compensation_failed`.
 * @since 0.1.0
 * @category models
 */
export type StepStatus = "pending" | "completed" | "failed" | "compensated" | "compensation_failed"

/**
 * A saga execution as stored.
 * @since 0.1.0
 * @category models
 */
export interface SagaRecord {
  readonly id: string
  /** The saga definition's name. */
  readonly type: string
  readonly status: SagaStatus
  /** The input, encoded by the definition's schema (JSON). */
  readonly input: unknown
  /** The step running, or being compensated. */
  readonly currentStep: number
  /** Bumped by every update: the compare-and-set token. */
  readonly version: number
  /** When the current step (or compensation) is overdue; `null` when none is set. */
  readonly deadline: Date | null
  /** Why the saga is compensating / failed. */
  readonly error: string | null
  /** The instance executing the saga in-process (a `Saga.run` or a recovery worker), while its lease lasts. */
  readonly claimedBy: string | null
  readonly claimedUntil: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

/**
 * One step of an execution as stored.
 * @since 0.1.0
 * @category models
 */
export interface StepRecord {
  readonly index: number
  readonly name: string
  readonly status: StepStatus
  /** The step's result, encoded by its schema (JSON); `null` until completed. */
  readonly result: unknown
  readonly error: string | null
  /** Action attempts started. */
  readonly attempts: number
  /** Compensation attempts started (they count across crashes, so a stuck compensation ends). */
  readonly compensationAttempts: number
  /** When the last action attempt started. */
  readonly startedAt: Date | null
  /** When the step last reached an outcome (completed, failed, compensated, ...). */
  readonly finishedAt: Date | null
}

/**
 * A saga with its steps, in order.
 * @since 0.1.0
 * @category models
 */
export interface Execution {
  readonly saga: SagaRecord
  readonly steps: ReadonlyArray<StepRecord>
}

/**
 * The in-process executor of a saga and how long its claim holds without a heartbeat.
 * @since 0.1.0
 * @category models
 */
export interface Claim {
  readonly owner: string
  readonly lease: Duration.Duration
}

/**
 * Changes to one step, applied together with the saga's update.
 * @since 0.1.0
 * @category models
 */
export interface StepUpdate {
  readonly index: number
  readonly status?: StepStatus
  /** The encoded result (JSON); omitted = unchanged. */
  readonly result?: unknown
  /** `null` clears it; omitted = unchanged. */
  readonly error?: string | null
  /** An action attempt starts: `attempts + 1`, `startedAt = now`. */
  readonly attemptStarted?: boolean
  /** A compensation attempt starts: `compensationAttempts + 1`. */
  readonly compensationStarted?: boolean
  /** `finishedAt = now`. */
  readonly finished?: boolean
  /** `compensationAttempts = 0` (before `compensationStarted`): an operator's retry of a failed compensation. */
  readonly resetCompensationAttempts?: boolean
}

/**
 * Changes to a saga; omitted fields are unchanged.
 * @since 0.1.0
 * @category models
 */
export interface SagaUpdate {
  readonly status?: SagaStatus
  readonly currentStep?: number
  /** Overdue after this long from now (the store's clock); `null` clears the deadline. */
  readonly deadline?: Duration.Duration | null
  readonly error?: string | null
  /** Take or renew the claim; `null` releases it. */
  readonly claim?: Claim | null
  readonly steps?: ReadonlyArray<StepUpdate>
}

/**
 * A new execution.
 * @since 0.1.0
 * @category models
 */
export interface NewSaga {
  readonly id: string
  readonly type: string
  readonly input: unknown
  /** Step names, in order; each gets a `pending` row. */
  readonly steps: ReadonlyArray<string>
  readonly deadline?: Duration.Duration
  /** Claimed by an in-process executor from the start (`Saga.run`). */
  readonly claim?: Claim
  /** Updates applied to the new steps at once (e.g. the first step's attempt starting). */
  readonly stepUpdates?: ReadonlyArray<StepUpdate>
}

/**
 * What the recovery worker looks for.
 * @since 0.1.0
 * @category models
 */
export interface RecoverableQuery {
  /** An unclaimed saga without a deadline is stuck when it has not changed for this long. */
  readonly stuckAfter: Duration.Duration
  readonly limit: number
  /** Only sagas of these types (the definitions the caller knows); default all. */
  readonly types?: ReadonlyArray<string>
}

/**
 * What {@link Service.list} returns.
 * @since 0.1.0
 * @category models
 */
export interface ListQuery {
  readonly status?: SagaStatus
  /** Only sagas of this definition. */
  readonly type?: string
  readonly limit: number
}

/**
 * The saga storage port.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** Runs an effect in a transaction of this store (joining an open one). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreError, R>
  /** Creates an execution (status `running`, version 0) and its steps, in the current transaction if one is open. */
  readonly create: (saga: NewSaga) => Effect.Effect<SagaRecord, StoreError>
  /** Reads an execution with its steps; `undefined` when there is none. */
  readonly load: (id: string) => Effect.Effect<Execution | undefined, StoreError>
  /**
   * Compare-and-set: applies `update` (saga and steps together) only if the saga's version is still
   * `expectedVersion`, and bumps the version. Fails with `SagaConflict` otherwise.
   */
  readonly update: (
    id: string,
    expectedVersion: number,
    update: SagaUpdate
  ) => Effect.Effect<SagaRecord, SagaConflict | SagaNotFound | StoreError>
  /**
   * Claims an active saga for recovery: succeeds (bumping the version) only if the version is still
   * `expectedVersion`, the saga is `running` or `compensating`, and nobody holds an unexpired
   * claim on it. `undefined` when another instance got there first.
   */
  readonly claim: (
    id: string,
    expectedVersion: number,
    claim: Claim
  ) => Effect.Effect<SagaRecord | undefined, StoreError>
  /** Renews a claim still held by `claim.owner` (no version bump); false when it was lost. */
  readonly heartbeat: (id: string, claim: Claim) => Effect.Effect<boolean, StoreError>
  /**
   * Active sagas that need a recovery worker, most overdue first: claimed ones whose lease expired
   * (their executor died), unclaimed ones past their deadline, and unclaimed ones without a deadline
   * that have not changed for `stuckAfter`.
   */
  readonly findRecoverable: (query: RecoverableQuery) => Effect.Effect<ReadonlyArray<SagaRecord>, StoreError>
  /** Sagas for the admin views, most recently created first. */
  readonly list: (query: ListQuery) => Effect.Effect<ReadonlyArray<SagaRecord>, StoreError>
  /** How many sagas are in each status (for the sagas-by-status gauge). */
  readonly countByStatus: Effect.Effect<Record<SagaStatus, number>, StoreError>
}

const SagaStoreBase: Context.ServiceClass<SagaStore, "@tidings/core/SagaStore", Service> = Context.Service<
  SagaStore,
  Service
>()("@tidings/core/SagaStore")

/**
 * The saga storage service.
 * @since 0.1.0
 * @category services
 */
export class SagaStore extends SagaStoreBase {}

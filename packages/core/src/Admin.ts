/**
 * Operator actions over the store ports, shared by the web console (`@tidings/hono`) and the
 * `tidings` CLI: bulk retries of failed outbox events (by id, by type or all, with progress), inbox
 * dead-letter replay, and saga retry / compensate, which hand the saga to the recovery worker
 * (`Saga.recovery`) by compare-and-set instead of running anything here.
 * @module
 */
import { type Cause, Clock, Duration, Effect, Option, Schema } from "effect"
import type { StoreError } from "./Errors.ts"
import { InboxStore } from "./InboxStore.ts"
import { OutboxStore } from "./OutboxStore.ts"
import {
  type Execution,
  type SagaConflict,
  SagaNotFound,
  type SagaRecord,
  SagaStore,
  type StepStatus,
  type StepUpdate
} from "./SagaStore.ts"
import { Wakeups } from "./Wakeup.ts"

const SagaActionConflictBase: Schema.Class<
  SagaActionConflict,
  Schema.TaggedStruct<"SagaActionConflict", {
    readonly sagaId: Schema.String
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaActionConflict>()("SagaActionConflict", {
  sagaId: Schema.String,
  message: Schema.String
})

/**
 * An operator action that the saga's state does not allow (e.g. compensating a completed saga).
 * @since 0.1.0
 * @category errors
 */
export class SagaActionConflict extends SagaActionConflictBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * Reports how far a long operation got: `done` of `total` (the total may grow as it is learned).
 * @since 0.1.0
 * @category models
 */
export type Progress = (done: number, total: number) => Effect.Effect<void>

/**
 * Which failed events {@link retryFailed} retries: these ids, those of one type, or all.
 * @since 0.1.0
 * @category models
 */
export type Selection =
  | { readonly ids: ReadonlyArray<string> }
  | { readonly type: string }
  | { readonly all: true }

const batchSize = 500

/**
 * Puts failed outbox events back to pending (attempts reset), `batch` at a time, reporting progress
 * after each batch, and wakes this process's relays. Returns how many were retried.
 * @since 0.1.0
 * @category combinators
 */
export const retryFailed = (
  selection: Selection,
  options: { readonly onProgress?: Progress; readonly batch?: number } = {}
): Effect.Effect<number, StoreError, OutboxStore> =>
  Effect.gen(function*() {
    const store = yield* OutboxStore
    const batch = Math.max(1, Math.min(options.batch ?? batchSize, 1000))
    const report = options.onProgress ?? (() => Effect.void)
    let done = 0
    if ("ids" in selection) {
      const ids = [...new Set(selection.ids)]
      for (let i = 0; i < ids.length; i += batch) {
        done += yield* store.retryFailed(ids.slice(i, i + batch))
        yield* report(Math.min(i + batch, ids.length), ids.length)
      }
    } else {
      const type = "type" in selection ? selection.type : undefined
      const counted = type === undefined
        ? (yield* store.stats).failed
        : (yield* store.countByType({ status: "failed" })).find((c) => c.type === type)?.count ?? 0
      let total = counted
      yield* report(0, total)
      // Page by page: each page's events leave `failed`, so the next page holds the next ones.
      for (;;) {
        const page = yield* store.list({ status: "failed", limit: batch, ...(type === undefined ? {} : { type }) })
        if (page.length === 0) break
        const n = yield* store.retryFailed(page.map((e) => e.message.id))
        done += n
        total = Math.max(total, done)
        yield* report(done, total)
        if (n === 0) break // another operator took them: nothing left for this loop
      }
    }
    if (done > 0) yield* (yield* Wakeups).signal("local")
    return done
  })

/**
 * What {@link replayDeadLetter} did.
 * @since 0.1.0
 * @category models
 */
export interface Replayed {
  /** The inbox row was `failed` and is forgotten: the next delivery is handled. */
  readonly reset: boolean
  /** The event was still in the outbox and is pending again: the relay publishes it once more. */
  readonly requeued: boolean
}

/**
 * Replays an inbox dead letter: forgets the consumer's `failed` row, then, when the app has the
 * outbox and the event is still in it (not pruned), puts it back to pending so that the relay
 * publishes it again. Every consumer bound to the event receives it; those that handled it already
 * see a duplicate and skip it (their inbox rows say `processed`). When the event is not in the
 * outbox, replay the broker's dead-letter queue instead (the row is reset either way).
 * @since 0.1.0
 * @category combinators
 */
export const replayDeadLetter = (
  messageId: string,
  consumer: string
): Effect.Effect<Replayed, StoreError, InboxStore> =>
  Effect.gen(function*() {
    const inbox = yield* InboxStore
    const reset = yield* inbox.resetFailed(messageId, consumer)
    if (!reset) return { reset, requeued: false }
    const outbox = yield* Effect.serviceOption(OutboxStore)
    if (Option.isNone(outbox)) return { reset, requeued: false }
    const requeued = (yield* outbox.value.requeue([messageId])) > 0
    if (requeued) yield* (yield* Wakeups).signal("local")
    return { reset, requeued }
  })

/**
 * One step of a saga's timeline.
 * @since 0.1.0
 * @category models
 */
export interface TimelineEntry {
  readonly index: number
  readonly step: string
  readonly status: StepStatus
  /** Action attempts started. */
  readonly attempts: number
  /** Compensation attempts started. */
  readonly compensationAttempts: number
  /** When its last action attempt started. */
  readonly startedAt: Date | null
  /** When it last reached an outcome (its compensation's, once compensated). */
  readonly finishedAt: Date | null
  /** From the start to the last outcome (or to now while running); `null` before it started. */
  readonly durationMs: number | null
  readonly error: string | null
  /** The step is being run (`action`) or undone (`compensation`) now. */
  readonly current: "action" | "compensation" | null
}

/**
 * The steps of an execution as a timeline, in order (what the store keeps: one start and one outcome time per step).
 * @since 0.1.0
 * @category combinators
 */
export const timeline = (execution: Execution, now: number): ReadonlyArray<TimelineEntry> =>
  execution.steps.map((step) => {
    const active = execution.saga.currentStep === step.index
    const current = !active
      ? null
      : execution.saga.status === "running"
      ? "action"
      : execution.saga.status === "compensating"
      ? "compensation"
      : null
    const end = step.finishedAt?.getTime() ?? (current === null ? null : now)
    return {
      index: step.index,
      step: step.name,
      status: step.status,
      attempts: step.attempts,
      compensationAttempts: step.compensationAttempts,
      startedAt: step.startedAt,
      finishedAt: step.finishedAt,
      durationMs: step.startedAt === null || end === null ? null : Math.max(0, end - step.startedAt.getTime()),
      error: step.error,
      current
    }
  })

const load = (id: string) =>
  Effect.gen(function*() {
    const store = yield* SagaStore
    const execution = yield* store.load(id)
    if (execution === undefined) return yield* new SagaNotFound({ sagaId: id })
    return { store, execution }
  })

const liveClaim = (saga: SagaRecord, now: number) =>
  saga.claimedBy !== null && saga.claimedUntil !== null && saga.claimedUntil.getTime() >= now

/**
 * What the saga actions fail with.
 * @since 0.1.0
 * @category models
 */
export type SagaActionError = SagaNotFound | SagaConflict | SagaActionConflict | StoreError

/**
 * Retries a `failed` saga's compensation: the steps whose compensation failed are `completed`
 * again with their compensation attempts reset, the saga `compensating` and due now, so that the
 * recovery worker (`Saga.recovery`, on any instance that has the definition) compensates them again.
 * @since 0.1.0
 * @category combinators
 */
export const retrySaga = (id: string): Effect.Effect<SagaRecord, SagaActionError, SagaStore> =>
  Effect.gen(function*() {
    const { execution, store } = yield* load(id)
    const saga = execution.saga
    if (saga.status !== "failed") {
      return yield* new SagaActionConflict({
        sagaId: id,
        message: `saga ${id} is ${saga.status}: only a failed saga's compensation can be retried`
      })
    }
    const steps: Array<StepUpdate> = execution.steps
      .filter((s) => s.status === "compensation_failed")
      .map((s) => ({ index: s.index, status: "completed", resetCompensationAttempts: true }))
    return yield* store.update(id, saga.version, {
      status: "compensating",
      // The last step whose compensation failed is the one to compensate first (the others follow in reverse).
      currentStep: steps.length === 0 ? saga.currentStep : Math.max(...steps.map((s) => s.index)),
      deadline: Duration.zero,
      claim: null,
      error: `retried by an operator after: ${saga.error ?? "a failed compensation"}`.slice(0, 2000),
      steps
    })
  })

/**
 * Stops a `running` saga and has it compensated: its current step is `failed` ("compensation
 * requested by an operator"), the saga `compensating` and due now, for the recovery worker to undo
 * the completed steps in reverse. Refused while an executor in some process holds a live claim on
 * it (it could complete a step that would then not be undone): wait for the claim to expire.
 * @since 0.1.0
 * @category combinators
 */
export const compensateSaga = (
  id: string,
  reason = "compensation requested by an operator"
): Effect.Effect<SagaRecord, SagaActionError, SagaStore> =>
  Effect.gen(function*() {
    const { execution, store } = yield* load(id)
    const saga = execution.saga
    if (saga.status !== "running") {
      return yield* new SagaActionConflict({
        sagaId: id,
        message: `saga ${id} is ${saga.status}: only a running saga can be compensated`
      })
    }
    const now = yield* Clock.currentTimeMillis
    if (liveClaim(saga, now)) {
      return yield* new SagaActionConflict({
        sagaId: id,
        message: `saga ${id} is being executed by ${saga.claimedBy} (claim until ${
          saga.claimedUntil!.toISOString()
        }): compensate it once the claim has expired`
      })
    }
    const step = execution.steps[saga.currentStep]
    return yield* store.update(id, saga.version, {
      status: "compensating",
      deadline: Duration.zero,
      claim: null,
      error: reason,
      steps: step === undefined || step.status !== "pending"
        ? []
        : [{ index: step.index, status: "failed", error: reason, finished: true }]
    })
  })

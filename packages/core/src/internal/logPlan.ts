import { type Duration, Effect, Option, type Schedule } from "effect"
import * as Errors from "../Errors.ts"
import type * as LogStore from "../LogStore.ts"
import * as Retry from "../Retry.ts"

/** A partition this instance holds, as its workers see it. */
export interface Held {
  readonly partition: number
  epoch: number
  cursor: LogStore.Position
  crashes: number
  suspectUntil: LogStore.Position | null
  headAttempts: number
  /** Local time (Clock, ms) from which the head may be tried again. */
  retryAt: number
  lastError: string | null
  /** A worker has it (read, processing, settling). */
  busy: boolean
  /** No longer assigned to this instance: released once its batch is settled. */
  releasing: boolean
  /**
   * Its last read found nothing (and nothing held back): workers take the other partitions first,
   * until the next wake-up or poll says to look at every partition again.
   */
  drained: boolean
}

/** The part of the settings the plan needs. */
export interface PlanSettings {
  readonly maxAttempts: number
  readonly maxCrashes: number
  readonly retry: Schedule.Schedule<unknown, unknown>
}

/** How processing one partition's events ended: all done, or stopped at `index` by `error`. */
export type Outcome =
  | { readonly _tag: "Done" }
  | {
    readonly _tag: "Stopped"
    readonly index: number
    readonly error: unknown
    /** `unavailable`: an outage, no attempt counted; `retry`: count and back off; `fail`: to the failed table now. */
    readonly kind: "unavailable" | "retry" | "fail"
  }

/** The settlement of one partition's batch and what the worker does next. */
export interface Plan {
  readonly settlement: LogStore.Settlement
  /** Events done (published, handled). */
  readonly done: number
  readonly retried: number
  readonly failed: number
  /** The processing stopped for an outage: wait for it to end. */
  readonly paused: boolean
}

/** Whether the partition's head belonged to a batch whose owner died (or hung) working on it. */
export const suspect = (h: Held): boolean => h.suspectUntil !== null || h.crashes > 0

/** Whether the head goes alone: it is retrying, or it is suspect. */
export const single = (h: Held): boolean => h.headAttempts > 0 || suspect(h)

/** Classifies an error by the one retryability rule, outages apart. */
export const kindOf = (error: unknown): "unavailable" | "retry" | "fail" =>
  Errors.isUnavailable(error) ? "unavailable" : Errors.isRetryable(error) ? "retry" : "fail"

/**
 * Turns an outcome into the partition's settlement: the cursor moves over what was done; a failure
 * retries the head with the schedule's delay (its attempts kept across owners), or moves it to the
 * failed table (not retryable, out of attempts or schedule) and the cursor over it; an outage only
 * stops, counting nothing.
 */
export const plan = (
  s: PlanSettings,
  h: Held,
  events: ReadonlyArray<LogStore.LogEvent>,
  outcome: Outcome,
  describe: (error: unknown) => string = Errors.describe
): Effect.Effect<Plan> =>
  Effect.gen(function*() {
    const base = { partition: h.partition, epoch: h.epoch }
    if (outcome._tag === "Done") {
      const last = events[events.length - 1]
      return {
        settlement: last === undefined ? base : { ...base, cursor: last.position },
        done: events.length,
        retried: 0,
        failed: 0,
        paused: false
      }
    }
    const { index } = outcome
    const done = index > 0 ? { cursor: events[index - 1]!.position } : {}
    const event = events[index]!
    const error = describe(outcome.error)
    if (outcome.kind === "unavailable") {
      return { settlement: { ...base, ...done }, done: index, retried: 0, failed: 0, paused: true }
    }
    const attempts = (index === 0 ? h.headAttempts : 0) + 1
    const fail = (reason: string): Plan => ({
      settlement: { ...base, cursor: event.position, failed: [{ event, error: reason, attempts }] },
      done: index,
      retried: 0,
      failed: 1,
      paused: false
    })
    if (outcome.kind === "fail") return fail(error)
    if (attempts >= s.maxAttempts) return fail(`${error}; gave up after ${attempts} attempts`)
    const delay: Option.Option<Duration.Duration> = yield* Retry.delayFor(s.retry, attempts, undefined)
    if (Option.isNone(delay)) return fail(`${error}; retry schedule exhausted after ${attempts} attempts`)
    return {
      settlement: { ...base, ...done, retry: { attempts, delay: delay.value, error } },
      done: index,
      retried: 1,
      failed: 0,
      paused: false
    }
  })

/** The head of a partition whose handling kept killing its owners: failed without another try. */
export const crashLoop = (h: Held, head: LogStore.LogEvent): Plan => ({
  settlement: {
    partition: h.partition,
    epoch: h.epoch,
    cursor: head.position,
    failed: [{
      event: head,
      error: `crash loop: ${h.crashes} attempts started and none finished (the process died or hung)`,
      attempts: h.crashes
    }]
  },
  done: 0,
  retried: 0,
  failed: 1,
  paused: false
})

/** Copies a stored state into a held partition (after acquiring it or settling). */
export const apply = (h: Held, state: LogStore.PartitionState, now: number): void => {
  h.epoch = state.epoch
  h.cursor = state.cursor
  h.crashes = state.crashes
  h.suspectUntil = state.suspectUntil
  h.headAttempts = state.headAttempts
  h.retryAt = now + state.retryInMs
  h.lastError = state.lastError
}

/** A held partition from a stored state. */
export const fromState = (state: LogStore.PartitionState, now: number): Held => {
  const h: Held = {
    partition: state.partition,
    epoch: state.epoch,
    cursor: state.cursor,
    crashes: 0,
    suspectUntil: null,
    headAttempts: 0,
    retryAt: 0,
    lastError: null,
    busy: false,
    releasing: false,
    drained: false
  }
  apply(h, state, now)
  return h
}

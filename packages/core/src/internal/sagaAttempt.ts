/**
 * One attempt of a local action or compensation: its timeout, and how its failure is told apart
 * from the engine's own (a store write), which may be a `StoreError` too.
 */
import { Duration, Effect } from "effect"
import { isRetryable, type StoreError } from "../Errors.ts"
import type { SagaConflict, SagaNotFound } from "../SagaErrors.ts"

/**
 * An action's or compensation's failure, or its timeout (when `timeoutMs` is set).
 * @since 0.1.0
 * @category errors
 */
export class ActionFailed {
  readonly _tag = "ActionFailed"
  readonly error: unknown
  readonly timeoutMs: number | undefined
  constructor(error: unknown, timeoutMs: number | undefined) {
    this.error = error
    this.timeoutMs = timeoutMs
  }
  /** A timed-out attempt is worth another; otherwise the error's own view (`Errors.isRetryable`). */
  get isRetryable(): boolean {
    return this.timeoutMs !== undefined || isRetryable(this.error)
  }
}

/**
 * The engine's own failure (a store write) during a step: nothing more is this executor's to do.
 * @since 0.1.0
 * @category errors
 */
export class EngineFailed {
  readonly _tag = "EngineFailed"
  readonly error: SagaConflict | SagaNotFound | StoreError
  constructor(error: SagaConflict | SagaNotFound | StoreError) {
    this.error = error
  }
}

/**
 * Fails an attempt with `ActionFailed` (a timeout) when it takes longer than `timeout`.
 * @since 0.1.0
 * @category combinators
 */
export const timeoutAttempt =
  (timeout: Duration.Duration | undefined) =>
  <A, E, R>(attempt: Effect.Effect<A, E, R>): Effect.Effect<A, E | ActionFailed, R> =>
    timeout === undefined ? attempt : attempt.pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(new ActionFailed(undefined, Duration.toMillis(timeout)))
      })
    )

/**
 * How a timeout reads in stored errors and messages.
 * @since 0.1.0
 * @category formatting
 */
export const timedOutText = (timeoutMs: number): string =>
  `timed out after ${Duration.format(Duration.millis(timeoutMs))}`

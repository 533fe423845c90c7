/**
 * The failure families of sagas, each a `Schema.TaggedError` with an `isRetryable` view (read by
 * `Errors.isRetryable`). `Saga` re-exports all of them, `SagaStore` the store's own
 * (`SagaConflict`, `SagaNotFound`).
 * @since 0.1.0
 * @module
 */
import { Schema } from "effect"
import { isRetryable } from "./Errors.ts"

/**
 * A step's action failed (after its retries); the completed steps were compensated.
 * @since 0.1.0
 * @category errors
 */
export class SagaStepFailed extends Schema.TaggedError<SagaStepFailed>()("SagaStepFailed", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  message: Schema.String,
  /** The step's own error, when it came from this process (not from a reply event). */
  cause: Schema.optional(Schema.Defect())
}) {
  /** Retrying the whole saga may succeed when the step's own error is transient (`Errors.isRetryable`). */
  get isRetryable(): boolean {
    return isRetryable(this.cause)
  }
}

/**
 * A step did not finish within its timeout (after its retries); the completed steps were compensated.
 * @since 0.1.0
 * @category errors
 */
export class SagaStepTimeout extends Schema.TaggedError<SagaStepTimeout>()("SagaStepTimeout", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  timeoutMs: Schema.Finite
}) {
  /** A slow dependency may be faster next time. */
  get isRetryable(): boolean {
    return true
  }
}

/**
 * A compensation still failed after its retries: the saga ended `failed`, with the step and the
 * error recorded. This is the state that needs a person.
 * @since 0.1.0
 * @category errors
 */
export class SagaCompensationFailed extends Schema.TaggedError<SagaCompensationFailed>()("SagaCompensationFailed", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  message: Schema.String,
  /** Why the saga was being compensated (the step failure or timeout). */
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * No saga with this id.
 * @since 0.1.0
 * @category errors
 */
export class SagaNotFound extends Schema.TaggedError<SagaNotFound>()("SagaNotFound", {
  sagaId: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * A compare-and-set on the saga's version lost: another instance (a recovery worker, a concurrent
 * reply) changed the saga since it was read. Reload and decide again.
 * @since 0.1.0
 * @category errors
 */
export class SagaConflict extends Schema.TaggedError<SagaConflict>()("SagaConflict", {
  sagaId: Schema.String,
  expectedVersion: Schema.Int,
  actualVersion: Schema.optional(Schema.Int)
}) {
  get isRetryable(): boolean {
    return true
  }
}

/**
 * The saga's input failed its schema (or is not JSON); nothing was written.
 * @since 0.1.0
 * @category errors
 */
export class InvalidSagaInput extends Schema.TaggedError<InvalidSagaInput>()("InvalidSagaInput", {
  saga: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * A saga was given to the wrong engine (a command step to `run`, a local step to `start`), or is not registered.
 * @since 0.1.0
 * @category errors
 */
export class InvalidSagaDefinition extends Schema.TaggedError<InvalidSagaDefinition>()("InvalidSagaDefinition", {
  saga: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

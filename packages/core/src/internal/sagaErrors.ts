/**
 * The failure families of sagas. Re-exported by `Saga` (all) and `SagaStore` (the store's own).
 * @internal
 */
import { Schema } from "effect"

/** A step's action failed (after its retries); the completed steps were compensated. */
export class SagaStepFailed extends Schema.TaggedError<SagaStepFailed>()("SagaStepFailed", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  message: Schema.String,
  /** The step's own error, when it came from this process (not from a reply event). */
  cause: Schema.optional(Schema.Defect())
}) {
  /** Retrying the whole saga may succeed when the step's own error says so (`isRetryable`); otherwise not. */
  get isRetryable(): boolean {
    const cause = this.cause as { readonly isRetryable?: unknown } | undefined
    return typeof cause === "object" && cause !== null && cause.isRetryable === true
  }
}

/** A step did not finish within its timeout (after its retries); the completed steps were compensated. */
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

/** No saga with this id. */
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

/** The saga's input failed its schema (or is not JSON); nothing was written. */
export class InvalidSagaInput extends Schema.TaggedError<InvalidSagaInput>()("InvalidSagaInput", {
  saga: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** A saga was given to the wrong engine (a command step to `run`, a local step to `start`), or is not registered. */
export class InvalidSagaDefinition extends Schema.TaggedError<InvalidSagaDefinition>()("InvalidSagaDefinition", {
  saga: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

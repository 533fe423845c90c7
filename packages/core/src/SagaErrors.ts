/**
 * The failure families of sagas, each a `Schema.TaggedError` with an `isRetryable` view (read by
 * `Errors.isRetryable`). `Saga` re-exports all of them, `SagaStore` the store's own
 * (`SagaConflict`, `SagaNotFound`).
 * @since 0.1.0
 * @module
 */
import { type Cause, Schema } from "effect"
import { isRetryable } from "./Errors.ts"

const SagaStepFailedBase: Schema.Class<
  SagaStepFailed,
  Schema.TaggedStruct<"SagaStepFailed", {
    readonly sagaId: Schema.String
    readonly saga: Schema.String
    readonly step: Schema.String
    readonly message: Schema.String
    /** The step's own error, when it came from this process (not from a reply event). */
    readonly cause: Schema.optional<Schema.Defect>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaStepFailed>()("SagaStepFailed", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  message: Schema.String,
  /** The step's own error, when it came from this process (not from a reply event). */
  cause: Schema.optional(Schema.Defect())
})

/**
 * A step's action failed (after its retries); the completed steps were compensated.
 * @since 0.1.0
 * @category errors
 */
export class SagaStepFailed extends SagaStepFailedBase {
  /** Retrying the whole saga may succeed when the step's own error is transient (`Errors.isRetryable`). */
  get isRetryable(): boolean {
    return isRetryable(this.cause)
  }
}

const SagaStepTimeoutBase: Schema.Class<
  SagaStepTimeout,
  Schema.TaggedStruct<"SagaStepTimeout", {
    readonly sagaId: Schema.String
    readonly saga: Schema.String
    readonly step: Schema.String
    readonly timeoutMs: Schema.Finite
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaStepTimeout>()("SagaStepTimeout", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  timeoutMs: Schema.Finite
})

/**
 * A step did not finish within its timeout (after its retries); the completed steps were compensated.
 * @since 0.1.0
 * @category errors
 */
export class SagaStepTimeout extends SagaStepTimeoutBase {
  /** A slow dependency may be faster next time. */
  get isRetryable(): boolean {
    return true
  }
}

const SagaCompensationFailedBase: Schema.Class<
  SagaCompensationFailed,
  Schema.TaggedStruct<"SagaCompensationFailed", {
    readonly sagaId: Schema.String
    readonly saga: Schema.String
    readonly step: Schema.String
    readonly message: Schema.String
    /** Why the saga was being compensated (the step failure or timeout). */
    readonly reason: Schema.String
    readonly cause: Schema.optional<Schema.Defect>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaCompensationFailed>()("SagaCompensationFailed", {
  sagaId: Schema.String,
  saga: Schema.String,
  step: Schema.String,
  message: Schema.String,
  /** Why the saga was being compensated (the step failure or timeout). */
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect())
})

/**
 * A compensation still failed after its retries: the saga ended `failed`, with the step and the
 * error recorded. This is the state that needs a person.
 * @since 0.1.0
 * @category errors
 */
export class SagaCompensationFailed extends SagaCompensationFailedBase {
  get isRetryable(): boolean {
    return false
  }
}

const SagaNotFoundBase: Schema.Class<
  SagaNotFound,
  Schema.TaggedStruct<"SagaNotFound", {
    readonly sagaId: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaNotFound>()("SagaNotFound", {
  sagaId: Schema.String
})

/**
 * No saga with this id.
 * @since 0.1.0
 * @category errors
 */
export class SagaNotFound extends SagaNotFoundBase {
  get isRetryable(): boolean {
    return false
  }
}

const SagaConflictBase: Schema.Class<
  SagaConflict,
  Schema.TaggedStruct<"SagaConflict", {
    readonly sagaId: Schema.String
    readonly expectedVersion: Schema.Int
    readonly actualVersion: Schema.optional<Schema.Int>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SagaConflict>()("SagaConflict", {
  sagaId: Schema.String,
  expectedVersion: Schema.Int,
  actualVersion: Schema.optional(Schema.Int)
})

/**
 * A compare-and-set on the saga's version lost: another instance (a recovery worker, a concurrent
 * reply) changed the saga since it was read. Reload and decide again.
 * @since 0.1.0
 * @category errors
 */
export class SagaConflict extends SagaConflictBase {
  get isRetryable(): boolean {
    return true
  }
}

const InvalidSagaInputBase: Schema.Class<
  InvalidSagaInput,
  Schema.TaggedStruct<"InvalidSagaInput", {
    readonly saga: Schema.String
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InvalidSagaInput>()("InvalidSagaInput", {
  saga: Schema.String,
  message: Schema.String
})

/**
 * The saga's input failed its schema (or is not JSON); nothing was written.
 * @since 0.1.0
 * @category errors
 */
export class InvalidSagaInput extends InvalidSagaInputBase {
  get isRetryable(): boolean {
    return false
  }
}

const InvalidSagaDefinitionBase: Schema.Class<
  InvalidSagaDefinition,
  Schema.TaggedStruct<"InvalidSagaDefinition", {
    readonly saga: Schema.String
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InvalidSagaDefinition>()("InvalidSagaDefinition", {
  saga: Schema.String,
  message: Schema.String
})

/**
 * A saga was given to the wrong engine (a command step to `run`, a local step to `start`), or is not registered.
 * @since 0.1.0
 * @category errors
 */
export class InvalidSagaDefinition extends InvalidSagaDefinitionBase {
  get isRetryable(): boolean {
    return false
  }
}

import {
  Contention,
  Rejected,
  StoreError,
  type StoreErrorReason,
  Timeout,
  Unavailable,
  Unknown
} from "@tidings/core/Errors"
import { Effect } from "effect"
import type { SqlError } from "effect/sql"

/**
 * The store's reason for an `effect/sql` error: a connection that is refused, lost or terminated is
 * `Unavailable` (work pauses, no attempt is counted); deadlocks, serialization failures and lock
 * timeouts are `Contention`; a statement timeout is `Timeout`; constraint and unique violations are
 * `Rejected`; anything else keeps the driver's own retryable judgement.
 */
export const reasonOf = (error: SqlError.SqlError): StoreErrorReason => {
  switch (error.reason._tag) {
    case "ConnectionError":
      return new Unavailable()
    case "DeadlockError":
    case "SerializationError":
    case "LockTimeoutError":
      return new Contention()
    case "StatementTimeoutError":
      return new Timeout()
    case "UniqueViolation":
    case "ConstraintError":
      return new Rejected()
    default:
      return new Unknown({ retryable: error.isRetryable })
  }
}

/** An `effect/sql` error as the store's typed error. */
export const fromSqlError = (operation: string, error: SqlError.SqlError): StoreError =>
  new StoreError({ operation, message: error.message, reason: reasonOf(error), cause: error })

/** Maps effect/sql errors to the store's typed error, keeping the driver's classification. */
export const mapSqlError =
  (operation: string) => <A, R>(effect: Effect.Effect<A, SqlError.SqlError, R>): Effect.Effect<A, StoreError, R> =>
    Effect.mapError(effect, (e) => fromSqlError(operation, e))

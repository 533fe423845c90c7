import { StoreError } from "@tidings/core/Errors"
import { Effect } from "effect"
import type { SqlError } from "effect/sql"

/** Maps effect/sql errors to the store's typed error, keeping the driver's retryable classification. */
export const mapSqlError = (operation: string) => <A, R>(effect: Effect.Effect<A, SqlError.SqlError, R>): Effect.Effect<A, StoreError, R> =>
  Effect.mapError(effect, (e) => new StoreError({ operation, message: e.message, retryable: e.isRetryable, cause: e }))

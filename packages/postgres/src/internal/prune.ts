import type { StoreError } from "@tidings/core/Errors"
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { mapSqlError } from "./storeError.ts"

/**
 * Deletes one bounded batch of old rows, one instance at a time: the round runs in a transaction
 * that first takes the transaction-scoped advisory lock `lockKey` without waiting; an instance that
 * does not get it returns `undefined` and skips this round. `deleteRows` is a `DELETE … RETURNING 1`
 * (or any statement returning one row per deleted row).
 */
export const pruneUnderLock = (
  sql: SqlClient.SqlClient,
  lockKey: string,
  operation: string,
  deleteRows: Statement.Statement<unknown>
): Effect.Effect<number | undefined, StoreError> =>
  sql.withTransaction(Effect.gen(function*() {
    const [lock] = yield* sql<{ locked: boolean }>`SELECT pg_try_advisory_xact_lock(hashtext(${lockKey})) AS locked`
    if (lock?.locked !== true) return undefined
    const [row] = yield* sql<
      { n: number | string }
    >`WITH pruned AS (${deleteRows}) SELECT count(*)::int AS n FROM pruned`
    return Number(row?.n ?? 0)
  })).pipe(mapSqlError(operation))

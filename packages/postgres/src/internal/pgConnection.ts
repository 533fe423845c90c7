/**
 * An effect/sql `Connection` over a postgres.js `Sql` (the pool, or one reserved connection).
 * @internal
 */
import { Effect, Stream } from "effect"
import type { SqlConnection, SqlError } from "effect/sql"
import type postgres from "postgres"
import { isConnectionCode, errorCode, toSqlError } from "./pgError.ts"

/** What every query needs from the client's configuration. */
export interface QueryOptions {
  /** Use named prepared statements for `execute` / `values` (postgres.js `prepare`). */
  readonly prepare: boolean
  /** Strings to scrub from errors (the password). */
  readonly secrets: ReadonlyArray<string>
  /** How long an interrupted query may take to acknowledge its cancellation before we stop waiting. */
  readonly cancelWaitMillis: number
}

/** A postgres.js query: a Promise with `cancel`, `values` and `cursor`. */
type PendingQuery = postgres.PendingQuery<Array<postgres.Row>>

/** An effect/sql connection that also knows whether its (reserved) socket was lost: then no ROLLBACK is possible. */
export interface PgConnection extends SqlConnection.Connection {
  readonly broken: () => boolean
}

/** The private canceller of a postgres.js query (see {@link cancel}). */
interface Cancellable {
  canceller?: ((query: unknown) => Promise<void>) | null
}

/**
 * Asks the server to cancel a running query (or drops it from the queue if not sent yet).
 * postgres.js' public `query.cancel()` drops the promise of the cancel request, so a failure to
 * deliver it (server gone) would be an unhandled rejection that kills a Node process; calling the
 * canceller ourselves lets us swallow that. Falls back to `cancel()` if postgres.js changes.
 */
const cancel = (query: PendingQuery): void => {
  const internal = query as unknown as Cancellable
  const canceller = internal.canceller
  if (typeof canceller === "function") {
    internal.canceller = null
    try {
      canceller(query).catch(() => {})
    } catch {
      // nothing to cancel
    }
  } else {
    query.cancel()
  }
}

/** Waits for `promise`, at most `millis`; the timer is cleared so it cannot keep a process alive. */
const atMost = (promise: Promise<unknown>, millis: number): Promise<void> => {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, millis)
  })
  return Promise.race([promise, timeout]).then(() => clearTimeout(timer))
}

/**
 * Runs one postgres.js query as an Effect. Interrupting the fiber cancels the query on the server and
 * waits (bounded) until the server has given up on it, so the connection is free again when the
 * interruption completes and a following ROLLBACK on a reserved connection does not queue behind it.
 */
const run = <A>(
  make: () => Promise<unknown> & { readonly cancel: () => void },
  operation: string,
  options: QueryOptions,
  onError: (error: unknown) => void
): Effect.Effect<A, SqlError.SqlError> =>
  Effect.callback<A, SqlError.SqlError>((resume) => {
    let query: Promise<unknown> & { readonly cancel: () => void }
    try {
      query = make()
    } catch (error) {
      // postgres.js throws synchronously for e.g. undefined values or too many parameters
      resume(Effect.fail(toSqlError(error, operation, options.secrets)))
      return
    }
    let settled = false
    const done = query.then(
      (result) => {
        settled = true
        resume(Effect.succeed(result as A))
      },
      (error: unknown) => {
        settled = true
        onError(error)
        resume(Effect.fail(toSqlError(error, operation, options.secrets)))
      }
    )
    return Effect.promise(() => {
      if (settled) return Promise.resolve()
      cancel(query as PendingQuery)
      return atMost(done, options.cancelWaitMillis)
    })
  })

/** The part of postgres.js' internal connection object we look at (see {@link makeConnection}). */
interface InternalConnection {
  readonly reserved: unknown
}

/** The error a query gets when its reserved connection was lost while idle. */
const connectionClosed = () =>
  Object.assign(new Error("the reserved connection was closed by the server or the network"), { code: "CONNECTION_CLOSED" })

/**
 * Builds the effect/sql connection for the postgres.js pool, or for one reserved connection
 * (`reserved: true`).
 *
 * postgres.js does not notice that a reserved connection's socket closed while it was idle: the next
 * query on it writes to a null socket from a `setImmediate` and crashes the process with an uncaught
 * TypeError. The pool itself handles closed connections fine. So for a reserved connection we capture
 * postgres.js' internal connection object through the `onexecute` query option, whose `reserved`
 * field postgres.js clears when the socket closes, and check it before each query (the check and the
 * write happen in the same tick, so no close event can come in between). postgres.js only calls
 * `onexecute` for a query that needs no Describe round trip first; a transaction's `BEGIN` is one.
 */
export const makeConnection = (sql: postgres.Sql, options: QueryOptions, reserved = false): PgConnection => {
  let broken = false
  let internal: InternalConnection | undefined
  const onError = (error: unknown) => {
    if (reserved && isConnectionCode(errorCode(error))) broken = true
  }
  const lost = (): boolean => {
    if (!broken && internal !== undefined && internal.reserved == null) broken = true
    return broken
  }
  // Returning true keeps postgres.js' "connection can take more queries" answer unchanged.
  const onexecute = (connection: InternalConnection) => {
    internal = connection
    return true
  }
  const queryOptions = (prepare: boolean) => {
    const base = { prepare: prepare && options.prepare }
    return reserved && internal === undefined ? { ...base, onexecute } : base
  }
  const unsafe = (text: string, params: ReadonlyArray<unknown>, prepare: boolean): PendingQuery => {
    if (reserved && lost()) throw connectionClosed()
    return sql.unsafe(text, params as Array<postgres.ParameterOrJSON<never>>, queryOptions(prepare))
  }
  const rows = (
    text: string,
    params: ReadonlyArray<unknown>,
    prepare: boolean,
    operation: string,
    transformRows: (<A extends object>(row: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined
  ): Effect.Effect<ReadonlyArray<any>, SqlError.SqlError> => {
    const effect = run<ReadonlyArray<object>>(() => unsafe(text, params, prepare), operation, options, onError)
    return transformRows === undefined ? effect : Effect.map(effect, transformRows)
  }
  return {
    broken: lost,
    execute: (text, params, transformRows) => rows(text, params, true, "execute", transformRows),
    executeUnprepared: (text, params, transformRows) => rows(text, params, false, "executeUnprepared", transformRows),
    // The postgres.js result array: rows plus `count`, `command` ("COMMIT", "ROLLBACK", ...) and `columns`.
    executeRaw: (text, params) => run(() => unsafe(text, params, true), "executeRaw", options, onError),
    executeValues: (text, params) =>
      run(() => unsafe(text, params, true).values(), "executeValues", options, onError),
    executeValuesUnprepared: (text, params) =>
      run(() => unsafe(text, params, false).values(), "executeValuesUnprepared", options, onError),
    executeStream: (text, params, transformRows) =>
      Stream.suspend(() => {
        let query: PendingQuery
        try {
          query = unsafe(text, params, true)
        } catch (error) {
          return Stream.fail(toSqlError(error, "executeStream", options.secrets))
        }
        // "pending": a `next` waits for rows, so the server is working on our query.
        let state: "idle" | "pending" | "done" = "idle"
        let abandoned = false
        const batches = query.cursor(256)
        const iterable: AsyncIterable<ReadonlyArray<object>> = {
          [Symbol.asyncIterator]: () => {
            const iterator = batches[Symbol.asyncIterator]()
            // postgres.js answers some calls with a plain object instead of a promise
            const close = () => Promise.resolve(iterator.return?.()).then(() => ({ done: true as const, value: undefined }))
            return {
              next: () => {
                state = "pending"
                return Promise.resolve(iterator.next()).then(
                  (result) => {
                    state = result.done === true ? "done" : "idle"
                    // rows that arrived after the consumer left: close the portal, or the cursor would
                    // wait for the next pull forever and keep the connection
                    if (abandoned && state === "idle") void close()
                    return result
                  },
                  (error: unknown) => {
                    state = "done"
                    onError(error)
                    throw error
                  }
                )
              },
              // Called by the stream when it ends early (take, interruption, failure downstream).
              // Between batches, closing the portal is enough. While rows are awaited, only a cancel
              // request stops the query; it is not sent otherwise, as a cancel that arrives after the
              // query ended would hit whatever the pool runs next on that backend.
              return: () => {
                abandoned = true
                if (state === "pending") {
                  cancel(query)
                  return Promise.resolve({ done: true as const, value: undefined })
                }
                return state === "idle" ? close() : Promise.resolve({ done: true as const, value: undefined })
              }
            }
          }
        }
        return Stream.fromAsyncIterable(iterable, (error) => toSqlError(error, "executeStream", options.secrets)).pipe(
          Stream.map((batch) => transformRows === undefined ? batch : transformRows(batch)),
          Stream.flattenIterable
        )
      })
  }
}

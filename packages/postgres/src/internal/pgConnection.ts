/**
 * An effect/sql `Connection` over the client's pool (see pgPool.ts), or over one slot held for a
 * transaction.
 * @internal
 */
import { Effect, Stream } from "effect"
import type { SqlConnection, SqlError } from "effect/sql"
import type postgres from "postgres"
import { errorCode, isConnectionCode, toSqlError } from "./pgError.ts"
import type { Held, Link, Pool } from "./pgPool.ts"

/** What every query needs from the client's configuration. */
export interface QueryOptions {
  /** Use named prepared statements for `execute` / `values` (postgres.js `prepare`). */
  readonly prepare: boolean
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
  link: Link
): Effect.Effect<A, SqlError.SqlError> =>
  Effect.callback<A, SqlError.SqlError>((resume) => {
    let query: Promise<unknown> & { readonly cancel: () => void }
    try {
      query = make()
    } catch (error) {
      // postgres.js throws synchronously for e.g. undefined values or too many parameters
      resume(Effect.fail(toSqlError(error, operation)))
      return
    }
    let settled = false
    // a query postgres.js forgot when its connection was retired fails here instead of hanging
    const unwatch = link.onRetired(() => {
      if (settled) return
      settled = true
      resume(Effect.fail(toSqlError(connectionError("CONNECTION_DESTROYED"), operation)))
    })
    const done = query.then(
      (result) => {
        if (settled) return
        settled = true
        unwatch()
        resume(Effect.succeed(withoutHoles(result) as A))
      },
      (error: unknown) => {
        if (settled) return
        settled = true
        unwatch()
        if (unusable(error)) link.taint()
        resume(Effect.fail(toSqlError(error, operation)))
      }
    )
    return Effect.promise(() => {
      if (settled) return Promise.resolve()
      cancel(query as PendingQuery)
      // still running after the wait: whoever gets the link next would queue behind it
      return atMost(done, options.cancelWaitMillis).then(() => settled || link.taint())
    })
  })

/** A query cancelled by a cancel request (57014 "due to user request"), not by statement_timeout. */
const strayCancel = (cause: unknown): boolean =>
  errorCode(cause) === "57014" && cause instanceof Error && /user request/.test(cause.message)

/** A connection error that is ours rather than postgres.js': the held connection was lost, ... */
const connectionError = (code: string, message = "the connection was closed") =>
  Object.assign(new Error(`${message} (${code})`), { code })

/** The error a statement gets when its held connection was lost. */
const connectionClosed = () =>
  connectionError("CONNECTION_CLOSED", "the reserved connection was closed by the server or the network")

/**
 * postgres.js keeps counting rows across queries when a statement fails after sending some of them:
 * the next result on that connection then starts with that many holes (porsager/postgres#1119,
 * #1181), e.g. `[<5000 empty>, { one: 1 }]` for a one-row SELECT. Rows are never undefined, so the
 * leading holes are dropped (in place: the result keeps `count`, `command` and `columns`).
 */
export const withoutHoles = <A>(result: A): A => {
  if (Array.isArray(result) && result.length > 0 && !(0 in result)) {
    let first = 1
    while (first < result.length && !(first in result)) first++
    result.splice(0, first)
  }
  return result
}

/**
 * postgres.js declares an array parameter with its first element's type (an array of dates as
 * `timestamptz`, of booleans as `bool`), which the server then refuses. Typed as 0 (unknown), the
 * server infers the parameter's type from the statement (`timestamptz[]`, or `jsonb` for a jsonb
 * column), and the serializer of that type writes it.
 */
const arrayParameter = (sql: postgres.Sql) => (value: unknown): unknown =>
  Array.isArray(value) ? sql.typed(value as never, 0) : value

/** How a connection gets at a link: a slot per statement (the pool) or the one held for a transaction. */
export interface LinkAccess {
  /** Runs `f` on a link. */
  readonly use: <A>(f: (link: Link) => Effect.Effect<A, SqlError.SqlError>) => Effect.Effect<A, SqlError.SqlError>
  /** A stream on a link that is kept until the stream ends. */
  readonly stream: <A>(f: (link: Link) => Stream.Stream<A, SqlError.SqlError>) => Stream.Stream<A, SqlError.SqlError>
  /** Set for a held connection: told whether a transaction is open on it. */
  readonly held?: Held | undefined
}

/** Access to the pool: every statement (and stream) takes a slot of its own. */
export const poolAccess = (pool: Pool): LinkAccess => ({
  use: (f) => pool.withLink(f),
  stream: (f) => Stream.unwrap(Effect.map(pool.lease, f))
})

/** Access to a held slot: the link of its first statement, or a retryable error once that is gone. */
export const heldAccess = (held: Held): LinkAccess => {
  const lost = () => toSqlError(connectionClosed(), "reserve")
  return {
    use: (f) =>
      Effect.suspend(() => {
        const link = held.link()
        return link === undefined ? Effect.fail(lost()) : f(link)
      }),
    stream: (f) =>
      Stream.suspend(() => {
        const link = held.link()
        return link === undefined ? Stream.fail(lost()) : f(link)
      }),
    held
  }
}

const transactionStart = /^\s*(begin|start\s+transaction)\b/i
const transactionEnd = /^\s*(commit|rollback|end|abort)\s*(work|transaction)?\s*;?\s*$/i

/** The server answered (the statement reached it), as opposed to a connection or client failure. */
const fromServer = (error: unknown): boolean => typeof error === "object" && error !== null && "severity" in error

/**
 * After this failure the connection should not be used again: the server is closing it (57P01 and
 * the like arrive before the socket closes, and the next statement would queue behind a connection
 * that is going away), or the failure did not come from the server (a cancel before the query was
 * sent, a client-side error), which can leave postgres.js waiting for a reply that never comes.
 */
const unusable = (error: unknown): boolean => !fromServer(error) || isConnectionCode(errorCode(error))

/**
 * Builds the effect/sql connection for the pool, or for a slot held for a transaction. A held
 * connection whose link is gone fails every later statement at once with a retryable
 * `CONNECTION_CLOSED` error, and it tracks BEGIN / COMMIT / ROLLBACK so that a transaction left open
 * never goes back to the pool.
 */
export const makeConnection = (access: LinkAccess, options: QueryOptions): PgConnection => {
  const held = access.held
  let broken = false
  const track = held === undefined
    ? undefined
    : (text: string) => {
      if (transactionStart.test(text)) {
        held.inTransaction(true)
        return undefined
      }
      return transactionEnd.test(text) ? () => held.inTransaction(false) : undefined
    }
  const statement = <A>(
    text: string,
    params: ReadonlyArray<unknown>,
    prepare: boolean,
    operation: string,
    values: boolean
  ): Effect.Effect<A, SqlError.SqlError> =>
    access.use((link) => {
      const ended = track?.(text)
      const once = run<A>(
        () => {
          const query = unsafe(link, text, params, prepare)
          return values ? query.values() : query
        },
        operation,
        options,
        link
      )
      // A cancel request names a connection, not a statement: one sent for an interrupted statement
      // can land after it finished, on the next statement pipelined on that connection. A pool
      // statement runs in autocommit, so the cancel rolled it back whole and it runs again (once); a
      // statement_timeout (same code, another message) and statements on a held connection do not.
      const effect = held !== undefined ? once : once.pipe(
        Effect.catchIf((error) => strayCancel(error.reason.cause), () =>
          run<A>(
            () => {
              const query = unsafe(link, text, params, prepare)
              return values ? query.values() : query
            },
            operation,
            options,
            link
          ))
      )
      return ended === undefined ? effect : effect.pipe(
        Effect.tap(() => Effect.sync(ended)),
        Effect.tapError((error) => fromServer(error.reason.cause) ? Effect.sync(ended) : Effect.void)
      )
    }).pipe(
      Effect.tapError((error) =>
        Effect.sync(() => {
          if (held !== undefined && isConnectionCode(errorCode(error.reason.cause))) broken = true
        })
      )
    )
  const rows = (
    text: string,
    params: ReadonlyArray<unknown>,
    prepare: boolean,
    operation: string,
    transformRows: (<A extends object>(row: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined
  ): Effect.Effect<ReadonlyArray<any>, SqlError.SqlError> => {
    const effect = statement<ReadonlyArray<object>>(text, params, prepare, operation, false)
    return transformRows === undefined ? effect : Effect.map(effect, transformRows)
  }
  return {
    broken: () => broken || (held !== undefined && held.link() === undefined),
    execute: (text, params, transformRows) => rows(text, params, true, "execute", transformRows),
    executeUnprepared: (text, params, transformRows) => rows(text, params, false, "executeUnprepared", transformRows),
    // The postgres.js result array: rows plus `count`, `command` ("COMMIT", "ROLLBACK", ...) and `columns`.
    executeRaw: (text, params) => statement(text, params, true, "executeRaw", false),
    executeValues: (text, params) => statement(text, params, true, "executeValues", true),
    executeValuesUnprepared: (text, params) => statement(text, params, false, "executeValuesUnprepared", true),
    executeStream: (text, params, transformRows) =>
      access.stream((link) => cursorStream(link, text, params, options, transformRows))
  }
}

/** The rows of one query, fetched through a cursor 256 at a time. */
const cursorStream = (
  link: Link,
  text: string,
  params: ReadonlyArray<unknown>,
  options: QueryOptions,
  transformRows: (<A extends object>(row: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined
): Stream.Stream<any, SqlError.SqlError> =>
  Stream.suspend(() => {
    let query: PendingQuery
    try {
      query = unsafe(link, text, params, true)
    } catch (error) {
      return Stream.fail(toSqlError(error, "executeStream"))
    }
    // "pending": a `next` waits for rows, so the server is working on our query.
    let state: "idle" | "pending" | "done" = "idle"
    let abandoned = false
    // a cursor postgres.js forgot when its connection was retired fails instead of waiting forever
    let forgotten: (() => void) | undefined
    const retired = new Promise<never>((_, reject) => {
      forgotten = link.onRetired(() => reject(connectionError("CONNECTION_DESTROYED")))
    })
    retired.catch(() => {})
    const batches = query.cursor(256)
    const iterable: AsyncIterable<ReadonlyArray<object>> = {
      [Symbol.asyncIterator]: () => {
        const iterator = batches[Symbol.asyncIterator]()
        // postgres.js answers some calls with a plain object instead of a promise
        const close = () => Promise.resolve(iterator.return?.()).then(() => ({ done: true as const, value: undefined }))
        return {
          next: () => {
            state = "pending"
            return Promise.race([Promise.resolve(iterator.next()), retired]).then(
              (result) => {
                state = result.done === true ? "done" : "idle"
                if (state === "done") forgotten?.()
                // rows that arrived after the consumer left: close the portal, or the cursor would
                // wait for the next pull forever and keep the connection
                if (abandoned && state === "idle") void close()
                return result
              },
              (error: unknown) => {
                state = "done"
                forgotten?.()
                if (unusable(error)) link.taint()
                throw error
              }
            )
          },
          // Called by the stream when it ends early (take, interruption, failure downstream).
          // Between batches, closing the portal is enough. While rows are awaited, only a cancel
          // request stops the query; it is not sent otherwise, as a cancel that arrives after the
          // query ended would hit whatever runs next on that backend. The link is then retired
          // when it is given back, as its state is unknown until the cancel lands.
          return: () => {
            abandoned = true
            forgotten?.()
            if (state === "pending") {
              link.taint()
              cancel(query)
              return Promise.resolve({ done: true as const, value: undefined })
            }
            return state === "idle" ? close() : Promise.resolve({ done: true as const, value: undefined })
          }
        }
      }
    }
    return Stream.fromAsyncIterable(iterable, (error) => toSqlError(error, "executeStream")).pipe(
      Stream.map((batch) => transformRows === undefined ? withoutHoles(batch) : transformRows(withoutHoles(batch))),
      Stream.flattenIterable
    )
  })

/** A postgres.js query on `link`, array parameters typed for the server to infer (see {@link arrayParameter}). */
const unsafe = (link: Link, text: string, params: ReadonlyArray<unknown>, prepare: boolean): PendingQuery => {
  const values = (params.some(Array.isArray) ? params.map(arrayParameter(link.sql)) : params) as Array<never>
  return link.sql.unsafe(text, values, { prepare })
}

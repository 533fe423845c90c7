/**
 * LISTEN on a connection of its own (outside the pool), shared by every channel. When that
 * connection is lost, every subscription fails with a retryable `SqlError`: the subscriber decides
 * when to listen again (on a new connection), and knows that notifications may have been missed in
 * between. (postgres.js' own `listen` re-listens in the background, and when that fails, it drops the
 * listener without a word.)
 * @internal
 */
import { Cause, Effect, Queue, Stream } from "effect"
import type { SqlError } from "effect/sql"
import type postgres from "postgres"
import { toSqlError } from "./pgError.ts"
import { connectionError, type SocketTarget } from "./pgSocket.ts"

/** What the listener needs from the client. */
export interface ListenerConfig {
  /** A new one-connection instance: `onDead` when its socket closes, `onNotify` for each notification. */
  readonly open: (onDead: () => void, onNotify: (channel: string, payload: string) => void) => postgres.Sql
  readonly target: SocketTarget
}

export interface Listener {
  readonly listen: (channel: string) => Stream.Stream<string, SqlError.SqlError>
  readonly close: () => void
}

interface Connection {
  readonly sql: postgres.Sql
  dead: boolean
  readonly channels: Map<string, Set<Queue.Queue<string, SqlError.SqlError | Cause.Done>>>
  /** LISTENs on their way: they fail with the connection (postgres.js may not fail a queued one). */
  readonly pending: Set<(error: SqlError.SqlError) => void>
}

const quote = (channel: string) => `"${channel.replace(/"/g, "\"\"")}"`

export const makeListener = (config: ListenerConfig): Listener => {
  let current: Connection | undefined
  let closed = false

  const lost = (connection: Connection, error: SqlError.SqlError) => {
    if (connection.dead) return
    connection.dead = true
    if (current === connection) current = undefined
    for (const queues of connection.channels.values()) {
      for (const queue of queues) Queue.failCauseUnsafe(queue, Cause.fail(error))
    }
    connection.channels.clear()
    for (const fail of connection.pending) fail(error)
    connection.pending.clear()
    connection.sql.end({ timeout: 0 }).catch(() => {})
  }

  const connect = (): Connection => {
    if (current !== undefined && !current.dead) return current
    const connection: Connection = {
      sql: undefined as unknown as postgres.Sql,
      dead: false,
      channels: new Map(),
      pending: new Set()
    }
    ;(connection as { sql: postgres.Sql }).sql = config.open(
      () => lost(connection, toSqlError(connectionError("CONNECTION_CLOSED", config.target), "listen")),
      (channel, payload) => {
        for (const queue of connection.channels.get(channel) ?? []) Queue.offerUnsafe(queue, payload)
      }
    )
    current = connection
    return connection
  }

  const subscribe = (channel: string, queue: Queue.Queue<string, SqlError.SqlError | Cause.Done>) =>
    Effect.callback<Connection, SqlError.SqlError>((resume) => {
      if (closed) {
        return resume(Effect.fail(toSqlError(connectionError("CONNECTION_ENDED", config.target), "listen")))
      }
      const connection = connect()
      const queues = connection.channels.get(channel)
      if (queues !== undefined) {
        queues.add(queue)
        return resume(Effect.succeed(connection))
      }
      connection.channels.set(channel, new Set([queue]))
      let settled = false
      const fail = (failure: SqlError.SqlError) => {
        if (settled) return
        settled = true
        connection.pending.delete(fail)
        resume(Effect.fail(failure))
      }
      connection.pending.add(fail)
      connection.sql.unsafe(`LISTEN ${quote(channel)}`).then(
        () => {
          if (settled) return
          settled = true
          connection.pending.delete(fail)
          resume(Effect.succeed(connection))
        },
        (error: unknown) => {
          if (settled) return
          const failure = toSqlError(error, "listen")
          // subscribers that joined while the LISTEN was on its way fail with it
          for (const other of connection.channels.get(channel) ?? []) {
            if (other !== queue) Queue.failCauseUnsafe(other, Cause.fail(failure))
          }
          connection.channels.delete(channel)
          fail(failure)
        }
      )
      // interrupted while the LISTEN is on its way: this subscriber leaves (the LISTEN may still land)
      return Effect.sync(() => {
        settled = true
        connection.pending.delete(fail)
        connection.channels.get(channel)?.delete(queue)
      })
    })

  const unsubscribe = (
    connection: Connection,
    channel: string,
    queue: Queue.Queue<string, SqlError.SqlError | Cause.Done>
  ) =>
    Effect.sync(() => {
      const queues = connection.channels.get(channel)
      if (queues === undefined || !queues.delete(queue) || queues.size > 0) return
      connection.channels.delete(channel)
      if (!connection.dead) connection.sql.unsafe(`UNLISTEN ${quote(channel)}`).catch(() => {})
    })

  return {
    listen: (channel) =>
      Stream.callback<string, SqlError.SqlError>((queue) =>
        Effect.acquireRelease(subscribe(channel, queue), (connection) => unsubscribe(connection, channel, queue), {
          interruptible: true
        })
      ),
    close: () => {
      closed = true
      if (current !== undefined) {
        const connection = current
        lost(connection, toSqlError(connectionError("CONNECTION_ENDED", config.target), "listen"))
      }
    }
  }
}

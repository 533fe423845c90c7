/**
 * The client's connection pool: `size` slots, each with at most one live connection, a link, which
 * is a one-connection postgres.js instance that lives exactly as long as its socket (see
 * pgSocket.ts). A slot whose link died gets a new one the next time it is used; nothing that was in
 * flight on the old one is ever sent again.
 *
 * A pool statement takes a slot for itself; a transaction holds one until its scope closes, on the
 * link its first statement ran on, and fails at once once that link is gone. Waiters are served in
 * order. Closing the pool stops new work, gives statements in flight a grace period, then ends every
 * link and destroys the sockets still open.
 * @internal
 */
import { Effect, type Scope } from "effect"
import { setTimeout } from "node:timers"
import type { SqlError } from "effect/sql"
import type postgres from "postgres"
import type { SocketRegistry } from "./pgSocket.ts"

/** One connection: a postgres.js instance with `max: 1`. */
export interface Link {
  readonly sql: postgres.Sql
  /** Its socket closed, or it was retired: nothing can run on it any more. */
  readonly dead: () => boolean
  /** A statement on it was left before it settled: retire the link when it is given back. */
  readonly taint: () => void
  /**
   * Runs `f` once the link has been retired and postgres.js has failed what it still had: what
   * is left then was forgotten (postgres.js ends a connection without failing queries queued on
   * it, when that connection had nothing in flight). Returns a function that unregisters `f`.
   */
  readonly onRetired: (f: () => void) => () => void
}

/** A slot held for a transaction (see {@link Pool.hold}). */
export interface Held {
  /** The held link: the one the first statement ran on; `undefined` once that one is gone. */
  readonly link: () => Link | undefined
  /** A transaction may be open on the link (BEGIN without COMMIT / ROLLBACK): retire it on release. */
  readonly inTransaction: (open: boolean) => void
}

/** What the pool needs from the client. */
export interface PoolConfig {
  readonly size: number
  /** A new one-connection instance; `onDead` runs when its socket closes. */
  readonly open: (onDead: () => void) => postgres.Sql
  /** The error for work that comes after the pool was closed. */
  readonly ended: () => SqlError.SqlError
  readonly sockets: SocketRegistry
  /** Close a connection unused for this long; undefined: never. */
  readonly idleTimeoutMillis: number | undefined
  /** Close a connection this old when it is given back (a new one is opened on demand). */
  readonly maxLifetimeMillis: () => number
}

export interface Pool {
  /** Runs `use` with a slot of its own (waiting for one if all are taken). */
  readonly withLink: <A, E, R>(use: (link: Link) => Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError.SqlError, R>
  /** A slot's link until the scope closes (a stream). */
  readonly lease: Effect.Effect<Link, SqlError.SqlError, Scope.Scope>
  /** Holds a slot until the scope closes (a transaction). */
  readonly hold: Effect.Effect<Held, SqlError.SqlError, Scope.Scope>
  /** Ends the pool: waits up to `graceMillis` for work in flight, then closes every connection. */
  readonly close: (graceMillis: number) => Promise<void>
}

interface LinkState extends Link {
  retired: boolean
  tainted: boolean
  readonly expires: number
  readonly watchers: Set<() => void>
}

interface Slot {
  link: LinkState | undefined
  taken: boolean
  idle: ReturnType<typeof setTimeout> | undefined
}

interface Waiter {
  readonly give: (slot: Slot) => void
  readonly fail: (error: SqlError.SqlError) => void
}

const swallow = () => {}

export const makePool = (config: PoolConfig): Pool => {
  const slots: Array<Slot> = Array.from({ length: config.size }, () => ({ link: undefined, taken: false, idle: undefined }))
  const waiters: Array<Waiter> = []
  let closed = false
  let taken = 0
  let onIdle: (() => void) | undefined

  const retire = (link: LinkState) => {
    if (link.retired) return
    link.retired = true
    // timeout 0: the statements still on it fail now (CONNECTION_DESTROYED) instead of waiting
    link.sql.end({ timeout: 0 }).catch(swallow).then(() =>
      setTimeout(() => {
        for (const watcher of link.watchers) watcher()
        link.watchers.clear()
      }, 0)
    )
  }

  const newLink = (): LinkState => {
    const state: LinkState = {
      sql: undefined as unknown as postgres.Sql,
      retired: false,
      tainted: false,
      expires: Date.now() + config.maxLifetimeMillis(),
      watchers: new Set(),
      dead: () => state.retired,
      taint: () => void (state.tainted = true),
      onRetired: (f) => {
        state.watchers.add(f)
        return () => void state.watchers.delete(f)
      }
    }
    ;(state as { sql: postgres.Sql }).sql = config.open(() => retire(state))
    return state
  }

  const linkOf = (slot: Slot): LinkState => {
    if (slot.link === undefined || slot.link.retired) slot.link = newLink()
    return slot.link
  }

  const takeSlot = (slot: Slot): Slot => {
    slot.taken = true
    taken++
    clearTimeout(slot.idle)
    return slot
  }

  /** A free slot, preferring one whose connection is open already. */
  const tryTake = (): Slot | undefined => {
    let cold: Slot | undefined
    for (const slot of slots) {
      if (slot.taken) continue
      if (slot.link !== undefined && !slot.link.retired) return takeSlot(slot)
      cold ??= slot
    }
    return cold === undefined ? undefined : takeSlot(cold)
  }

  const give = (slot: Slot) => {
    const link = slot.link
    if (link !== undefined && (link.tainted || link.expires <= Date.now())) retire(link)
    const next = closed ? undefined : waiters.shift()
    if (next !== undefined) return next.give(slot)
    slot.taken = false
    taken--
    if (link !== undefined && !link.retired && config.idleTimeoutMillis !== undefined) {
      slot.idle = setTimeout(() => slot.taken || slot.link !== link || retire(link), config.idleTimeoutMillis)
      slot.idle.unref?.()
    }
    if (taken === 0) onIdle?.()
  }

  const acquire: Effect.Effect<Slot, SqlError.SqlError> = Effect.callback<Slot, SqlError.SqlError>((resume) => {
    if (closed) return resume(Effect.fail(config.ended()))
    const slot = tryTake()
    if (slot !== undefined) return resume(Effect.succeed(slot))
    const waiter: Waiter = {
      give: (slot) => resume(Effect.succeed(slot)),
      fail: (error) => resume(Effect.fail(error))
    }
    waiters.push(waiter)
    return Effect.sync(() => {
      const index = waiters.indexOf(waiter)
      if (index !== -1) waiters.splice(index, 1)
    })
  })

  const withLink = <A, E, R>(use: (link: Link) => Effect.Effect<A, E, R>) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(acquire), (slot) =>
        Effect.ensuring(
          Effect.suspend(() => restore(use(linkOf(slot)))),
          Effect.sync(() => give(slot))
        ))
    )

  const lease = Effect.acquireRelease(acquire, (slot) => Effect.sync(() => give(slot)), { interruptible: true }).pipe(
    Effect.map(linkOf)
  )

  const hold = Effect.acquireRelease(
    Effect.map(acquire, (slot) => {
      let bound: LinkState | undefined
      let open = false
      const held: Held & { readonly release: () => void } = {
        link: () => {
          bound ??= linkOf(slot)
          return bound.retired || bound.tainted || slot.link !== bound ? undefined : bound
        },
        inTransaction: (value) => void (open = value),
        // A transaction left open would hand the next user a connection inside it.
        release: () => {
          if (bound !== undefined && open) retire(bound)
          give(slot)
        }
      }
      return held
    }),
    (held) => Effect.sync(() => held.release()),
    { interruptible: true }
  )

  const close = async (graceMillis: number): Promise<void> => {
    closed = true
    for (const waiter of waiters.splice(0)) waiter.fail(config.ended())
    if (taken > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMillis)
        onIdle = () => {
          clearTimeout(timer)
          resolve()
        }
      })
    }
    for (const slot of slots) {
      clearTimeout(slot.idle)
      if (slot.link !== undefined) retire(slot.link)
    }
    await closeSockets(config.sockets)
  }

  return { withLink, lease, hold, close }
}

/**
 * Gives open sockets a moment to deliver the Terminate message postgres.js wrote, then destroys
 * those still open (a server that went away would otherwise keep them, and the process, alive).
 */
export const closeSockets = async (sockets: SocketRegistry, graceMillis = 100): Promise<void> => {
  if (sockets.size > 0) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceMillis)
      const check = () => {
        if (sockets.size === 0) {
          clearTimeout(timer)
          resolve()
        }
      }
      for (const socket of sockets) socket.once("close", check)
    })
  }
  for (const socket of sockets) socket.destroy()
  sockets.clear()
}

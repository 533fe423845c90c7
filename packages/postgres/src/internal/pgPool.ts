/**
 * The client's connection pool: `size` slots, each with at most one live connection, a link, which
 * is a one-connection postgres.js instance that lives exactly as long as its socket (see
 * pgSocket.ts). A slot whose link died gets a new one the next time it is used; nothing that was in
 * flight on the old one is ever sent again.
 *
 * A pool statement takes a free slot, or shares a busy one (pipelined, as postgres.js' own pool
 * does) when none is free; a transaction or a stream holds one alone until its scope closes, on the
 * link its first statement ran on, and fails at once once that link is gone. Waiters are served in
 * order. Closing the pool stops new work, gives statements in flight a grace period, then ends every
 * link and destroys the sockets still open.
 * @internal
 */
import { Effect, type Scope } from "effect"
import type { SqlError } from "effect/sql"
import { setTimeout } from "node:timers"
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
  /** A new one-connection instance; `onDead` runs when its socket closes, `onReady` after its startup. */
  readonly open: (onDead: () => void, onReady: () => void) => postgres.Sql
  /** The error for work that comes after the pool was closed. */
  readonly ended: () => SqlError.SqlError
  readonly sockets: SocketRegistry
  /** Close a connection unused for this long; undefined: never. */
  readonly idleTimeoutMillis: number | undefined
  /** Close a connection this old when it is given back (a new one is opened on demand). */
  readonly maxLifetimeMillis: () => number
}

export interface Pool {
  /** Runs `use` on a connection: a free one, else a busy one (pipelined), else it waits. */
  readonly withLink: <A, E, R>(
    use: (link: Link) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | SqlError.SqlError, R>
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
  /** Startup done: statements can be pipelined behind others (not behind one waiting for the connection). */
  ready: boolean
  readonly expires: number
  readonly watchers: Set<() => void>
}

interface Slot {
  link: LinkState | undefined
  /** Pool statements in flight on it (pipelined), or 1 while it is held. */
  active: number
  /** Held by a transaction or a stream: nothing else runs on it. */
  held: boolean
  idle: ReturnType<typeof setTimeout> | undefined
}

/** A pool statement may share a busy connection (pipelined); a transaction or stream needs one alone. */
type Want = "statement" | "exclusive"

interface Waiter {
  readonly want: Want
  readonly give: (slot: Slot) => void
  readonly fail: (error: SqlError.SqlError) => void
}

/** Statements pipelined on one connection at most, as postgres.js' own pool. */
const maxPipeline = 100

/** How long a tainted connection may keep statements in flight before it is retired regardless. */
const taintGraceMillis = 10_000

const swallow = () => {}

export const makePool = (config: PoolConfig): Pool => {
  const slots: Array<Slot> = Array.from(
    { length: config.size },
    () => ({ link: undefined, active: 0, held: false, idle: undefined })
  )
  const waiters: Array<Waiter> = []
  let closed = false
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
      ready: false,
      expires: Date.now() + config.maxLifetimeMillis(),
      watchers: new Set(),
      dead: () => state.retired,
      taint: () => {
        if (state.tainted) return
        state.tainted = true
        // Retired when its statements are done (see give); if one of them never is (postgres.js lost
        // track of it), after a grace period anyway.
        setTimeout(() => retire(state), taintGraceMillis).unref?.()
      },
      onRetired: (f) => {
        state.watchers.add(f)
        return () => void state.watchers.delete(f)
      }
    }
    ;(state as { sql: postgres.Sql }).sql = config.open(() => retire(state), () => void (state.ready = true))
    return state
  }

  const linkOf = (slot: Slot): LinkState => {
    if (slot.link === undefined || slot.link.retired) slot.link = newLink()
    return slot.link
  }

  const live = (slot: Slot) => slot.link !== undefined && !slot.link.retired
  /** A connection that is going away (retired, or to be retired once its statements are done). */
  const leaving = (slot: Slot) => slot.link !== undefined && (slot.link.retired || slot.link.tainted)

  const take = (slot: Slot, want: Want): Slot => {
    slot.active++
    if (want === "exclusive") slot.held = true
    clearTimeout(slot.idle)
    return slot
  }

  /**
   * A slot for `want`: a free one, preferring an open connection; for a statement, else the busy
   * connection with the fewest statements in flight, unless a transaction waits (it needs a
   * connection to become free, and statements piling onto every busy one would starve it).
   */
  const tryTake = (want: Want, transactionWaits: boolean): Slot | undefined => {
    let cold: Slot | undefined
    let busy: Slot | undefined
    for (const slot of slots) {
      if (slot.held) continue
      if (slot.active === 0) {
        if (live(slot)) return take(slot, want)
        cold ??= slot
      } else if (
        slot.active < maxPipeline && slot.link?.ready === true && !leaving(slot) &&
        (busy === undefined || slot.active < busy.active)
      ) {
        busy = slot
      }
    }
    if (cold !== undefined) return take(cold, want)
    return want === "statement" && busy !== undefined && !transactionWaits ? take(busy, want) : undefined
  }

  /** Serves waiters in order, as far as the slots allow. */
  const serve = () => {
    while (waiters.length > 0) {
      const waiter = waiters[0]!
      const transactionWaits = waiters.some((w, i) => i > 0 && w.want === "exclusive")
      const slot = tryTake(waiter.want, waiter.want === "statement" && transactionWaits)
      if (slot === undefined) return
      waiters.shift()
      waiter.give(slot)
    }
  }

  const give = (slot: Slot, want: Want) => {
    slot.active--
    if (want === "exclusive") slot.held = false
    const link = slot.link
    if (slot.active === 0) {
      if (link !== undefined && (link.tainted || link.expires <= Date.now())) retire(link)
      if (link !== undefined && !link.retired && config.idleTimeoutMillis !== undefined) {
        slot.idle = setTimeout(() => slot.active > 0 || slot.link !== link || retire(link), config.idleTimeoutMillis)
        slot.idle.unref?.()
      }
    }
    if (!closed) serve()
    if (slots.every((s) => s.active === 0)) onIdle?.()
  }

  const acquire = (want: Want): Effect.Effect<Slot, SqlError.SqlError> =>
    Effect.suspend(() => {
      if (closed) return Effect.fail(config.ended())
      const transactionWaits = waiters.some((w) => w.want === "exclusive")
      const slot = waiters.length === 0 || (want === "statement" && !transactionWaits)
        ? tryTake(want, transactionWaits)
        : undefined
      return slot !== undefined ? Effect.succeed(slot) : wait(want)
    })

  const wait = (want: Want): Effect.Effect<Slot, SqlError.SqlError> =>
    Effect.callback<Slot, SqlError.SqlError>((resume) => {
      const waiter: Waiter = {
        want,
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
      Effect.flatMap(
        restore(acquire("statement")),
        (slot) => Effect.ensuring(restore(use(linkOf(slot))), Effect.sync(() => give(slot, "statement")))
      )
    )

  const lease = Effect.acquireRelease(acquire("exclusive"), (slot) => Effect.sync(() => give(slot, "exclusive")), {
    interruptible: true
  }).pipe(Effect.map(linkOf))

  const hold = Effect.acquireRelease(
    Effect.map(acquire("exclusive"), (slot) => {
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
          give(slot, "exclusive")
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
    if (slots.some((slot) => slot.active > 0)) {
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

/**
 * The fibers of a relay group. They are not tied to the layer's scope, whose closing would wait
 * for each of them as long as it takes: a fiber stuck in a statement to a database that is gone, or
 * on a publisher that never answers, would hold shutdown forever. The relay's finalizer decides how
 * long to wait instead, and leaves behind (interrupted, to end when their call returns) what does
 * not end in time.
 * @internal
 */
import { Effect, type Fiber } from "effect"

/** `loop`: a background loop (lease recovery, retention, stats), stopped first at shutdown. */
export type Role = "task" | "loop"

/** The fibers a relay group started. */
export interface Workers {
  /** Starts `effect` in a fiber the group owns. */
  readonly fork: <A, E>(effect: Effect.Effect<A, E>, role?: Role) => Effect.Effect<Fiber.Fiber<A, E>>
  /** The group's fibers still running (of one role, or all). */
  readonly running: (role?: Role) => ReadonlyArray<Fiber.Fiber<unknown, unknown>>
}

/** A new, empty group. */
export const make = (): Workers => {
  const fibers = new Map<Fiber.Fiber<unknown, unknown>, Role>()
  return {
    fork: (effect, role = "task") =>
      Effect.tap(Effect.forkDetach(effect), (fiber) =>
        Effect.sync(() => {
          fibers.set(fiber, role)
          fiber.addObserver(() => fibers.delete(fiber))
        })),
    running: (role) => [...fibers].filter(([, r]) => role === undefined || r === role).map(([f]) => f)
  }
}

/** Asks `fibers` to stop, without waiting: each ends at its next interruptible point. */
export const interruptNow = (fibers: ReadonlyArray<Fiber.Fiber<unknown, unknown>>): Effect.Effect<void> =>
  Effect.sync(() => fibers.forEach((f) => f.interruptUnsafe()))

/**
 * An in-process executor's handle on its saga (`Saga.run`, a recovery worker compensating local
 * steps): compare-and-set writes that track the version, and the heartbeat that keeps its claim.
 */
import { Duration, Effect, Schedule } from "effect"
import { isRetryable, type StoreError } from "../Errors.ts"
import type { SagaConflict, SagaNotFound } from "../SagaErrors.ts"
import type { Claim, SagaRecord, SagaStore, SagaUpdate } from "../SagaStore.ts"

/**
 * This process's name in `claimed_by` when none is configured: one random name per process.
 * @since 0.1.0
 * @category constants
 */
export const processOwner = `saga-${Math.random().toString(36).slice(2, 10)}`

/**
 * A step runner's handle on its saga: the version its next compare-and-set expects.
 * @since 0.1.0
 * @category models
 */
export interface Tracker {
  readonly store: SagaStore["Service"]
  readonly id: string
  version: number
}

// A write that fails on a database blip is retried briefly. Writes are never interrupted halfway:
// whether they committed must be known before the next compare-and-set.
const writeRetry = Schedule.exponential("50 millis").pipe(Schedule.upTo({ times: 4 }))

/**
 * Applies an update with compare-and-set and moves the tracker to the new version. A transient
 * store failure is retried (a lost compare-and-set is not: the saga belongs to someone else now).
 * @since 0.1.0
 * @category combinators
 */
export const persist = (
  t: Tracker,
  update: SagaUpdate
): Effect.Effect<SagaRecord, SagaConflict | SagaNotFound | StoreError> =>
  Effect.suspend(() => t.store.update(t.id, t.version, update)).pipe(
    Effect.retry({ schedule: writeRetry, while: (e) => e._tag === "StoreError" && isRetryable(e) }),
    Effect.tap((record) => Effect.sync(() => void (t.version = record.version))),
    Effect.uninterruptible
  )

/**
 * Runs `effect` while renewing the claim every third of the lease. The heartbeat stops by itself
 * when the claim is no longer held (the saga ended, or another instance took it over).
 * @since 0.1.0
 * @category combinators
 */
export const withHeartbeat =
  (store: SagaStore["Service"], id: string, claim: Claim) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.scoped(Effect.gen(function*() {
      const period = Duration.millis(Math.max(10, Math.floor(Duration.toMillis(claim.lease) / 3)))
      const beat: Effect.Effect<void> = Effect.sleep(period).pipe(
        Effect.andThen(store.heartbeat(id, claim)),
        Effect.catch((e) => Effect.as(Effect.logWarning("saga heartbeat failed", e), true)),
        // false: the saga ended (its claim released) or another instance took it over (its next write will conflict)
        Effect.flatMap((held) => held ? beat : Effect.logDebug(`saga ${id}: claim no longer held; heartbeat stops`))
      )
      yield* Effect.forkScoped(beat)
      return yield* effect
    }))

/**
 * Unavailability is not a message failure: while the publisher (or its broker) or the database
 * cannot be reached, the relay pauses instead of claiming, counts no attempt and grows no backoff.
 * These are the waits it pauses with.
 * @internal
 */
import { Deferred, Duration, Effect, Fiber } from "effect"
import type { Publisher } from "../../Publisher.ts"

/**
 * Waits until the publisher can take messages (its `awaitAvailable`; a publisher without one is
 * always available), or until `stop` completes. True when available. `paused` counts the waits
 * that did not end at once.
 */
export const awaitPublisher = (
  publisher: Publisher["Service"],
  stop: Deferred.Deferred<void>,
  paused: { paused: number } = { paused: 0 }
): Effect.Effect<boolean> => {
  const awaitAvailable = publisher.awaitAvailable
  if (awaitAvailable === undefined) return Effect.succeed(true)
  // Started at once: an available publisher answers before the fork returns, and costs no race.
  return Effect.flatMap(Effect.forkChild(awaitAvailable, { startImmediately: true }), (fiber) => {
    if (fiber.pollUnsafe() !== undefined) return Effect.succeed(true)
    paused.paused++
    return Effect.raceFirst(Effect.as(Fiber.join(fiber), true), Effect.as(Deferred.await(stop), false)).pipe(
      Effect.ensuring(Effect.andThen(Effect.sync(() => void paused.paused--), Fiber.interrupt(fiber)))
    )
  })
}

/** Waits `duration`, or less if `stop` completes first. */
export const pause = (duration: Duration.Duration, stop: Deferred.Deferred<void>): Effect.Effect<void> =>
  Effect.raceFirst(Effect.sleep(duration), Deferred.await(stop))

const first = Duration.millis(50)
const cap = Duration.seconds(1)

/**
 * The pause after an unavailable publish: doubling from 50 ms to at most one second, so that a
 * relay whose publisher cannot say when it is back (no `awaitAvailable`) resumes within a second
 * of it coming back, while probing it at most once a second per poller.
 */
export const nextPause = (previous: Duration.Duration): Duration.Duration =>
  Duration.isZero(previous) ? first : Duration.min(Duration.times(previous, 2), cap)

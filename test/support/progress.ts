/**
 * Bounding tests by work done rather than by time: a long test on a loaded machine is slow but keeps
 * making progress; a test that hangs stops making it. `failOnStall` fails only in the second case.
 */
import { Duration, Effect } from "effect"

/**
 * Runs `effect`; fails (with `describe()` in the message) if `progress()` does not change for
 * `stall`. There is no limit on the total time.
 */
export const failOnStall = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  progress: () => number,
  options: { readonly stall: Duration.Input; readonly describe: () => string }
): Effect.Effect<A, E, R> => {
  const stall = Duration.toMillis(Duration.fromInputUnsafe(options.stall))
  const watchdog = Effect.gen(function*() {
    let last = progress()
    let since = Date.now()
    while (true) {
      yield* Effect.sleep("1 second")
      const now = progress()
      if (now !== last) {
        last = now
        since = Date.now()
      } else if (Date.now() - since >= stall) {
        return yield* Effect.die(new Error(`no progress for ${Math.round(stall / 1000)} s: ${options.describe()}`))
      }
    }
  })
  return Effect.raceFirst(effect, watchdog)
}

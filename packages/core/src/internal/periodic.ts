import { Cause, Duration, Effect } from "effect"

/**
 * Runs `effect` now and then every `interval` until interrupted. A failure or defect is logged
 * with `label` and the loop goes on: a background worker (lease reclaim, retention, stats, saga
 * recovery) must outlive a database that is briefly away. `jitter` (0–1) spreads the pauses of
 * instances that started together (0.2: ±20%). Rounds run untraced: a background chore that polls
 * (its statements included) must not emit a trace per round; work worth a span inside a round
 * (a saga recovered) turns tracing back on for itself (`Effect.withTracerEnabled(true)`).
 */
export const every = <E, R>(
  interval: Duration.Input,
  label: string,
  effect: Effect.Effect<unknown, E, R>,
  options: { readonly jitter?: number } = {}
): Effect.Effect<never, never, R> => {
  const ms = Duration.toMillis(Duration.fromInputUnsafe(interval))
  const jitter = options.jitter ?? 0
  const pause = jitter === 0
    ? Effect.sleep(Duration.millis(ms))
    : Effect.suspend(() => Effect.sleep(Duration.millis(ms * (1 - jitter + Math.random() * 2 * jitter))))
  return effect.pipe(
    Effect.withTracerEnabled(false),
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause) : Effect.logWarning(`${label} failed`, cause)
    ),
    Effect.andThen(pause),
    Effect.forever
  ) as Effect.Effect<never, never, R>
}

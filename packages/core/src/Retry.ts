/**
 * Retry schedules. Every retry in Tidings (relay backoff, redelivery, reconnect) is an Effect
 * `Schedule`; this module has the defaults and turns a schedule into "the delay before attempt n",
 * which is what a stored `available_at` needs.
 * @since 0.1.0
 * @module
 */
import { Duration, Effect, Option, Pull, Schedule } from "effect"

/**
 * Options of {@link exponentialBackoff}.
 * @since 0.1.0
 * @category models
 */
export interface BackoffOptions {
  readonly base?: Duration.Input
  readonly factor?: number
  readonly max?: Duration.Input
  /** Randomize each delay by ×0.8..1.2 so that retries of many events do not move in lockstep. */
  readonly jitter?: boolean
}

/**
 * Exponential backoff `base × factor^n`, capped at `max`, jittered: 1 s doubling to 5 min by default.
 * @since 0.1.0
 * @category constructors
 */
export const exponentialBackoff = (options: BackoffOptions = {}): Schedule.Schedule<Duration.Duration> => {
  const capped = Schedule.min([
    Schedule.exponential(options.base ?? "1 second", options.factor ?? 2),
    Schedule.spaced(options.max ?? "5 minutes")
  ])
  return options.jitter === false ? capped : Schedule.jittered(capped)
}

/**
 * The delay a schedule gives before retry number `retry` (1 = the first retry), or `None` when the
 * schedule is exhausted by then.
 * @since 0.1.0
 * @category utils
 */
export const delayFor = <O, I>(
  schedule: Schedule.Schedule<O, I>,
  retry: number,
  input: I
): Effect.Effect<Option.Option<Duration.Duration>> =>
  Effect.gen(function*() {
    const step = yield* Schedule.toStep(schedule)
    let delay = Duration.zero
    for (let i = 0; i < retry; i++) delay = (yield* step(0, input))[1]
    return Option.some(delay)
  }).pipe(Pull.catchDone(() => Effect.succeedNone))

/**
 * Waiting for a state without a wall-clock cap a loaded machine can hit: a wait gives up only when
 * what it watches stops changing for a while (no progress), not after a fixed time. On a machine
 * running at a load of 30, things get slower, but they keep moving. `failOnStall` bounds a whole
 * test the same way: by work done rather than by time.
 * @module
 */
import { Duration, Effect } from "effect"

/** Options of {@link waitFor}. */
export interface WaitOptions<A> {
  /** What is awaited, for the error: `"the relay's 'ready' line"`. */
  readonly what: string
  /** Reads the current state. */
  readonly read: () => A | Promise<A>
  /** Whether the state is the awaited one. */
  readonly done: (state: A) => boolean
  /**
   * A fingerprint of the state: the wait goes on while it changes (progress), and gives up after
   * `stallMs` without a change. Default: `JSON.stringify` of the state.
   */
  readonly progress?: ((state: A) => unknown) | undefined
  /** Describes the state for the error when the wait gives up. Default: `JSON.stringify`. */
  readonly describe?: ((state: A) => string) | undefined
  /** Give up after this long without progress. Default 10 s. */
  readonly stallMs?: number | undefined
  /** Give up after this long in any case (a state that keeps changing without arriving). Default 10 min. */
  readonly maxMs?: number | undefined
  /** Between two reads. Default 50 ms. */
  readonly intervalMs?: number | undefined
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Resolves with the first state for which `done` holds; rejects when the state stops making
 * progress for `stallMs` (or after `maxMs`), naming what was awaited and the last state.
 */
export const waitFor = async <A>(options: WaitOptions<A>): Promise<A> => {
  const stallMs = options.stallMs ?? 10_000
  const maxMs = options.maxMs ?? 600_000
  const fingerprint = options.progress ?? ((state: A) => JSON.stringify(state))
  const describe = options.describe ?? ((state: A) => JSON.stringify(state))
  const start = Date.now()
  let lastChange = start
  let last: unknown = undefined
  for (let first = true;; first = false) {
    const state = await options.read()
    if (options.done(state)) return state
    const now = Date.now()
    const print = fingerprint(state)
    if (first || !Object.is(print, last) && JSON.stringify(print) !== JSON.stringify(last)) {
      last = print
      lastChange = now
    }
    if (now - lastChange >= stallMs || now - start >= maxMs) {
      const why = now - start >= maxMs ? `after ${maxMs} ms` : `no progress for ${stallMs} ms`
      throw new Error(`gave up waiting for ${options.what} (${why}); last state: ${describe(state)}`)
    }
    await sleep(options.intervalMs ?? 50)
  }
}

/** Options of {@link eventually}. */
export interface EventuallyOptions<A> {
  /** What is awaited, for the error. */
  readonly what: string
  /** A fingerprint of the state; the wait goes on while it changes. Default: `JSON.stringify`. */
  readonly progress?: ((state: A) => unknown) | undefined
  /** Give up after this long without progress. Default 30 s. */
  readonly stallMs?: number | undefined
  /** Between two reads. Default 20 ms. */
  readonly intervalMs?: number | undefined
}

/**
 * The Effect form of {@link waitFor}, on the real clock (`it.live`): runs `read` until `done` holds
 * for its result and returns that result; dies when the state stops changing for `stallMs`.
 */
export const eventually = <A, E, R>(
  read: Effect.Effect<A, E, R>,
  done: (state: A) => boolean,
  options: EventuallyOptions<A>
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const stallMs = options.stallMs ?? 30_000
    const fingerprint = options.progress ?? ((state: A) => JSON.stringify(state))
    let last: string | undefined
    let lastChange = Date.now()
    for (;;) {
      const state = yield* read
      if (done(state)) return state
      const print = JSON.stringify(fingerprint(state)) ?? "undefined"
      if (print !== last) {
        last = print
        lastChange = Date.now()
      } else if (Date.now() - lastChange >= stallMs) {
        return yield* Effect.die(
          new Error(`gave up waiting for ${options.what}: no progress for ${stallMs} ms; last state: ${print}`)
        )
      }
      yield* Effect.sleep(options.intervalMs ?? 20)
    }
  })

/**
 * Polls `check` until it holds. A yes/no check shows no progress to measure, so there is no cap a
 * loaded machine could hit: past `expectedMs` the wait says once what it still waits for (so that a
 * test that hangs names its wait before the test timeout ends it), and goes on.
 */
export const until = async (
  what: string,
  check: () => boolean | Promise<boolean>,
  expectedMs = 10_000
): Promise<void> => {
  const start = Date.now()
  let warned = false
  while (!(await check())) {
    if (!warned && Date.now() - start > expectedMs) {
      warned = true
      console.warn(`still waiting for ${what} after ${expectedMs} ms`)
    }
    await sleep(20)
  }
}

/**
 * The Effect form of {@link until}, on the real clock: polls `check` every 25 ms until it holds;
 * past `expected`, it says once what it still waits for, and goes on.
 */
export const untilTrue = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  expected: Duration.Input = "10 seconds",
  what = "condition"
): Effect.Effect<void, E, R> =>
  Effect.gen(function*() {
    const start = Date.now()
    const expectedMs = Duration.toMillis(Duration.fromInputUnsafe(expected))
    let warned = false
    while (!(yield* check)) {
      if (!warned && Date.now() - start > expectedMs) {
        warned = true
        console.warn(`still waiting for ${what} after ${Duration.format(Duration.fromInputUnsafe(expected))}`)
      }
      yield* Effect.sleep(25)
    }
  })

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

/**
 * Readiness checks: named effects that say whether a dependency is usable right now (the database
 * answers, the broker connection is up, the relays run). An HTTP `/ready` route (see `@tidings/hono`)
 * runs them together, each under a timeout. Drivers export their own: `PgClient.readiness`
 * (`SELECT 1`), `AmqpConnection.readiness` (connected and not blocked); {@link relay} is here. An
 * app on the in-memory stores has nothing that can be down: {@link up} reports ready.
 * @since 0.1.0
 * @module
 */
import { Cause, Clock, Duration, Effect, Exit, Option, Schema } from "effect"
import * as Errors from "./Errors.ts"
import { Relay } from "./Relay.ts"

const CheckFailedBase: Schema.Class<
  CheckFailed,
  Schema.TaggedStruct<"CheckFailed", {
    readonly check: Schema.String
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<CheckFailed>()("CheckFailed", {
  check: Schema.String,
  message: Schema.String
})

/**
 * Why a check failed; `message` is meant for operators (no credentials: drivers scrub them).
 * @since 0.1.0
 * @category errors
 */
export class CheckFailed extends CheckFailedBase {
  /** A dependency that is down may be up on the next probe. */
  get isRetryable(): boolean {
    return true
  }
}

/**
 * A named readiness check.
 * @since 0.1.0
 * @category models
 */
export interface Check<R = never> {
  readonly name: string
  readonly run: Effect.Effect<void, CheckFailed, R>
}

/**
 * A check from an effect: ready when it succeeds with `true` or nothing; not ready when it returns
 * `false` (with `notReady` as the message), fails or dies (with the error's tag and message).
 * @since 0.1.0
 * @category constructors
 */
export const make = <E, R>(
  name: string,
  check: Effect.Effect<boolean | void, E, R>,
  notReady = "not ready"
): Check<R> => ({
  name,
  run: Effect.exit(check).pipe(
    Effect.flatMap((exit) => {
      if (Exit.isSuccess(exit)) {
        return exit.value === false
          ? Effect.fail(new CheckFailed({ check: name, message: notReady }))
          : Effect.void
      }
      const error = Cause.findErrorOption(exit.cause)
      const message = Option.isSome(error)
        ? Errors.describe(error.value)
        : Cause.hasInterruptsOnly(exit.cause)
        ? "interrupted"
        : `defect: ${Errors.describe(Cause.squash(exit.cause))}`
      return Effect.fail(new CheckFailed({ check: name, message }))
    })
  )
})

/**
 * Always ready: for in-memory stores and brokers, which cannot be unreachable.
 * @since 0.1.0
 * @category constructors
 */
export const up = (name: string): Check => ({ name, run: Effect.void })

/**
 * Ready while the relay's pollers run and can publish: down when they stopped, or when all of them
 * are paused because the publisher is unavailable (`Relay.status`).
 * @since 0.1.0
 * @category checks
 */
export const relay: Check<Relay> = {
  name: "relay",
  run: Effect.flatMap(Relay.use((r) => r.status), (s) =>
    s.pollers === 0
      ? Effect.fail(new CheckFailed({ check: "relay", message: "the relay is not running" }))
      : s.paused >= s.pollers
      ? Effect.fail(new CheckFailed({ check: "relay", message: "paused: the publisher is unavailable" }))
      : Effect.void)
}

/**
 * What a union of checks requires (distributive, so that no checks require nothing).
 * @since 0.1.0
 * @category models
 */
export type Requirements<C> = C extends Check<infer R> ? R : never

/**
 * The outcome of one check.
 * @since 0.1.0
 * @category models
 */
export interface CheckResult {
  readonly name: string
  readonly status: "up" | "down"
  readonly durationMs: number
  /** Why it is down. */
  readonly message?: string
}

/**
 * The outcome of all checks: `up` when every one is.
 * @since 0.1.0
 * @category models
 */
export interface Report {
  readonly status: "up" | "down"
  readonly checks: ReadonlyArray<CheckResult>
}

/**
 * Runs the checks concurrently, each under `timeout` (default 2 s; a check that takes longer is
 * down). Never fails: a failing check is reported, not raised.
 * @since 0.1.0
 * @category running
 */
export const run = <const C extends ReadonlyArray<Check<any>>>(
  checks: C,
  options: { readonly timeout?: Duration.Input } = {}
): Effect.Effect<Report, never, Requirements<C[number]>> => {
  const timeout = Duration.fromInputUnsafe(options.timeout ?? "2 seconds")
  return Effect.forEach(checks, (check) =>
    Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      const exit = yield* check.run.pipe(
        Effect.timeoutOrElse({
          duration: timeout,
          orElse: () =>
            Effect.fail(new CheckFailed({ check: check.name, message: `timed out after ${Duration.format(timeout)}` }))
        }),
        Effect.exit
      )
      const durationMs = (yield* Clock.currentTimeMillis) - start
      if (Exit.isSuccess(exit)) return { name: check.name, status: "up", durationMs } satisfies CheckResult
      const error = Cause.findErrorOption(exit.cause)
      const message = Option.isSome(error)
        ? error.value.message
        : `defect: ${Errors.describe(Cause.squash(exit.cause))}`
      return { name: check.name, status: "down", durationMs, message } satisfies CheckResult
    }), { concurrency: "unbounded" }).pipe(
      Effect.map((results): Report => ({
        status: results.every((r) => r.status === "up") ? "up" : "down",
        checks: results
      }))
    )
}

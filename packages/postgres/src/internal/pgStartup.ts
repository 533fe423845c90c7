/**
 * Start-up retries of the client: while its layer is built, a server that cannot be reached (refused,
 * closed, a terminated backend) is tried again until `startupTimeout`.
 * @internal
 */
import * as Retry from "@tidings/core/Retry"
import { Cause, Clock, Duration, Effect, Exit, Option, Pull, Schedule } from "effect"
import type { SqlError } from "effect/sql"
import { errorCode, isConnectionCode } from "./pgError.ts"

/** Whether the server could not be reached (as opposed to refusing us): worth another try at start-up. */
const isUnreachable = (error: SqlError.SqlError): boolean => {
  const code = errorCode(error.reason.cause)
  // A TLS failure (untrusted certificate, a server without TLS) is a connection error too, but
  // trying again cannot change it: only refused, closed and terminated connections are retried.
  return isConnectionCode(code) || (error.reason._tag === "ConnectionError" && code === undefined)
}

const startupBackoff = Retry.exponentialBackoff({ base: "100 millis", max: "5 seconds" })

/**
 * Runs `effect` until it succeeds, fails with an error that is not {@link isUnreachable}, or
 * `timeoutMillis` have passed; near the deadline the last pause is shortened so that an attempt is
 * made at it.
 */
export const retryUntil = <A>(effect: Effect.Effect<A, SqlError.SqlError>, timeoutMillis: number) =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + timeoutMillis
    const step = yield* Schedule.toStep(startupBackoff)
    for (let attempt = 1;; attempt++) {
      const exit = yield* Effect.exit(effect)
      if (Exit.isSuccess(exit)) return exit.value
      const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
      const now = yield* Clock.currentTimeMillis
      if (error === undefined || !isUnreachable(error) || now >= deadline) return yield* Effect.failCause(exit.cause)
      const [, delay] = yield* step(now, error).pipe(
        Pull.catchDone(() => Effect.succeed([undefined, Duration.seconds(5)] as const))
      )
      yield* Effect.logWarning(`PgClient: start-up attempt ${attempt} failed, retrying: ${error.message}`)
      yield* Effect.sleep(Duration.millis(Math.min(Duration.toMillis(delay), deadline - now)))
    }
  })

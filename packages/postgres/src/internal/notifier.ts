import { Duration, Effect, Option, Queue, type Scope } from "effect"
import type { SqlClient } from "effect/sql"
import { instanceId } from "./instance.ts"

/**
 * A coalesced cross-process wake-up: a one-slot mailbox and one fiber sending `NOTIFY`s outside the
 * producers' transactions, at most one per `gap`; a signal during a `NOTIFY` in flight is kept for
 * the next one. Returns the effect a producer runs after its commit (it only fills the slot). On
 * shutdown, a commit still waiting for its `NOTIFY` gets it (best effort, bounded).
 */
export const coalescedNotifier = (
  sql: SqlClient.SqlClient,
  channel: string,
  gap: Duration.Duration
): Effect.Effect<Effect.Effect<void>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const mailbox = yield* Queue.sliding<void>(1)
    yield* Queue.take(mailbox).pipe(
      Effect.andThen(sql`SELECT pg_notify(${channel}, ${instanceId})`),
      Effect.andThen(Effect.sleep(gap)),
      Effect.catch((e) => Effect.logWarning("NOTIFY failed; readers elsewhere will poll", e)),
      Effect.forever,
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() =>
      Queue.poll(mailbox).pipe(
        Effect.flatMap((pending) =>
          Option.isSome(pending) ? Effect.asVoid(sql`SELECT pg_notify(${channel}, ${instanceId})`) : Effect.void
        ),
        Effect.timeout("1 second"),
        Effect.ignore
      )
    )
    return Effect.asVoid(Queue.offer(mailbox, undefined))
  })

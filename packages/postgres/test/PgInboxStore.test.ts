import { assert, describe, it } from "@effect/vitest"
import { inboxContract } from "@tidings/core/testing"
import { Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgInboxStore from "../src/PgInboxStore.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

/** Fresh inbox and outbox stores on a fresh schema, sharing one SqlClient (so they share transactions). */
const makeStores = (client: Layer.Layer<SqlClient.SqlClient, unknown>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(client)
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema("inbox")
      const sql = yield* SqlClient.SqlClient
      return {
        inbox: yield* PgInboxStore.make({ schema }),
        outbox: yield* PgOutboxStore.make({ schema }),
        // Rows made older in the database itself: retention is tested without waiting for real time.
        backdate: (age: Duration.Duration) =>
          sql`UPDATE ${sql(`${schema}.inbox`)} SET received_at = received_at - make_interval(secs => ${
            Duration.toMillis(age) / 1000
          })`.pipe(Effect.asVoid)
      }
    }).pipe(Effect.provideContext(context))
  })

inboxContract("postgres via PgClient (postgres.js)", makeStores(pgClientLayer()))
inboxContract("postgres via @effect/sql-pg", makeStores(sqlPgLayer()))

describe("PgInboxStore retention", () => {
  it.live("one instance prunes at a time: while another holds the retention lock, prune skips", () =>
    Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(pgClientLayer())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* freshSchema("inboxret")
        const store = yield* PgInboxStore.make({ schema })
        yield* store.begin("m1", "c", "i")
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`tidings.inbox.retention.${schema}`}))`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(locked)
        assert.isUndefined(yield* store.prune({ olderThan: Duration.zero, limit: 10 }))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        assert.strictEqual(yield* store.prune({ olderThan: Duration.zero, limit: 10 }), 1)
      }).pipe(Effect.provideContext(context))
    })))
})

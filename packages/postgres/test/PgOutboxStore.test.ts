import { assert, describe, it } from "@effect/vitest"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import { outboxStoreContract, seed } from "../../core/test/OutboxStoreContract.ts"
import { freshSchema, makePgStore, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

// The Postgres store passes the same contract as the memory store, on our postgres.js client and on
// @effect/sql-pg's (the stores depend only on effect/sql's SqlClient).
outboxStoreContract("postgres via PgClient (postgres.js)", makePgStore(pgClientLayer()))
outboxStoreContract("postgres via @effect/sql-pg", makePgStore(sqlPgLayer()))

describe("Postgres store specifics", () => {
  const showAfterClaim = (bookkeepingCommit: "async" | "sync") =>
    Effect.scoped(Effect.gen(function*() {
      // the store and the transaction below share one client, hence one connection
      const store = yield* PgOutboxStore.make({ schema: yield* freshSchema(), bookkeepingCommit })
      yield* seed(2).pipe(Effect.provideService(OutboxStore, store))
      const sql = yield* SqlClient.SqlClient
      // inside a transaction, the setting the claim made for its own transaction is visible after it
      return yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`SET LOCAL synchronous_commit = on` // the test server runs with it off
        const claimed = yield* store.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(30) })
        const [row] = yield* sql<{ synchronous_commit: string }>`SHOW synchronous_commit`
        return { claimed: claimed.length, mode: row!.synchronous_commit }
      }))
    })).pipe(Effect.provide(pgClientLayer()))

  it.live("relay bookkeeping commits without waiting for the WAL flush by default, and waits on request", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* showAfterClaim("async"), { claimed: 2, mode: "off" })
      assert.deepStrictEqual(yield* showAfterClaim("sync"), { claimed: 2, mode: "on" })
    }))

  // A concurrent claim can hold the lock of a row this relay settles (its SKIP LOCKED scan locked
  // the row before rechecking it). Settling it inside the statement that also claims would wait
  // while holding the new claim's locks: when that transaction then needs one of them, the two
  // deadlock (broken only after deadlock_timeout, one second, by aborting one of them).
  it.live("settle-and-claim never waits for a lock while holding its new claim", () =>
    Effect.scoped(Effect.gen(function*() {
      const schema = yield* freshSchema()
      const store = yield* PgOutboxStore.make({ schema })
      const sql = yield* SqlClient.SqlClient
      const outbox = sql(`${schema}.outbox`)
      const ids = yield* seed(3).pipe(Effect.provideService(OutboxStore, store))
      const lease = Duration.seconds(30)
      const [x] = yield* store.claim({ relayId: "r1", batchSize: 1, lease })
      assert.strictEqual(x!.message.id, ids[0])
      const locked = yield* Deferred.make<void>()
      const other = yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT id FROM ${outbox} WHERE id = ${ids[0]!} FOR UPDATE`
        yield* Deferred.succeed(locked, undefined)
        yield* Effect.sleep("300 millis")
        // the row the relay claims next: free once its claim committed
        yield* sql`UPDATE ${outbox} SET last_error = last_error WHERE id = ${ids[1]!}`
      })).pipe(Effect.forkScoped)
      yield* Deferred.await(locked)
      const started = Date.now()
      const next = yield* store.settleAndClaim("r1", { published: [ids[0]!], retry: [], failed: [] }, { relayId: "r1", batchSize: 1, lease })
      yield* Fiber.join(other)
      assert.deepStrictEqual(next.map((c) => c.message.id), [ids[1]])
      assert.isBelow(Date.now() - started, 900)
      const rows = yield* sql<{ id: string; status: string }>`SELECT id, status FROM ${outbox} ORDER BY seq`
      assert.deepStrictEqual(rows.map((r) => r.status), ["published", "processing", "pending"])
    })).pipe(Effect.provide(pgClientLayer())))
})

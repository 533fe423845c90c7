import { assert, describe, it } from "@effect/vitest"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Duration, Effect } from "effect"
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
})

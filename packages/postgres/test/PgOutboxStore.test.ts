import { assert, describe, it } from "@effect/vitest"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { outboxStoreContract, seed } from "@tidings/core/testing"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, makePgStore, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

// The Postgres store passes the same contract as the memory store, on our postgres.js client and on
// @effect/sql-pg's (the stores depend only on effect/sql's SqlClient).
outboxStoreContract("postgres via PgClient (postgres.js)", makePgStore(pgClientLayer()))
outboxStoreContract("postgres via @effect/sql-pg", makePgStore(sqlPgLayer()))

describe("Postgres store specifics", () => {
  /** A store on a fresh schema, with the client and its outbox table for direct queries. */
  const freshStore = Effect.gen(function*() {
    const schema = yield* freshSchema()
    const store = yield* PgOutboxStore.make({ schema })
    const sql = yield* SqlClient.SqlClient
    return { schema, store, sql, outbox: sql(`${schema}.outbox`) }
  })

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
      const { outbox, sql, store } = yield* freshStore
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
      const next = yield* store.settleAndClaim("r1", { published: [ids[0]!], retry: [], failed: [] }, {
        relayId: "r1",
        batchSize: 1,
        lease
      })
      yield* Fiber.join(other)
      assert.deepStrictEqual(next.map((c) => c.message.id), [ids[1]])
      assert.isBelow(Date.now() - started, 900)
      const rows = yield* sql<{ id: string; status: string }>`SELECT id, status FROM ${outbox} ORDER BY seq`
      assert.deepStrictEqual(rows.map((r) => r.status), ["published", "processing", "pending"])
    })).pipe(Effect.provide(pgClientLayer())))

  // Every event passes through 'processing', so until a vacuum the processing index holds a dead
  // entry per event. A settle that scanned that index (a plan the status condition allowed) cost
  // PostgreSQL CPU in proportion to recent traffic; it finds its rows by primary key instead.
  it.live("settling does not scan the processing index, however many rows are claimed", () =>
    Effect.scoped(Effect.gen(function*() {
      const { outbox, schema, sql, store } = yield* freshStore
      yield* seed(2_000).pipe(Effect.provideService(OutboxStore, store))
      // statistics from a table with nothing claimed, as a relay's table usually is when analyzed
      yield* sql`ANALYZE ${outbox}`
      const lease = Duration.seconds(30)
      yield* store.claim({ relayId: "others", batchSize: 1_990, lease })
      const mine = yield* store.claim({ relayId: "r1", batchSize: 10, lease })
      const scans = Effect.gen(function*() {
        // one connection (below): the flush applies to this session's counters at its next commit
        yield* sql`SELECT pg_stat_force_next_flush()`
        const [row] = yield* sql<{ n: string | number }>`SELECT idx_scan AS n FROM pg_stat_user_indexes
          WHERE schemaname = ${schema} AND indexrelname = 'outbox_processing_idx'`
        return Number(row?.n ?? 0)
      })
      const before = yield* scans
      const settled = yield* store.settle("r1", {
        published: mine.slice(0, 5).map((c) => c.message.id),
        retry: [],
        failed: []
      })
      const next = yield* store.settleAndClaim("r1", {
        published: [mine[5]!.message.id],
        retry: [{ id: mine[6]!.message.id, delay: Duration.seconds(1), error: "broker down" }],
        failed: [{ id: mine[7]!.message.id, error: "rejected" }]
      }, { relayId: "r1", batchSize: 10, lease })
      assert.strictEqual(settled, 5)
      assert.strictEqual(next.length, 0) // the rest is claimed by "others"
      assert.strictEqual(yield* scans, before)
      const rows = yield* sql<{ status: string; n: number }>`SELECT status, count(*)::int AS n FROM ${outbox}
        WHERE claimed_by IS DISTINCT FROM 'others' GROUP BY status ORDER BY status`
      assert.deepStrictEqual(rows.map((r) => [r.status, r.n]), [["failed", 1], ["pending", 1], ["processing", 2], [
        "published",
        6
      ]])
    })).pipe(Effect.provide(pgClientLayer(undefined, 1))))

  it.live("a row is claimed exactly when it is processing (checked by the table)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { outbox, sql, store } = yield* freshStore
      const [id] = yield* seed(1).pipe(Effect.provideService(OutboxStore, store))
      const violates = (update: Effect.Effect<unknown, unknown>) =>
        Effect.map(Effect.flip(update), (e) => String((e as { cause?: unknown }).cause ?? e))
      assert.include(
        yield* violates(sql`UPDATE ${outbox} SET status = 'processing' WHERE id = ${id!}`),
        "outbox_claim_check"
      )
      assert.include(
        yield* violates(sql`UPDATE ${outbox} SET claimed_by = 'r1' WHERE id = ${id!}`),
        "outbox_claim_check"
      )
      const [claimed] = yield* store.claim({ relayId: "r1", batchSize: 1, lease: Duration.seconds(30) })
      assert.strictEqual(claimed!.message.id, id)
    })).pipe(Effect.provide(pgClientLayer())))
})

import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Metrics from "@tidings/core/Metrics"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { eventually, startRelay } from "@tidings/core/testing"
import { Effect, Layer, Metric, Schema, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { freshSchema, pgUrl, sqlPgLayer } from "../../../test/support/pg.ts"
import { exited, spawnScript, waitForOutput } from "../../../test/support/processes.ts"
import { tempDir } from "../../../test/support/tempDir.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

const script = path.join(import.meta.dirname, "fixtures", "relayProcess.ts")
const Tick = Event.define("tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })

/** A file path in a temporary folder removed when the test's scope closes. */
const tmpFile = (name: string) => Effect.map(tempDir("tidings-mp"), (dir) => path.join(dir, name))

const seed = (count: number, chunk = 1000) =>
  Effect.gen(function*() {
    const store = yield* OutboxStore
    const ids: Array<string> = []
    for (let from = 0; from < count; from += chunk) {
      const drafts = Array.from({ length: Math.min(chunk, count - from) }, (_, i) =>
        Tick.make({ aggregateId: `k${(from + i) % 97}`, payload: { n: from + i } }))
      const written = yield* store.withTransaction(Outbox.appendAll(drafts))
      ids.push(...written.map((m) =>
        m.id
      ))
    }
    return ids
  })

/** A fresh schema and a Postgres store for it, for the test's own process. */
const withSchema = <A, E>(
  body: (
    schema: string
  ) => Effect.Effect<
    A,
    E,
    | OutboxStore
    | SqlClient.SqlClient
    | MemoryBroker.MemoryBroker
    | import("@tidings/core/Publisher").Publisher
    | Scope.Scope
  >
) =>
  Effect.scoped(Effect.gen(function*() {
    const schema = yield* freshSchema("mp")
    return yield* body(schema).pipe(
      Effect.provide(Layer.mergeAll(PgOutboxStore.layer({ schema }), MemoryBroker.layer()))
    )
  })).pipe(Effect.provide(sqlPgLayer()))

describe("relays in several processes", () => {
  it.live(
    "8 relays (2 processes × 4) publish 20,000 events exactly once",
    () =>
      withSchema((schema) =>
        Effect.gen(function*() {
          const ids = yield* seed(20_000)
          const outs = [yield* tmpFile("a.json"), yield* tmpFile("b.json")]
          const children = outs.map((out) =>
            spawnScript(script, {
              TIDINGS_TEST_PG_URL: pgUrl(),
              SCHEMA: schema,
              OUT: out,
              MODE: "drain",
              RELAYS: "4",
              BATCH: "100"
            })
          )
          const codes = yield* Effect.promise(() => Promise.all(children.map(exited)))
          assert.deepStrictEqual(codes, [0, 0], children.map((c) => c.output()).join("\n"))
          const perProcess = outs.map((out) =>
            (JSON.parse(fs.readFileSync(out, "utf8")) as { published: Array<string> }).published
          )
          const all = perProcess.flat()
          assert.strictEqual(all.length, 20_000, "published count (duplicates would make it larger)")
          assert.strictEqual(new Set(all).size, 20_000)
          assert.deepStrictEqual(new Set(all), new Set(ids))
          for (const mine of perProcess) assert.isAbove(mine.length, 0, "both processes took part")
          const stats = yield* (yield* OutboxStore).stats
          assert.deepStrictEqual([stats.published, stats.pending, stats.processing, stats.failed], [20_000, 0, 0, 0])
        })
      ),
    120_000
  )

  it.live(
    "a relay killed after claiming leaves its events to another relay once the lease expires",
    () =>
      withSchema((schema) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const ids = yield* seed(20)
          const out = yield* tmpFile("claimed.json")
          const leaseMs = 1500
          const doomed = spawnScript(script, {
            TIDINGS_TEST_PG_URL: pgUrl(),
            SCHEMA: schema,
            OUT: out,
            MODE: "claim",
            BATCH: "10",
            LEASE_MS: String(leaseMs)
          })
          yield* Effect.promise(() => waitForOutput(doomed, "claimed"))
          const claimedAt = Date.now()
          doomed.kill("SIGKILL")
          assert.strictEqual(yield* Effect.promise(() => exited(doomed)), "SIGKILL")
          const claimed = (JSON.parse(fs.readFileSync(out, "utf8")) as { claimed: Array<string> }).claimed
          assert.strictEqual(claimed.length, 10)

          const reclaimedBefore = (yield* Metric.value(Metrics.reclaimed)).count
          const broker = yield* MemoryBroker.MemoryBroker
          const { stop } = yield* startRelay({
            statsInterval: false,
            retention: false,
            reclaimInterval: "100 millis",
            pollInterval: { base: "20 millis", max: "50 millis" }
          })
          // the 10 unclaimed events go at once; the 10 claimed ones wait for the lease
          yield* eventually(Effect.map(broker.delivered, (d) => d.length >= 10), "5 seconds", "the unclaimed events")
          yield* eventually(Effect.map(broker.delivered, (d) => d.length === 20), "10 seconds", "the reclaimed events")
          yield* stop
          const delivered = yield* broker.delivered
          assert.deepStrictEqual(new Set(delivered.map((d) => d.message.id)), new Set(ids))
          const claimedSet = new Set(claimed)
          for (const d of delivered.filter((d) => claimedSet.has(d.message.id))) {
            assert.isAtLeast(d.receivedAt, claimedAt + leaseMs - 100, "not before the lease expired")
          }
          for (const d of delivered.filter((d) => !claimedSet.has(d.message.id))) {
            assert.isBelow(d.receivedAt, claimedAt + leaseMs, "unclaimed events did not wait")
          }
          assert.strictEqual((yield* Metric.value(Metrics.reclaimed)).count - reclaimedBefore, 10)
          const rows = yield* sql<{ id: string; attempts: number; status: string }>`SELECT id, attempts, status FROM ${
            sql(`${schema}.outbox`)
          }`
          for (const row of rows) {
            assert.strictEqual(row.status, "published")
            assert.strictEqual(Number(row.attempts), claimedSet.has(row.id) ? 2 : 1)
          }
        })
      ),
    60_000
  )

  it.live(
    "a process that dies publishing an event handed to its relay after commit (eager dispatch) leaves it to another relay",
    () =>
      withSchema((schema) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const outbox = sql(`${schema}.outbox`)
          const leaseMs = 1000
          const doomed = spawnScript(script, {
            TIDINGS_TEST_PG_URL: pgUrl(),
            SCHEMA: schema,
            OUT: yield* tmpFile("unused.json"),
            MODE: "append",
            COUNT: "5",
            POISON: "2",
            LEASE_MS: String(leaseMs)
          })
          assert.strictEqual(yield* Effect.promise(() => exited(doomed)), "SIGKILL")
          const rows = () =>
            sql<{ n: number; status: string; attempts: number; claimed_by: string | null }>`
          SELECT (payload->>'n')::int AS n, status, attempts, claimed_by FROM ${outbox} ORDER BY seq`
          const before = yield* rows()
          // events 0 and 1 went out eagerly; the poison one was written claimed by the dead relay's lane and never settled
          assert.deepStrictEqual(before.map((r) => r.n), [0, 1, 2])
          assert.strictEqual(before[2]!.status, "processing")
          assert.match(before[2]!.claimed_by ?? "", /-eager$/)
          assert.strictEqual(Number(before[2]!.attempts), 1)
          const broker = yield* MemoryBroker.MemoryBroker
          const { stop } = yield* startRelay({
            statsInterval: false,
            retention: false,
            reclaimInterval: "100 millis",
            pollInterval: { base: "20 millis", max: "50 millis" }
          })
          yield* eventually(
            Effect.map(broker.delivered, (d) => d.some((x) => (x.message.payload as { n: number }).n === 2)),
            "10 seconds",
            "the recovered event"
          )
          yield* stop
          const after = yield* rows()
          assert.strictEqual(after[2]!.status, "published")
          assert.strictEqual(Number(after[2]!.attempts), 2, "one attempt died with the process, one succeeded")
          assert.deepStrictEqual(after.slice(0, 2).map((r) => r.status), ["published", "published"])
        })
      ),
    60_000
  )
})

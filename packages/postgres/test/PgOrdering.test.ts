import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { eventually, startRelay } from "@tidings/core/testing"
import { Deferred, Duration, Effect, Fiber, Layer, Schema, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { freshSchema, pgClientLayer, pgUrl } from "../../../test/support/pg.ts"
import { exited, spawnScript } from "../../../test/support/processes.ts"
import { tempDir } from "../../../test/support/tempDir.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

const Step = Event.define("step", { aggregateType: "flow", schema: Schema.Struct({ n: Schema.Int }) })

const withStore = <A, E>(
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
    const schema = yield* freshSchema("ord")
    return yield* body(schema).pipe(
      Effect.provide(Layer.mergeAll(PgOutboxStore.layer({ schema }), MemoryBroker.layer()))
    )
  })).pipe(Effect.provide(pgClientLayer(pgUrl(), 12)))

describe("per-key ordering on Postgres", () => {
  it.live("a later transaction's event waits for an earlier-started transaction that commits after it", () =>
    withStore(() =>
      Effect.gen(function*() {
        const store = yield* OutboxStore
        const broker = yield* MemoryBroker.MemoryBroker
        const [before] = yield* store.withTransaction(
          Outbox.appendAll([Step.make({ aggregateId: "other", payload: { n: 0 } })])
        )
        const { relay, stop } = yield* startRelay({
          ordering: "per-key",
          statsInterval: false,
          retention: false,
          pollInterval: { base: "20 millis", max: "50 millis" }
        })
        // T1 starts first and appends for key K, then stays open.
        const t1Appended = yield* Deferred.make<void>()
        const commitT1 = yield* Deferred.make<void>()
        const t1 = yield* Effect.forkChild(store.withTransaction(Effect.gen(function*() {
          yield* Outbox.append(Step, { aggregateId: "K", payload: { n: 1 } })
          yield* Deferred.succeed(t1Appended, undefined)
          yield* Deferred.await(commitT1)
        })))
        yield* Deferred.await(t1Appended)
        // T2 starts later, appends for K and commits first.
        yield* store.withTransaction(Outbox.append(Step, { aggregateId: "K", payload: { n: 2 } }))
        yield* eventually(Effect.map(broker.delivered, (d) => d.length >= 1), "5 seconds", "the unrelated event")
        // the relay has looked at K's events several times since, and left them
        const claims = (yield* relay.status).claims
        yield* eventually(Effect.map(relay.status, (s) => s.claims >= claims + 3), "5 seconds", "three more claims")
        const early = yield* broker.delivered
        assert.deepStrictEqual(
          early.map((d) => d.message.id),
          [before!.id],
          "K's later event waits while T1 may still commit"
        )
        yield* Deferred.succeed(commitT1, undefined)
        yield* Fiber.join(t1)
        yield* eventually(Effect.map(broker.delivered, (d) => d.length === 3), "5 seconds", "K's events")
        yield* stop
        const k = (yield* broker.delivered).filter((d) => d.message.orderingKey === "K").map((d) =>
          (d.message.payload as { n: number }).n
        )
        assert.deepStrictEqual(k, [1, 2], "published in transaction order: T1's event first")
      })
    ))

  it.live("a long-running transaction anywhere delays per-key publishing, not unordered (the documented trade-off)", () =>
    withStore((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const blockerTable = sql(`${schema}.blocker`)
        yield* sql`CREATE TABLE ${blockerTable} (x int)`
        const store = yield* OutboxStore
        const release = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        // An unrelated transaction that has written something (so it holds an xid) and stays open.
        const blocker = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO ${blockerTable} VALUES (1)`
          yield* Deferred.succeed(started, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(started)
        yield* store.withTransaction(Outbox.append(Step, { aggregateId: "K", payload: { n: 1 } }))
        const claim = (ordering: "per-key" | "unordered") =>
          store.claim({ relayId: "r", batchSize: 10, lease: Duration.seconds(30), ordering })
        assert.strictEqual((yield* claim("per-key")).length, 0, "held back while an older transaction runs")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(blocker)
        yield* eventually(
          Effect.map(claim("per-key"), (got) => got.length === 1),
          "5 seconds",
          "the per-key claim after the transaction ended"
        )
        // unordered never waits
        const held = yield* Deferred.make<void>()
        const inserted = yield* Deferred.make<void>()
        const another = yield* Effect.forkChild(sql.withTransaction(sql`INSERT INTO ${blockerTable} VALUES (2)`.pipe(
          Effect.andThen(Deferred.succeed(inserted, undefined)),
          Effect.andThen(Deferred.await(held))
        )))
        yield* Deferred.await(inserted)
        yield* store.withTransaction(Outbox.append(Step, { aggregateId: "J", payload: { n: 1 } }))
        assert.strictEqual((yield* claim("unordered")).length, 1)
        yield* Deferred.succeed(held, undefined)
        yield* Fiber.join(another)
      })
    ))
})

describe("crash-loop guard with a real process", () => {
  it.live(
    "an event whose publish kills the relay process is failed after maxCrashes; the others are published",
    () =>
      withStore((schema) =>
        Effect.gen(function*() {
          const store = yield* OutboxStore
          const ids = yield* store.withTransaction(
            Outbox.appendAll(Array.from({ length: 10 }, (_, n) => Step.make({ aggregateId: `a${n}`, payload: { n } })))
          )
          const poison = ids[3]!.id
          const script = path.join(import.meta.dirname, "fixtures", "relayProcess.ts")
          const outcomes: Array<number | string> = []
          const published: Array<string> = []
          const dir = yield* tempDir("tidings-crash")
          for (let run = 0; run < 6; run++) {
            const out = path.join(dir, `out-${run}.json`)
            const child = spawnScript(script, {
              TIDINGS_TEST_PG_URL: pgUrl(),
              SCHEMA: schema,
              OUT: out,
              MODE: "drain",
              RELAYS: "1",
              BATCH: "10",
              LEASE_MS: "600",
              MAX_CRASHES: "3",
              POISON: "3"
            })
            const code = yield* Effect.promise(() => exited(child))
            outcomes.push(code)
            if (code === 0) {
              published.push(...(JSON.parse(fs.readFileSync(out, "utf8")) as { published: Array<string> }).published)
              break
            }
            assert.strictEqual(code, "SIGKILL", child.output())
            // the dead process's lease runs out
            const sql = yield* SqlClient.SqlClient
            yield* eventually(
              Effect.map(
                sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
                  sql(`${schema}.outbox`)
                } WHERE status = 'processing' AND claimed_until >= now()`,
                ([r]) => r?.n === 0
              ),
              "5 seconds",
              "the lease to expire"
            )
          }
          assert.deepStrictEqual(outcomes, ["SIGKILL", "SIGKILL", "SIGKILL", 0])
          const failed = yield* store.listFailed({ limit: 10 })
          assert.deepStrictEqual(failed.map((f) => f.message.id), [poison])
          assert.match(failed[0]!.lastError ?? "", /crash loop: 3 publish attempts started and none finished/)
          const stats = yield* store.stats
          assert.deepStrictEqual([stats.published, stats.failed, stats.pending, stats.processing, stats.suspect], [
            9,
            1,
            0,
            0,
            0
          ])
          assert.notInclude(published, poison)
        })
      ),
    60_000
  )
})

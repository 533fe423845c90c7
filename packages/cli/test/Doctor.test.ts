/**
 * `tidings doctor` as a real process (on the runtime the suite runs on) against the orders example
 * running on the test PostgreSQL: a clean report while it serves, the open transaction named when
 * one is left open, the relay named once the service (and so its relay) is stopped with events
 * pending; and in-process on a schema without Tidings' tables and with an unreachable broker.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Migrator from "@tidings/postgres/Migrator"
import { Deferred, Effect, Fiber, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as path from "node:path"
import { pgClientLayer, pgUrl, schemaName } from "../../../test/support/pg.ts"
import { currentRuntime, exited, spawnOn, stopChild, waitForOutput } from "../../../test/support/processes.ts"
import { appendEvents, bin, dropSchema, Shipped, stores, target, tidings } from "./support.ts"

const orders = path.join(import.meta.dirname, "../../../examples/orders/main.ts")
const runtime = currentRuntime()

/** Resolves once `query` (a count) finds a row: the thing it looks at has been there for more than a second. */
const olderThanASecond = (query: string) =>
  Effect.runPromise(
    SqlClient.SqlClient.use((sql) =>
      sql.unsafe<{ n: number }>(query).pipe(
        Effect.filterOrFail((rows) => rows[0]!.n > 0),
        Effect.retry(Schedule.spaced("50 millis"))
      )
    ).pipe(Effect.provide(pgClientLayer(pgUrl(), 1)))
  )

/** Runs the executable to its end; returns its code and output. */
const doctor = async (schema: string, ...args: ReadonlyArray<string>) => {
  const child = spawnOn(runtime, bin, ["doctor", ...args], {
    TIDINGS_PG_URL: pgUrl(),
    TIDINGS_SCHEMA: schema,
    TIDINGS_AMQP_URL: ""
  })
  const code = await exited(child)
  return { code, output: child.output() }
}

describe(`tidings doctor on the orders example (${runtime})`, () => {
  const schema = schemaName("clidoc")
  let service: ReturnType<typeof spawnOn> | undefined
  let base: string
  beforeAll(async () => {
    service = spawnOn(runtime, orders, ["--serve"], {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_AMQP_URL: "",
      TIDINGS_SCHEMA: schema,
      TIDINGS_ADMIN_TOKEN: `doctor-${crypto.randomUUID()}`,
      TIDINGS_HTTP_PORT: "0",
      TIDINGS_LOG_LEVEL: "Error"
    })
    await waitForOutput(service, "serving; Ctrl-C stops")
    base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(service.output())![1]!
  })
  afterAll(async () => {
    if (service !== undefined) await stopChild(service)
    await dropSchema(schema)
  })

  it("prints a clean report while the service runs", async () => {
    const orderId = `doc-${crypto.randomUUID().slice(0, 8)}`
    const placed = await fetch(`${base}/orders`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ orderId, customer: "ada", sku: "book", quantity: 1, amountCents: 999 })
    })
    assert.strictEqual(placed.status, 202)
    for (let status = "pending"; status === "pending";) {
      status = ((await (await fetch(`${base}/orders/${orderId}`)).json()) as { order: { status: string } }).order.status
    }
    const { code, output } = await doctor(schema)
    assert.strictEqual(code, 0, output)
    assert.match(output, /^ok {4}database {6}PostgreSQL \d+/m)
    assert.match(output, new RegExp(`^ok {4}migrations {4}${Migrator.all.length} applied, none pending$`, "m"))
    assert.match(output, /^ok {4}relay {9}(no pending events|\d+ pending)/m)
    assert.match(output, /^ok {4}failed {8}outbox 0 failed, inbox 0 dead-lettered, sagas 0 failed$/m)
    assert.match(output, /^ok {4}transactions {2}/m)
    assert.include(output, "no problems found")
  })

  it("names a transaction left open: it holds back ordered publishing", async () => {
    const opened = await Effect.runPromise(Deferred.make<void>())
    const release = await Effect.runPromise(Deferred.make<void>())
    const holder = Effect.runFork(
      SqlClient.SqlClient.use((sql) =>
        sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT pg_current_xact_id()`
          yield* Deferred.succeed(opened, undefined)
          yield* Deferred.await(release)
        }))
      ).pipe(Effect.provide(pgClientLayer(pgUrl(), 1)))
    )
    try {
      await Effect.runPromise(Deferred.await(opened))
      // Older than the threshold given below, as the database sees it.
      await olderThanASecond(`SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE query = 'SELECT pg_current_xact_id()' AND clock_timestamp() - xact_start > interval '1.1 seconds'`)
      const { code, output } = await doctor(schema, "--max-transaction-age", "1")
      assert.strictEqual(code, 1, output)
      // The holder's application_name is the test file's (test/support/pg.ts).
      assert.match(
        output,
        /^WARN {2}transactions {2}a transaction has been open for [\d.]+ s \(pid \d+, [\w-]+, idle in transaction; last query: SELECT pg_current_xact_id\(\)\): it holds back ordered \(per-key\) and log publishing until it ends$/m
      )
      assert.include(output, "1 problem found")
    } finally {
      await Effect.runPromise(Deferred.succeed(release, undefined))
      await Effect.runPromise(Fiber.await(holder))
    }
    assert.strictEqual((await doctor(schema, "--max-transaction-age", "1")).code, 0, "clean again once it ended")
  })

  it("names the relay when the service is stopped and events wait", async () => {
    await stopChild(service!)
    service = undefined
    const rt = stores(schema)
    try {
      await rt.runPromise(appendEvents([Shipped.make({ aggregateId: "waiting", payload: { n: 1 } })], false))
    } finally {
      await rt.dispose()
    }
    await olderThanASecond(`SELECT count(*)::int AS n FROM "${schema}".outbox
      WHERE status = 'pending' AND clock_timestamp() - created_at > interval '1.1 seconds'`)
    const { code, output } = await doctor(schema, "--max-lag", "1")
    assert.strictEqual(code, 1, output)
    assert.match(
      output,
      /^FAIL {2}relay {9}1 event pending, the oldest for [\d.]+ s \(more than 1 s\): no relay holds a claim: is a relay running against this schema \(tidings relay\)\?$/m
    )
  })
})

describe("tidings doctor without Tidings' tables, and with a broker that is down", () => {
  it("fails the migrations check and the broker check, with --json for scripts", async () => {
    const schema = schemaName("clidocempty")
    const ran = await tidings("doctor", "--json", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", ...target(schema))
    assert.strictEqual(ran.code, 1)
    const byName = Object.fromEntries(
      (ran.json.checks as Array<{ name: string; status: string; message: string }>).map((c) => [c.name, c])
    )
    assert.strictEqual(ran.json.ok, false)
    assert.strictEqual(byName["database"]!.status, "ok")
    assert.deepStrictEqual(byName["migrations"], {
      name: "migrations",
      status: "fail",
      message: `schema ${schema} has no Tidings tables: run tidings migrate`
    })
    assert.strictEqual(byName["broker"]!.status, "fail")
    assert.notInclude(byName["broker"]!.message, "guest:guest")
    const unreachable = await tidings(
      "doctor",
      "--database-url",
      "postgres://postgres:secret@127.0.0.1:1/postgres",
      "--schema",
      schema
    )
    assert.strictEqual(unreachable.code, 1)
    assert.match(unreachable.out, /^FAIL {2}database {2}cannot connect: /m)
    assert.notInclude(unreachable.out, "secret")
  })
})

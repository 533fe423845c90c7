/**
 * Every `tidings` command against the test PostgreSQL (in-process, output captured): migrate,
 * outbox, inbox and saga. The broker commands (dlq, relay) and doctor have their own files.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { InboxStore } from "@tidings/core/InboxStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import { ConfigProvider, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { pgClientLayer, pgUrl, schemaName } from "../../../test/support/pg.ts"
import * as Cli from "../src/Cli.ts"
import { appendEvents, Billed, dropSchema, Shipped, stores, target, tidings } from "./support.ts"

describe("tidings migrate", () => {
  const schema = schemaName("climig")
  const role = `tidings_cli_app_${Math.random().toString(36).slice(2, 8)}`
  const sql = <A>(f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) =>
    Effect.runPromise(SqlClient.SqlClient.use(f).pipe(Effect.provide(pgClientLayer(pgUrl(), 1))))
  afterAll(async () => {
    await dropSchema(schema)
    await sql((s) => s.unsafe(`DROP ROLE IF EXISTS ${role}`)).catch(() => undefined)
  })

  it("--dry-run lists the pending migrations and changes nothing; --print-sql shows their SQL", async () => {
    const dry = await tidings("migrate", "--dry-run", ...target(schema))
    assert.strictEqual(dry.code, 0, dry.err)
    assert.match(dry.out, /VERSION\s+MIGRATION\n1\s+outbox\n2\s+ordering_and_crash_guard\n/)
    assert.include(dry.out, "dry run: 6 pending migrations not applied")
    const json = await tidings("migrate", "--dry-run", "--json", ...target(schema))
    assert.deepStrictEqual(json.json.pending.map((m: { version: number }) => m.version), [1, 2, 3, 4, 5, 6])
    const printed = await tidings("migrate", "--dry-run", "--print-sql", "--grant-to", role, ...target(schema))
    // The Migrator's own script: what `migrate` runs, transaction by transaction.
    assert.include(printed.out, `CREATE SCHEMA "${schema}";`)
    assert.match(printed.out, /-- 0001 outbox\nBEGIN;\n[^]*CREATE TABLE [^]*outbox \(/)
    assert.include(printed.out, `GRANT USAGE ON SCHEMA "${schema}" TO "${role}";`)
    assert.include(printed.out, `GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "${schema}".outbox`)
    const exists = await sql((s) =>
      s<{ n: number }>`SELECT count(*)::int AS n FROM information_schema.schemata WHERE schema_name = ${schema}`
    )
    assert.strictEqual(exists[0]!.n, 0, "a dry run creates nothing")
  })

  it("applies the migrations, grants a role the app's rights, and is idempotent", async () => {
    await sql((s) => s.unsafe(`CREATE ROLE ${role} NOLOGIN`))
    const ran = await tidings("migrate", "--grant-to", role, ...target(schema))
    assert.strictEqual(ran.code, 0, ran.err)
    assert.include(
      ran.out,
      `applied to ${schema}: 1 outbox, 2 ordering_and_crash_guard, 3 saga, 4 inbox, 5 claim_invariant, 6 log`
    )
    assert.include(ran.out, `granted ${role}`)
    const rights = await sql((s) =>
      s<{
        insert: boolean
        seq: boolean
      }>`SELECT has_table_privilege(${role}, ${`${schema}.outbox`}, 'INSERT') AS insert,
      has_sequence_privilege(${role}, ${`${schema}.outbox_seq_seq`}, 'USAGE') AS seq`
    )
    assert.deepStrictEqual(rights[0], { insert: true, seq: true })
    const again = await tidings("migrate", "--json", ...target(schema))
    assert.deepStrictEqual(again.json, { schema, applied: [], grantedTo: null })
    assert.include((await tidings("migrate", "--dry-run", ...target(schema))).out, `schema ${schema} is up to date`)
    // Bad input: a clear message, exit 1; a usage error: exit 2.
    const bad = await tidings("migrate", "--grant-to", "x; DROP TABLE y", ...target(schema))
    assert.strictEqual(bad.code, 1)
    assert.include(bad.err, "--grant-to must be a role name")
    assert.strictEqual((await tidings("migrate", "--bogus", ...target(schema))).code, 2)
    const noDb = await tidings("migrate", "--schema", schema)
    assert.strictEqual(noDb.code, 1)
    assert.include(noDb.err, "no database: pass --database-url or set TIDINGS_PG_URL")
  })
})

describe("tidings outbox, inbox and saga", () => {
  const schema = schemaName("clistore")
  let rt: ReturnType<typeof stores>
  beforeAll(async () => {
    rt = stores(schema)
    await rt.runPromise(Effect.void)
  })
  afterAll(async () => {
    await rt?.dispose()
    await dropSchema(schema)
  })

  it("settings as the app reads them: TIDINGS_* variables, the flags winning, a wrong value named with its flag", async () => {
    const withEnv = async (env: Record<string, string>, ...args: ReadonlyArray<string>) => {
      let err = ""
      const code = await Effect.runPromise(
        Cli.run(args).pipe(
          Effect.provideService(Cli.Output, {
            write: () => undefined,
            error: (t) => void (err += t),
            interactive: false,
            columns: 160
          }),
          Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
        )
      )
      return { code, err }
    }
    const url = pgUrl()
    const fromEnv = await withEnv({ TIDINGS_PG_URL: url, TIDINGS_SCHEMA: schema }, "outbox", "stats", "--json")
    assert.strictEqual(fromEnv.code, 0, fromEnv.err)
    const missing = await withEnv(
      { TIDINGS_PG_URL: url, TIDINGS_SCHEMA: `${schema}_missing` },
      "outbox",
      "stats",
      "--json"
    )
    assert.strictEqual(missing.code, 1, "the variable's schema is used")
    const flagWins = await withEnv(
      { TIDINGS_PG_URL: "postgres://nobody@127.0.0.1:1/none", TIDINGS_SCHEMA: "Not-A-Schema" },
      "outbox",
      "stats",
      ...target(schema)
    )
    assert.strictEqual(flagWins.code, 0, flagWins.err)
    const bad = await withEnv({ TIDINGS_PG_URL: url, TIDINGS_SCHEMA: "Not-A-Schema" }, "outbox", "stats")
    assert.strictEqual(bad.code, 1)
    assert.include(bad.err, "--schema / TIDINGS_SCHEMA: must be 1-63 characters")
    const badPool = await withEnv({ TIDINGS_PG_MAX_CONNECTIONS: "none" }, "outbox", "stats", ...target(schema))
    assert.strictEqual(badPool.code, 1)
    assert.include(badPool.err, "TIDINGS_PG_MAX_CONNECTIONS: Expected number, got \"none\"")
    const none = await withEnv({}, "outbox", "stats")
    assert.include(none.err, "no database: pass --database-url or set TIDINGS_PG_URL")
  })

  it("outbox stats, list, show, retry (by type, with progress) and discard", async () => {
    await rt.runPromise(
      appendEvents([
        ...Array.from({ length: 3 }, (_, n) => Shipped.make({ aggregateId: `p${n}`, payload: { n } })),
        Billed.make({ aggregateId: "b", payload: { n: 9 } })
      ], true)
    )
    await rt.runPromise(appendEvents([Shipped.make({ aggregateId: "pending", payload: { n: 10 } })], false))

    const stats = await tidings("outbox", "stats", ...target(schema))
    assert.strictEqual(stats.code, 0, stats.err)
    assert.match(stats.out, /pending\s+1\n/)
    assert.match(stats.out, /failed\s+4\n/)
    assert.match(stats.out, /failed by type:\nTYPE\s+FAILED\nparcel\.shipped\s+3\ninvoice\.billed\s+1/)
    const json = (await tidings("outbox", "stats", "--json", ...target(schema))).json
    assert.include(json, { pending: 1, failed: 4, published: 0 })
    assert.isAbove(json.oldestPendingAgeMs, -1)

    const failed = await tidings(
      "outbox",
      "list",
      "--status",
      "failed",
      "--type",
      Shipped.type,
      "--json",
      ...target(schema)
    )
    assert.strictEqual(failed.json.length, 3)
    assert.deepStrictEqual(failed.json.map((e: { lastError: string }) => e.lastError), [
      "refused by the test",
      "refused by the test",
      "refused by the test"
    ])
    const table = await tidings("outbox", "list", "--status", "failed", ...target(schema))
    assert.match(table.out, /^ID\s+TYPE\s+AGGREGATE\s+STATUS\s+ATTEMPTS\s+LAST ERROR\s+CREATED\n/)
    assert.strictEqual(table.out.trim().split("\n").length, 5)

    const id = failed.json[0].id as string
    const shown = await tidings("outbox", "show", id, ...target(schema))
    assert.include(shown.out, `${id}  parcel.shipped v1  failed`)
    assert.include(shown.out, "last error: refused by the test (the outbox keeps the last attempt's error only)")
    assert.include(shown.out, "\"traceparent\"")
    const missing = await tidings("outbox", "show", "0190a0f4-5b4e-7c3d-8a1b-2c3d4e5f6a7b", ...target(schema))
    assert.strictEqual(missing.code, 1)
    assert.include(missing.err, "no outbox event")

    const retried = await tidings("outbox", "retry", "--type", Shipped.type, ...target(schema))
    assert.strictEqual(retried.code, 0, retried.err)
    assert.include(retried.out, "retried 3 failed events")
    assert.include(retried.err, "retrying [------------------------------] 0% 0/3")
    assert.include(retried.err, "retrying [##############################] 100% 3/3")
    const after = await rt.runPromise(OutboxStore.use((s) => s.stats))
    assert.deepStrictEqual([after.pending, after.failed], [4, 1])
    assert.strictEqual((await tidings("outbox", "retry", ...target(schema))).code, 1, "nothing chosen")

    const billed = (await tidings("outbox", "list", "--status", "failed", "--json", ...target(schema))).json[0].id
    const discarded = await tidings("outbox", "discard", billed, "--json", ...target(schema))
    assert.deepStrictEqual(discarded.json, { discarded: 1 })
    assert.strictEqual((await rt.runPromise(OutboxStore.use((s) => s.stats))).failed, 0)
  })

  it("inbox list and replay (one, or all of a consumer's, requeued from the outbox)", async () => {
    const [a, b] = await rt.runPromise(
      appendEvents([
        Shipped.make({ aggregateId: "i1", payload: { n: 1 } }),
        Shipped.make({ aggregateId: "i2", payload: { n: 2 } })
      ], false)
    )
    await rt.runPromise(
      OutboxStore.use((s) =>
        Effect.flatMap(
          s.claim({ relayId: "r", batchSize: 100, lease: "30 seconds" as never }),
          (claimed) =>
            s.settle("r", {
              published: claimed.map((c) => c.message.id),
              retry: [],
              failed: []
            })
        )
      )
    )
    await rt.runPromise(
      InboxStore.use((s) =>
        Effect.all([
          s.markFailed(a!.id, "billing", "crash loop: 3 attempts"),
          s.markFailed(b!.id, "billing", "crash loop: 3 attempts"),
          s.markFailed(a!.id, "shipping", "crash loop")
        ])
      )
    )

    const listed = await tidings("inbox", "list", "--consumer", "billing", ...target(schema))
    assert.match(listed.out, /^MESSAGE\s+CONSUMER\s+STATUS/)
    assert.strictEqual(listed.out.trim().split("\n").length, 3)
    const one = await tidings("inbox", "replay", a!.id, "--consumer", "billing", ...target(schema))
    assert.strictEqual(one.code, 0, one.err)
    assert.include(one.out, "replayed 1 of 1 for billing: 1 published again from the outbox")
    assert.strictEqual((await rt.runPromise(OutboxStore.use((s) => s.get(a!.id))))?.status, "pending")
    const all = await tidings("inbox", "replay", "--all", "--consumer", "billing", "--json", ...target(schema))
    assert.deepStrictEqual(all.json, [{ messageId: b!.id, reset: true, requeued: true }])
    assert.include(all.err, "replaying [##############################] 100% 1/1")
    assert.strictEqual(
      (await tidings("inbox", "list", "--consumer", "shipping", "--json", ...target(schema))).json.length,
      1,
      "another consumer's dead letter stays"
    )
  })

  it("saga list with filters, show with the timeline, retry and compensate", async () => {
    const failedId = "0193b4a2-7c1e-7000-8000-0000000000c1"
    const runningId = "0193b4a2-7c1e-7000-8000-0000000000c2"
    await rt.runPromise(SagaStore.use((s) =>
      Effect.gen(function*() {
        yield* s.create({
          id: failedId,
          type: "cli-order",
          input: { orderId: "o-1" },
          steps: ["reserve", "charge"],
          stepUpdates: [{ index: 0, attemptStarted: true }]
        })
        yield* s.update(failedId, 0, {
          steps: [{ index: 0, status: "completed", result: { ok: true }, finished: true }]
        })
        yield* s.update(failedId, 1, {
          status: "failed",
          error: "compensation of reserve failed after 3 attempts",
          steps: [{ index: 0, status: "compensation_failed", compensationStarted: true }]
        })
        yield* s.create({
          id: runningId,
          type: "cli-order",
          input: { orderId: "o-2" },
          steps: ["reserve", "charge"],
          stepUpdates: [{ index: 0, attemptStarted: true }]
        })
      })
    ))
    const list = await tidings("saga", "list", "--type", "cli-order", "--status", "failed", ...target(schema))
    assert.match(
      list.out,
      new RegExp(`^ID\\s+TYPE\\s+STATUS\\s+STEP\\s+ERROR\\s+CREATED\\s+UPDATED\\n${failedId}\\s+cli-order\\s+failed`)
    )
    assert.strictEqual(
      (await tidings("saga", "list", "--type", "cli-order", "--json", ...target(schema))).json.length,
      2
    )
    const shown = await tidings("saga", "show", failedId, ...target(schema))
    assert.include(shown.out, `${failedId}  cli-order  failed`)
    assert.match(shown.out, /1\. reserve\s+compensation_failed\s+1\s+1/)
    assert.include(shown.out, "input: {\"orderId\":\"o-1\"}")
    assert.deepStrictEqual(
      (await tidings("saga", "show", failedId, "--json", ...target(schema))).json.timeline.map((e: { step: string }) =>
        e.step
      ),
      ["reserve", "charge"]
    )

    const retried = await tidings("saga", "retry", failedId, ...target(schema))
    assert.strictEqual(retried.code, 0, retried.err)
    assert.include(retried.out, `saga ${failedId} is compensating: the recovery worker compensates it again`)
    const compensated = await tidings("saga", "compensate", runningId, "--json", ...target(schema))
    assert.strictEqual(compensated.json.status, "compensating")
    const refused = await tidings("saga", "compensate", runningId, ...target(schema))
    assert.strictEqual(refused.code, 1)
    assert.include(refused.err, "only a running saga can be compensated")
  })
})

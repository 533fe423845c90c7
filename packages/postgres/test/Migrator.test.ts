import { assert, describe, it } from "@effect/vitest"
import { failureTag } from "@tidings/core/testing"
import { Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { schemaName, sqlPgLayer } from "../../../test/support/pg.ts"
import { compile, splitStatements } from "../scripts/compile-migrations.ts"
import * as Migrator from "../src/Migrator.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

const dropAfter = (schema: string) =>
  Effect.addFinalizer(() =>
    SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(Effect.ignore)
  )

const run = <A, E>(body: Effect.Effect<A, E, SqlClient.SqlClient | Scope.Scope>) =>
  Effect.scoped(body).pipe(Effect.provide(sqlPgLayer()))

describe("Migrator", () => {
  it.live("applies every migration once, records it, and is idempotent", () =>
    run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const schema = schemaName("mig")
      yield* dropAfter(schema)
      const first = yield* Migrator.run({ schema })
      assert.deepStrictEqual(first.map((m) => m.version), Migrator.all.map((m) => m.version))
      assert.deepStrictEqual(yield* Migrator.run({ schema }), [])
      const recorded = yield* sql<{ version: number }>`SELECT version FROM ${
        sql(`${schema}.tidings_migrations`)
      } ORDER BY version`
      assert.deepStrictEqual(recorded.map((r) => Number(r.version)), Migrator.all.map((m) => m.version))
      const tables = yield* sql<
        { table_name: string }
      >`SELECT table_name FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY 1`
      assert.deepStrictEqual(tables.map((t) => t.table_name), [
        "inbox",
        "log",
        "log_cursor",
        "log_member",
        "log_stream",
        "outbox",
        "projection_position",
        "saga",
        "saga_step",
        "tidings_migrations"
      ])
    })))

  it.live("concurrent migrators serialize on the advisory lock: every migration is applied once, in order", () =>
    run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const schema = schemaName("mig")
      yield* dropAfter(schema)
      const results = yield* Effect.forEach(Array.from({ length: 4 }), () => Migrator.run({ schema }), {
        concurrency: "unbounded"
      })
      const versions = results.flat().map((m) => m.version).sort((a, b) => a - b)
      assert.deepStrictEqual(versions, Migrator.all.map((m) => m.version), "each applied by exactly one migrator")
      const recorded = yield* sql<{ version: number }>`SELECT version FROM ${
        sql(`${schema}.tidings_migrations`)
      } ORDER BY applied_at, version`
      assert.deepStrictEqual(recorded.map((r) => Number(r.version)), Migrator.all.map((m) => m.version), "in order")
    })))

  it.live("invalid schema names are rejected before any SQL runs", () =>
    run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const names = [
        "",
        "Tidings",
        "1abc",
        "x\"; DROP TABLE outbox; --",
        "a-b",
        "a.b",
        "x".repeat(64),
        "x".repeat(49),
        "tidings "
      ]
      for (const schema of names) {
        assert.strictEqual(failureTag(yield* Effect.exit(Migrator.run({ schema }))), "InvalidConfig", schema)
        assert.strictEqual(failureTag(yield* Effect.exit(PgOutboxStore.make({ schema }))), "InvalidConfig", schema)
      }
      // Only these names: other test files create and drop their own schemas meanwhile (one of them
      // the default, `tidings`, so no case folding here).
      const created = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname IN ${
        sql.in(names)
      }`
      assert.strictEqual(created[0]!.n, 0)
      const exit = yield* Effect.exit(Layer.build(PgOutboxStore.layer({ schema: "Bad Name" })))
      assert.strictEqual(failureTag(exit), "InvalidConfig")
    })))
})

describe("compiled migrations", () => {
  it("src/internal/migrations.ts matches migrations/*.sql", () => {
    const generated = fs.readFileSync(path.join(import.meta.dirname, "../src/internal/migrations.ts"), "utf8")
    assert.strictEqual(generated, compile(), "run: node packages/postgres/scripts/compile-migrations.ts")
  })

  it("splits statements without breaking quotes, dollar quotes or comments", () => {
    const script = `-- a comment; with a semicolon
CREATE TABLE a (x text DEFAULT 'semi;colon', "odd;name" int); /* block; comment */
CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;
SELECT 'it''s; fine'`
    assert.deepStrictEqual(splitStatements(script), [
      `CREATE TABLE a (x text DEFAULT 'semi;colon', "odd;name" int)`,
      `CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql`,
      `SELECT 'it''s; fine'`
    ])
  })
})

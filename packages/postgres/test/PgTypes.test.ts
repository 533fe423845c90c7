import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import { builtinArrayTypes, parseArray, serializeArray } from "../src/internal/pgTypes.ts"
import { layer as pgLayer } from "../src/PgClient.ts"

const url = inject("pgUrl")
const schema = `pgtypes_${Math.random().toString(36).slice(2, 10)}`

describe("array text form", () => {
  it("parses quoting, escapes, NULL, nesting, bounds and the box delimiter", () => {
    assert.deepStrictEqual(parseArray("{}", undefined), [])
    assert.deepStrictEqual(
      parseArray("{a,\"b c\",NULL,\"NULL\",\"\",\"q\\\"x\",\"back\\\\slash\",\"{,}\"}", undefined),
      [
        "a",
        "b c",
        null,
        "NULL",
        "",
        "q\"x",
        "back\\slash",
        "{,}"
      ]
    )
    assert.deepStrictEqual(parseArray("{{1,2},{3,NULL}}", Number), [[1, 2], [3, null]])
    assert.deepStrictEqual(parseArray("[0:1]={7,8}", Number), [7, 8])
    assert.deepStrictEqual(parseArray("{(3,4),(1,2);(7,8),(5,6)}", undefined, ";"), ["(3,4),(1,2)", "(7,8),(5,6)"])
  })

  it("writes every element quoted, NULL for null and undefined, nested arrays as dimensions", () => {
    assert.strictEqual(serializeArray([], undefined), "{}")
    assert.strictEqual(
      serializeArray(["a", null, undefined, "q\"x", "b\\s"], undefined),
      "{\"a\",NULL,NULL,\"q\\\"x\",\"b\\\\s\"}"
    )
    assert.strictEqual(serializeArray([[1, 2], [3, 4]], String), "{{\"1\",\"2\"},{\"3\",\"4\"}}")
    assert.strictEqual(serializeArray("{1,2}", String), "{1,2}", "a ready-made literal is passed on")
    assert.strictEqual(serializeArray([[1, 2], { a: 1 }], JSON.stringify, ",", true), "{\"[1,2]\",\"{\\\"a\\\":1}\"}")
  })
})

const Setup = Layer.effectDiscard(Effect.gen(function*() {
  // created before the client under test starts: its array type is read at start
  const admin = yield* Layer.build(pgLayer({ url, maxConnections: 1 }))
  const sql = Context.get(admin, SqlClient.SqlClient)
  yield* sql`CREATE SCHEMA ${sql(schema)}`
  yield* sql.unsafe(`CREATE TYPE ${schema}.mood AS ENUM ('happy', 'sad', 'a,b')`)
  yield* sql.unsafe(`CREATE TABLE ${schema}.things (
    id serial PRIMARY KEY, tags text[], ids uuid[], nums int[], bigs bigint[], flags bool[], ats timestamptz[],
    days date[], docs jsonb[], doc jsonb, moods ${schema}.mood[], grid int[][], blobs bytea[]
  )`)
  yield* Effect.addFinalizer(() => Effect.ignore(sql`DROP SCHEMA ${sql(schema)} CASCADE`))
}))

layer(Setup, { timeout: 600_000 })("arrays on PostgreSQL", (it) => {
  const client = () =>
    Layer.build(pgLayer({ url, maxConnections: 2 })).pipe(Effect.map((ctx) => Context.get(ctx, SqlClient.SqlClient)))

  it.effect("parameters and results of every common array type round-trip", () =>
    Effect.scoped(Effect.gen(function*() {
      const sql = yield* client()
      const ids = [crypto.randomUUID(), crypto.randomUUID()]
      const ats = [new Date("2030-01-02T03:04:05.678Z"), new Date("1999-12-31T23:59:59.000Z")]
      const row = {
        tags: ["plain", "with space", "q\"uote", "back\\slash", "comma,brace{}", "", "NULL", null],
        ids,
        nums: [1, -2, null, 2147483647],
        bigs: [9007199254740993n, -1n],
        flags: [true, false, null],
        ats,
        days: ["2030-01-02"],
        docs: [{ a: 1, s: "x\"y" }, [1, 2], null],
        doc: [1, 2, { nested: true }],
        moods: ["happy", "a,b"],
        grid: [[1, 2], [3, 4]],
        blobs: [new Uint8Array([0, 1, 255])]
      }
      const [inserted] = yield* sql<{ id: number }>`INSERT INTO ${sql(`${schema}.things`)} ${
        sql.insert(row)
      } RETURNING id`
      const [back] = yield* sql<Record<string, any>>`SELECT * FROM ${sql(`${schema}.things`)} WHERE id = ${
        inserted!.id
      }`
      assert.deepStrictEqual(back!.tags, row.tags)
      assert.deepStrictEqual(back!.ids, ids)
      assert.deepStrictEqual(back!.nums, row.nums)
      assert.deepStrictEqual(back!.bigs, ["9007199254740993", "-1"], "int8 elements are strings, as int8 columns")
      assert.deepStrictEqual(back!.flags, row.flags)
      assert.deepStrictEqual(back!.ats.map((d: Date) => d.getTime()), ats.map((d) => d.getTime()))
      assert.instanceOf(back!.days[0], Date)
      assert.deepStrictEqual(back!.docs, row.docs)
      assert.deepStrictEqual(back!.doc, row.doc, "a JS array for a jsonb column is JSON")
      assert.deepStrictEqual(back!.moods, row.moods, "an enum array of the database's own type")
      assert.deepStrictEqual(back!.grid, row.grid)
      assert.deepStrictEqual([...back!.blobs[0]], [0, 1, 255])
      // arrays as `= ANY(...)` parameters: the server infers uuid[] and int[]
      const found = yield* sql<{ id: number }>`SELECT id FROM ${
        sql(`${schema}.things`)
      } WHERE ${ids[1]!}::uuid = ANY(ids) AND id = ANY(${[inserted!.id, -1]})`
      assert.deepStrictEqual(found.map((r) => r.id), [inserted!.id])
      const byUuid = yield* sql`SELECT 1 FROM ${sql(`${schema}.things`)} WHERE ids[1] = ANY(${ids})`
      assert.strictEqual(byUuid.length, 1)
    })))

  it.effect("the built-in array types match the server's catalog", () =>
    Effect.scoped(Effect.gen(function*() {
      const sql = yield* client()
      const rows = yield* sql<{ element: number; array: number; delimiter: string }>`
        SELECT oid::int AS element, typarray::int AS array, typdelim::text AS delimiter FROM pg_catalog.pg_type
        WHERE typarray <> 0 AND oid < 10000 AND typtype IN ('b', 'r', 'm', 'p')
          AND typnamespace = 'pg_catalog'::regnamespace`
      const server = new Map(rows.map((r) => [r.element, r]))
      for (const type of builtinArrayTypes) {
        const known = server.get(type.element)
        assert.isDefined(known, `type ${type.element} exists`)
        assert.strictEqual(type.array, known!.array, `array type of ${type.element}`)
        assert.strictEqual(type.delimiter, known!.delimiter, `delimiter of ${type.element}`)
      }
      const listed = new Set(builtinArrayTypes.map((t) => t.element))
      assert.deepStrictEqual(rows.filter((r) => !listed.has(r.element)), [], "every built-in type is listed")
    })))

  it.effect("a statement that fails after sending rows leaves the next result intact", () =>
    Effect.scoped(Effect.gen(function*() {
      // one connection: the next query runs where the failed one did
      const ctx = yield* Layer.build(pgLayer({ url, maxConnections: 1 }))
      const sql = Context.get(ctx, SqlClient.SqlClient)
      const failed = yield* Effect.exit(sql`SELECT 1 / (n - 500) AS x FROM generate_series(1, 1000) AS n`)
      assert.isTrue(failed._tag === "Failure")
      const rows = yield* sql<{ one: number }>`SELECT 1 AS one`
      assert.strictEqual(rows.length, 1)
      assert.deepStrictEqual([...rows], [{ one: 1 }])
      const values = yield* sql<{ n: number }>`SELECT n FROM generate_series(1, 3) AS n`.values
      assert.deepStrictEqual(values, [[1], [2], [3]])
    })))
})

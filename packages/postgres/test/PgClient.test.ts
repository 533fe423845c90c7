import { assert, describe, expect, it, layer } from "@effect/vitest"
import {
  Cause,
  Config,
  ConfigProvider,
  Context,
  Deferred,
  Effect,
  Exit,
  Fiber,
  Layer,
  Redacted,
  Ref,
  Stream
} from "effect"
import { SqlClient, SqlError } from "effect/sql"
import * as net from "node:net"
import { inject } from "vitest"
import { scrubString, toSqlError } from "../src/internal/pgError.ts"
import { isRetryableSqlError, jsonb, layer as pgLayer, layerConfig, PgClient, PgConfigError } from "../src/PgClient.ts"

const url = inject("pgUrl")
// Every table of this file lives in its own schema, dropped when the shared layer is released (afterAll).
const schema = `pgclient_${Math.random().toString(36).slice(2, 10)}`
const table = (name: string) => `${schema}.${name}`

/** A port on 127.0.0.1 with nothing listening on it (a moment ago). */
const freePort = () =>
  Effect.callback<number>((resume) => {
    const server = net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 1)))
    })
  })

const withPassword = (password: string) => {
  const u = new URL(url)
  u.password = password
  return u.toString()
}

/** The first typed failure of an exit, or a test failure. */
const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const error = Cause.findErrorOption(exit.cause)
  if (error._tag === "None") throw new Error(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return error.value
}

const Schema = Layer.effectDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Effect.acquireRelease(
      sql`CREATE SCHEMA ${sql(schema)}`,
      () => Effect.ignore(sql`DROP SCHEMA ${sql(schema)} CASCADE`)
    )
    yield* sql`CREATE TABLE ${sql(table("items"))} (id serial PRIMARY KEY, name text NOT NULL UNIQUE)`
    yield* sql`CREATE TABLE ${sql(table("docs"))} (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      doc jsonb NOT NULL,
      at timestamptz NOT NULL,
      big bigint NOT NULL,
      tags int[] NOT NULL DEFAULT '{}'
    )`
  })
)

const Live = Schema.pipe(Layer.provideMerge(pgLayer({ url: Redacted.make(url), maxConnections: 5 })))

const names = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ name: string }>`SELECT name FROM ${sql(table("items"))} ORDER BY name`
  return rows.map((row) => row.name)
})
const insert = (name: string) =>
  SqlClient.SqlClient.use((sql) => sql`INSERT INTO ${sql(table("items"))} (name) VALUES (${name})`)
const clear = SqlClient.SqlClient.use((sql) => sql`TRUNCATE ${sql(table("items"))}`)

class Boom extends Error {}

/** Whether a forked fiber is still running. */
const isRunning = <A, E>(fiber: Fiber.Fiber<A, E>) => fiber.pollUnsafe() === undefined

// excludeTestServices: the real clock, as the tests sleep and time the driver
layer(Live, { timeout: 30_000, excludeTestServices: true })("PgClient", (it) => {
  it.effect("runs queries with parameters (scalars, arrays, dates)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ sum: number; greeting: string; hit: boolean; year: number }>`
        SELECT ${1}::int + ${2}::int AS sum,
               ${"hello"} || ' world' AS greeting,
               ${3} = ANY(${[1, 2, 3]}::int[]) AS hit,
               extract(year FROM ${new Date("2031-05-06T07:08:09Z")}::timestamptz AT TIME ZONE 'UTC')::int AS year`
      assert.deepStrictEqual({ ...row }, { sum: 3, greeting: "hello world", hit: true, year: 2031 })
      const none = yield* sql`SELECT 1 FROM ${sql(table("items"))} WHERE name IN ${sql.in([])}`
      assert.strictEqual(none.length, 0)
    }))

  it.effect("commits a transaction", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      const result = yield* sql.withTransaction(Effect.andThen(insert("a"), insert("b")).pipe(Effect.as("done")))
      assert.strictEqual(result, "done")
      assert.deepStrictEqual(yield* names, ["a", "b"])
    }))

  it.effect("rolls back on failure and on defect", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      const failed = yield* Effect.exit(
        sql.withTransaction(Effect.andThen(insert("failed"), Effect.fail("nope" as const)))
      )
      assert.strictEqual(failureOf(failed), "nope")
      const died = yield* Effect.exit(sql.withTransaction(Effect.andThen(insert("died"), Effect.die(new Boom("bug")))))
      assert.isTrue(Exit.isFailure(died) && Cause.hasDies(died.cause))
      assert.deepStrictEqual(yield* names, [])
    }))

  it.effect("a failed nested transaction rolls back to its savepoint and keeps the outer work", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* insert("outer-1")
        const inner = yield* Effect.exit(
          sql.withTransaction(Effect.andThen(insert("inner"), Effect.fail("inner failed")))
        )
        assert.isTrue(Exit.isFailure(inner))
        yield* insert("outer-2")
        // a successful nested transaction is kept too
        yield* sql.withTransaction(insert("inner-ok"))
      }))
      assert.deepStrictEqual(yield* names, ["inner-ok", "outer-1", "outer-2"])
    }))

  it.effect("interrupting a transaction rolls it back", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      const inserted = yield* Deferred.make<void>()
      const fiber = yield* sql.withTransaction(
        insert("interrupted").pipe(Effect.andThen(Deferred.succeed(inserted, undefined)), Effect.andThen(Effect.never))
      ).pipe(Effect.forkChild)
      yield* Deferred.await(inserted)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(yield* names, [])
      // the reserved connection went back to the pool in a usable state
      yield* sql.withTransaction(insert("after"))
      assert.deepStrictEqual(yield* names, ["after"])
    }))

  it.effect("a transaction runs every statement on one connection, in one transaction", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [a, b] = yield* sql.withTransaction(Effect.all([
        sql<{ pid: number; ts: Date }>`SELECT pg_backend_pid() AS pid, now() AS ts`,
        sql<{ pid: number; ts: Date }>`SELECT pg_backend_pid() AS pid, now() AS ts`
      ]))
      assert.strictEqual(a![0]!.pid, b![0]!.pid)
      // now() is the transaction's start time: equal only inside one transaction
      assert.strictEqual(a![0]!.ts.getTime(), b![0]!.ts.getTime())
      const [{ level }] =
        (yield* sql.withTransaction(sql<{ level: string }>`SELECT current_setting('transaction_isolation') AS level`)
          .pipe(
            Effect.provideService(SqlClient.BeginTransaction, "BEGIN ISOLATION LEVEL SERIALIZABLE")
          )) as [{ level: string }]
      assert.strictEqual(level, "serializable")
    }))

  it.effect("interrupting a query cancels it on the server", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const marker = `cancel_${schema}`
      const fiber = yield* sql.unsafe(`SELECT pg_sleep(30) /* ${marker} */`).pipe(Effect.forkChild)
      const running = (label: string) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE state = 'active' AND query LIKE ${`%${label}%`} AND pid <> pg_backend_pid()`.pipe(
          Effect.map((rows) => rows[0]!.n)
        )
      // the query runs on the server before the interrupt
      while ((yield* running(marker)) === 0) yield* Effect.sleep("20 millis")
      assert.strictEqual(yield* running(marker), 1)
      const started = Date.now()
      yield* Fiber.interrupt(fiber)
      assert.isBelow(Date.now() - started, 2_000)
      // the server may take a moment to process the cancel request
      // (no cap on that moment: a loaded machine takes longer; a cancel that never lands hangs the test)
      while ((yield* running(marker)) > 0) yield* Effect.sleep("50 millis")
    }))

  it.effect("listen receives notifications; notify inside a transaction is sent on commit only", () =>
    Effect.gen(function*() {
      const pg = yield* PgClient
      const sql = yield* SqlClient.SqlClient
      const channel = `ch_${schema}`
      const received = yield* pg.listen(channel).pipe(Stream.take(2), Stream.runCollect, Effect.forkChild)
      // LISTEN is set up asynchronously: keep notifying until the listener has heard something
      yield* Effect.gen(function*() {
        yield* Effect.exit(sql.withTransaction(Effect.andThen(pg.notify(channel, "rolled-back"), Effect.fail("abort"))))
        yield* pg.notify(channel, "hello")
        yield* Effect.sleep("50 millis")
      }).pipe(Effect.repeat({ while: () => isRunning(received), times: 100 }))
      const payloads = yield* Fiber.join(received).pipe(Effect.timeout("5 seconds"))
      assert.deepStrictEqual([...payloads], ["hello", "hello"])
    }))

  it.effect("afterCommit runs only after a commit", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* insert("x")
        yield* sql.afterCommit(
          // runs outside the transaction, on another connection, and sees the committed row
          Effect.flatMap(Effect.orDie(names), (seen) => Ref.update(log, (l) => [...l, `committed:${seen.join(",")}`]))
        )
        assert.deepStrictEqual(yield* Ref.get(log), [], "not before COMMIT")
      }))
      assert.deepStrictEqual(yield* Ref.get(log), ["committed:x"])
      yield* Effect.exit(
        sql.withTransaction(
          Effect.andThen(sql.afterCommit(Ref.update(log, (l) => [...l, "rolled back"])), Effect.fail("no"))
        )
      )
      assert.deepStrictEqual(yield* Ref.get(log), ["committed:x"])
    }))

  it.effect("jsonb, timestamptz, bigint, uuid and arrays round-trip", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const doc = { id: 1, nested: { list: [1, "two", null], ok: true }, text: "quote \" and unicode é" }
      const at = new Date("2030-01-02T03:04:05.678Z")
      const big = 9007199254740993n // 2^53 + 1: not representable as a JS number
      yield* sql`INSERT INTO ${sql(table("docs"))} (doc, at, big, tags) VALUES (${
        JSON.stringify(doc)
      }::jsonb, ${at}, ${big}, ${[1, 2]})`
      yield* sql`INSERT INTO ${sql(table("docs"))} ${sql.insert({ doc, at, big: "42", tags: [] })}`
      const [json] = yield* sql<{ doc: unknown; text: unknown }>`SELECT ${jsonb(doc)} AS doc, ${
        JSON.stringify("text")
      }::jsonb AS text`
      assert.deepStrictEqual(json!.doc, doc)
      assert.strictEqual(json!.text, "text")
      const rows = yield* sql<{ id: string; doc: unknown; at: Date; big: string; tags: Array<number>; kind: string }>`
        SELECT id, doc, at, big, tags, jsonb_typeof(doc) AS kind FROM ${sql(table("docs"))} ORDER BY big DESC`
      assert.strictEqual(rows.length, 2)
      for (const row of rows) {
        assert.strictEqual(row.kind, "object", "stored as a JSON object, not a JSON string")
        assert.deepStrictEqual(row.doc, doc)
        assert.instanceOf(row.at, Date)
        assert.strictEqual(row.at.getTime(), at.getTime())
        assert.match(row.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
      }
      assert.strictEqual(rows[0]!.big, "9007199254740993")
      assert.strictEqual(rows[1]!.big, "42")
      assert.deepStrictEqual(rows[0]!.tags, [1, 2])
    }))

  it.effect("streams rows through a cursor", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const stream = sql<{ n: number }>`SELECT n FROM generate_series(1, 1000) AS n`.stream
      const total = yield* Stream.runFold(stream, () => 0, (acc, row) => acc + row.n)
      assert.strictEqual(total, 500_500)
      const firstTwo = yield* Stream.runCollect(Stream.take(stream, 2))
      assert.deepStrictEqual(firstTwo.map((row) => row.n), [1, 2])
    }))

  it.effect("a stream left early frees its connection without cancelling the next query", () =>
    Effect.gen(function*() {
      // one connection, so whatever runs next runs on the backend the stream used
      const context = yield* Layer.build(pgLayer({ url, maxConnections: 1 }))
      const sql = Context.get(context, SqlClient.SqlClient)
      const taken = yield* Stream.runCollect(
        Stream.take(sql<{ n: number }>`SELECT n FROM generate_series(1, 10000) AS n`.stream, 3)
      )
      assert.strictEqual(taken.length, 3)
      for (let i = 0; i < 4; i++) yield* sql`SELECT pg_sleep(0.05)`
      // left while waiting for rows: the query is cancelled and the connection comes back quickly
      const started = Date.now()
      const slow = yield* Effect.exit(
        Stream.runCollect(sql`SELECT pg_sleep(30) AS slept`.stream).pipe(Effect.timeout("200 millis"))
      )
      assert.isTrue(Exit.isFailure(slow))
      assert.deepStrictEqual(yield* sql`SELECT 1 AS one`, [{ one: 1 }])
      assert.isBelow(Date.now() - started, 3_000)
    }))

  it.effect("wraps server errors in SqlError with the SQLSTATE kept on the cause", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      yield* insert("dup")
      const duplicate = failureOf(yield* Effect.exit(insert("dup")))
      assert.strictEqual(duplicate.reason._tag, "UniqueViolation")
      assert.strictEqual((duplicate.reason.cause as { code?: string }).code, "23505")
      assert.isFalse(isRetryableSqlError(duplicate))
      const raise = (code: string) =>
        Effect.exit(sql.unsafe(`DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '${code}'; END $$`)).pipe(
          Effect.map(failureOf)
        )
      for (const code of ["40001", "40P01", "57P01", "08006"]) {
        const error = yield* raise(code)
        assert.strictEqual((error.reason.cause as { code?: string }).code, code)
        assert.isTrue(isRetryableSqlError(error), code)
      }
      assert.isFalse(isRetryableSqlError(yield* raise("22012")))
      const syntax = failureOf(yield* Effect.exit(sql`SELEC 1`))
      assert.strictEqual(syntax.reason._tag, "SqlSyntaxError")
      const reset = new SqlError.SqlError({
        reason: new SqlError.UnknownError({
          cause: Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })
        })
      })
      assert.isTrue(isRetryableSqlError(reset))
    }))

  it.effect("removes credentials from errors, and only credentials (password `postgres`)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // A real failure: the stack goes through node_modules/.pnpm/postgres@x/node_modules/postgres/...
      const error = failureOf(yield* Effect.exit(sql`SELECT 'postgres'::int`))
      const stack = (error.reason.cause as Error).stack ?? ""
      assert.notInclude(stack, "<redacted>")
      assert.include(error.message, "\"postgres\"", "data echoed by the server is not a credential")
      // Credentials wherever a driver or runtime may echo them: URL userinfo, password fields.
      const echoed = Object.assign(
        new Error(
          "connect to postgres://postgres:postgres@127.0.0.1:5432/postgres failed " +
            "(host=127.0.0.1 user=postgres password=postgres dbname=postgres) " +
            "{ user: 'postgres', pass: 'postgres', password: \"postgres\" } {\"password\":\"postgres\",\"database\":\"postgres\"}"
        ),
        { code: "ECONNREFUSED" }
      )
      const wrapped = toSqlError(echoed, "connect")
      for (
        const text of [
          wrapped.message,
          (wrapped.reason.cause as Error).message,
          (wrapped.reason.cause as Error).stack ?? ""
        ]
      ) {
        assert.include(text, "postgres://postgres:<redacted>@127.0.0.1:5432/postgres")
        assert.include(text, "password=<redacted> dbname=postgres")
        assert.include(text, "pass: <redacted>, password: <redacted> }")
        assert.include(text, "{\"password\":<redacted>,\"database\":\"postgres\"}")
        assert.notMatch(text, /pass(word)?\W+postgres/)
      }
      assert.strictEqual(
        scrubString("/srv/node_modules/.pnpm/postgres@3.4.9/node_modules/postgres/src/index.js"),
        "/srv/node_modules/.pnpm/postgres@3.4.9/node_modules/postgres/src/index.js"
      )
      assert.strictEqual(scrubString("bypass: 1, passes: 2"), "bypass: 1, passes: 2")
    }))

  it.effect("a COMMIT that PostgreSQL turns into ROLLBACK fails the transaction", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* clear
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* insert("lost")
        // the failure is swallowed, but the transaction is aborted on the server
        yield* Effect.ignore(sql`SELECT 1/0`)
      })))
      assert.match(failureOf(exit).message, /COMMIT rolled back/)
      assert.deepStrictEqual(yield* names, [])
    }))

  it.effect("a transaction whose connection is killed fails with a retryable error and the pool recovers", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const exit = yield* Effect.exit(
        sql.withTransaction(Effect.gen(function*() {
          const [{ pid }] = (yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`) as [{ pid: number }]
          // terminate our own backend from another connection, then wait for the socket to close
          const pg = yield* PgClient
          yield* Effect.promise(() => pg.sql`SELECT pg_terminate_backend(${pid})`)
          yield* Effect.sleep("300 millis")
          yield* sql`SELECT 1`
        })).pipe(Effect.timeout("10 seconds"))
      )
      const error = failureOf(exit)
      assert.instanceOf(error, SqlError.SqlError)
      assert.isTrue(isRetryableSqlError(error), error.message)
      const rows = yield* Effect.forEach([1, 2, 3, 4, 5, 6], () => sql`SELECT 1 AS one`, { concurrency: 6 })
      assert.strictEqual(rows.length, 6)
      assert.deepStrictEqual(yield* sql.withTransaction(sql`SELECT 2 AS two`), [{ two: 2 }])
    }))
})

describe("PgClient layer construction", () => {
  const build = <A, E>(layer: Layer.Layer<A, E>) => Effect.exit(Effect.scoped(Layer.build(layer)))

  it.effect("invalid config fails with PgConfigError and no credentials", () =>
    Effect.gen(function*() {
      for (
        const config of [
          { url: "mysql://user:Hunter2Secret@localhost/db" },
          { url: "postgres://user:Hunter2Secret@[broken/db" },
          { url: Redacted.make(url), maxConnections: 0 },
          { url: Redacted.make(url), connectTimeout: "soon" as never }
        ]
      ) {
        const error = failureOf(yield* build(pgLayer(config)))
        assert.instanceOf(error, PgConfigError)
        assert.strictEqual(error._tag, "PgConfigError")
        assert.notInclude(error.message, "Hunter2Secret")
      }
    }))

  it.live("an unreachable server (startupTimeout 0: one attempt) fails with a retryable SqlError that does not leak the password", () =>
    Effect.gen(function*() {
      const port = yield* freePort()
      const started = Date.now()
      const exit = yield* build(
        pgLayer({
          url: Redacted.make(`postgres://tidings:Sup3r-S3cret-Pw@127.0.0.1:${port}/tidings`),
          startupTimeout: 0
        })
      )
      const error = failureOf(exit)
      assert.instanceOf(error, SqlError.SqlError)
      assert.strictEqual((error as SqlError.SqlError).reason._tag, "ConnectionError")
      assert.isTrue(isRetryableSqlError(error as SqlError.SqlError))
      assert.strictEqual(((error as SqlError.SqlError).reason.cause as { code?: string }).code, "ECONNREFUSED")
      assert.isBelow(Date.now() - started, 5_000)
      for (
        const text of [error.message, String(error), Cause.pretty(Exit.isFailure(exit) ? exit.cause : Cause.empty)]
      ) {
        assert.notInclude(text, "Sup3r-S3cret-Pw")
      }
    }))

  it.effect("a wrong password fails with an AuthenticationError that does not contain it", () =>
    Effect.gen(function*() {
      const exit = yield* build(pgLayer({ url: withPassword("Wr0ng-Pa55word-x") }))
      const error = failureOf(exit) as SqlError.SqlError
      assert.strictEqual(error.reason._tag, "AuthenticationError")
      assert.strictEqual((error.reason.cause as { code?: string }).code, "28P01")
      assert.isFalse(isRetryableSqlError(error))
      for (
        const text of [
          error.message,
          String(error.reason.cause),
          Cause.pretty(Exit.isFailure(exit) ? exit.cause : Cause.empty)
        ]
      ) {
        assert.notInclude(text, "Wr0ng-Pa55word-x")
      }
    }))

  it.effect("layerConfig reads the settings from Config", () =>
    Effect.gen(function*() {
      const live = layerConfig({ url: Config.Redacted("TIDINGS_PG_URL"), applicationName: Config.String("APP") }).pipe(
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ TIDINGS_PG_URL: url, APP: "pgclient-test" })))
      )
      const rows = yield* Effect.scoped(
        Effect.flatMap(Layer.build(live), (context) =>
          SqlClient.SqlClient.use((sql) =>
            sql<{ name: string }>`SELECT current_setting('application_name') AS name`
          ).pipe(
            Effect.provideContext(context)
          ))
      )
      assert.deepStrictEqual(
        rows.map((row) =>
          row.name
        ),
        ["pgclient-test"]
      )
      const missing = failureOf(
        yield* build(
          layerConfig({ url: Config.Redacted("NOT_SET_ANYWHERE") }).pipe(
            Layer.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({})))
          )
        )
      )
      expect(missing._tag).toBe("ConfigError")
    }))
})

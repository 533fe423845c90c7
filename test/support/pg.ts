/**
 * Postgres helpers for tests: the server URL provided by the global setup, SqlClient layers for our
 * driver and for @effect/sql-pg, and a fresh migrated schema per test or file.
 */
import * as SqlPg from "@effect/sql-pg/PgClient"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"

/**
 * The URL of the test server, naming this test file as the connections' `application_name`: the
 * leak check (leaks.ts) looks for connections still open under that name after the file, also
 * those of child processes the file hands the URL to.
 */
export const pgUrl = (): string => {
  const url = inject("pgUrl") ?? process.env["TIDINGS_TEST_PG_URL"]
  if (url === undefined) {
    throw new Error("no test Postgres: run through vitest (global setup) or set TIDINGS_TEST_PG_URL")
  }
  const name = (globalThis as Record<symbol, unknown>)[Symbol.for("tidings/test/applicationName")]
  if (typeof name !== "string") return url
  const tagged = new URL(url)
  tagged.searchParams.set("application_name", name)
  return tagged.toString()
}

/** A SqlClient from @effect/sql-pg, to show the stores work with another driver. */
export const sqlPgLayer = (url: string = pgUrl()): Layer.Layer<SqlClient.SqlClient, unknown> =>
  SqlPg.layer({ url: Redacted.make(url), maxConnections: 10 })

let counter = 0
/** A unique schema name for this process. */
export const schemaName = (prefix = "t"): string =>
  `${prefix}_${process.pid}_${Date.now().toString(36)}_${(counter++).toString(36)}_${
    Math.random().toString(36).slice(2, 6)
  }`

/** Creates and migrates a fresh schema, dropped when the scope closes. */
export const freshSchema = (prefix = "t") =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const schema = schemaName(prefix)
      yield* Migrator.run({ schema })
      return schema
    }),
    (schema) => SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(Effect.ignore)
  )

/** Our own driver (`@tidings/postgres` PgClient) as a SqlClient. */
export const pgClientLayer = (url: string = pgUrl(), maxConnections = 10) => PgClient.layer({ url, maxConnections })

/** A fresh store on a fresh schema, over the given SqlClient layer, living as long as the scope. */
export const makePgStore = (
  client: Layer.Layer<SqlClient.SqlClient, unknown>,
  options: Omit<PgOutboxStore.Options, "schema"> = {}
) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(client)
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema()
      return yield* PgOutboxStore.make({ schema, ...options })
    }).pipe(Effect.provideContext(context))
  })

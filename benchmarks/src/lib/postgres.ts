/**
 * The benchmark's PostgreSQL: one durable server per benchmark process (embedded PostgreSQL, or the
 * server at `TIDINGS_PG_URL`), a connection pool per run, and a fresh migrated schema per run.
 * @module
 */
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgClient from "@tidings/postgres/PgClient"
import { Context, Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { startPostgres } from "../../../test/support/embeddedPostgres.ts"
import { log } from "./report.ts"

/** What the benchmark ran against, for the report. */
export interface ServerInfo {
  readonly url: string
  readonly external: boolean
  readonly version: string
  readonly fsync: string
  readonly synchronousCommit: string
}

/**
 * Starts the server with production durability (fsync and synchronous commit on): an outbox is
 * commit-bound, so numbers measured with fsync off would flatter everything. Stopped with the scope.
 */
export const server: Effect.Effect<ServerInfo, never, Scope.Scope> = Effect.gen(function*() {
  const started = performance.now()
  const pg = yield* Effect.acquireRelease(
    Effect.promise(() => startPostgres({ durable: true })),
    (pg) => Effect.promise(() => pg.stop())
  )
  const info = yield* Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(pool(pg.url, 1))
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ version: string; fsync: string; sc: string }>`SELECT
        current_setting('server_version') AS version, current_setting('fsync') AS fsync,
        current_setting('synchronous_commit') AS sc`
      return row!
    }).pipe(Effect.provideContext(context))
  })).pipe(Effect.orDie)
  log(
    `postgres ${info.version} (${
      pg.external ? "TIDINGS_PG_URL" : "embedded"
    }; fsync=${info.fsync}, synchronous_commit=${info.sc}), ready in ${
      ((performance.now() - started) / 1000).toFixed(1)
    } s`
  )
  return { url: pg.url, external: pg.external, version: info.version, fsync: info.fsync, synchronousCommit: info.sc }
})

/** A pool of `size` connections: `SqlClient` for Tidings plus `PgClient` for raw postgres.js access. */
export const pool = (url: string, size: number) =>
  PgClient.layer({ url, maxConnections: size, applicationName: "tidings-bench" })

/** A run's pool, built now and closed with the scope, with all its connections already open. */
export const openPool = (url: string, size: number) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(pool(url, size))
    // postgres.js opens connections lazily; open them all now so that connecting is not measured.
    const { sql } = Context.get(context, PgClient.PgClient)
    yield* Effect.promise(() => Promise.all(Array.from({ length: size }, () => sql`SELECT pg_sleep(0.02)`)))
    return context
  }).pipe(Effect.orDie)

let schemas = 0

/** A fresh schema with the Tidings migrations applied, dropped when the scope closes. */
export const freshSchema = (prefix: string): Effect.Effect<string, never, SqlClient.SqlClient | Scope.Scope> =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const schema = `bench_${prefix}_${process.pid}_${(schemas++).toString(36)}`
      yield* Migrator.run({ schema })
      return schema
    }).pipe(Effect.orDie),
    (schema) => SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(Effect.ignore)
  )

/**
 * Starts a new checkpoint cycle before seeding. Rows inserted after it live on pages whose first
 * image is already in the WAL, so claiming them soon after (as a relay does) writes no full-page
 * images, as in production; a checkpoint between seeding and measuring would make every first
 * UPDATE of a page log a full 8 kB image. It also makes a forced checkpoint during the measured
 * run unlikely. Needs a privileged role: skipped on an external server without one.
 */
export const checkpoint: Effect.Effect<void, never, SqlClient.SqlClient> = SqlClient.SqlClient.use((sql) =>
  sql`CHECKPOINT`
).pipe(
  Effect.ignore
)

/** Refreshes planner statistics after seeding (autovacuum would have, on a table in steady use). */
export const analyze = (schema: string): Effect.Effect<void, never, SqlClient.SqlClient> =>
  SqlClient.SqlClient.use((sql) => sql`ANALYZE ${sql(`${schema}.outbox`)}`).pipe(Effect.orDie, Effect.asVoid)

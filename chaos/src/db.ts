/**
 * The harness's own database access (plain postgres.js, not the code under test): schema setup,
 * the drain's polling and the final checks. Its connections are named `chaos-harness`, so the
 * backend-termination fault (which targets the workers' `chaos-worker:<name>`) leaves them alone, and its type fetch
 * is off. Queries are retried while the server restarts.
 * @module
 */
import { Migrator, PgClient } from "@tidings/postgres"
import { Effect } from "effect"
import postgres from "postgres"
import { sleep } from "./abort.ts"
import { log } from "./log.ts"
import * as Tables from "./tables.ts"

export type Sql = postgres.Sql

/** A small pool for the harness. */
export const connect = (url: string): Sql =>
  postgres(url, {
    max: 3,
    fetch_types: false,
    onnotice: () => undefined,
    connection: { application_name: "chaos-harness" },
    connect_timeout: 10
  })

/** Runs `query`, retrying every 250 ms while it fails (the server restarting), at most `patienceMs`. */
export const retrying = async <A>(
  what: string,
  query: () => Promise<A>,
  signal: AbortSignal,
  patienceMs = 120_000
): Promise<A> => {
  const deadline = Date.now() + patienceMs
  let logged = 0
  for (;;) {
    try {
      return await query()
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`${what} kept failing for ${patienceMs / 1000} s: ${String(error)}`)
      if (Date.now() - logged > 5000) {
        logged = Date.now()
        log(`${what} failed (retrying): ${error instanceof Error ? error.message : String(error)}`)
      }
      await sleep(250, signal)
    }
  }
}

/** The Tidings migrations (through the library's own Migrator) and the business tables. */
export const setUp = async (url: string, sql: Sql): Promise<void> => {
  await Effect.runPromise(
    Migrator.run({ schema: Tables.tidingsSchema }).pipe(
      Effect.provide(PgClient.layer({ url, maxConnections: 1, applicationName: "chaos-harness" }))
    )
  )
  for (const statement of Tables.ddl) await sql.unsafe(statement)
}

/** Every worker's backends (or one worker's, by name), terminated; resolves with how many. */
export const terminateBackends = async (sql: Sql, worker: string | undefined): Promise<number> => {
  // Two statements: in one, the planner may evaluate pg_terminate_backend before the name filter.
  // (The pids travel as text: without the type fetch, postgres.js does not serialize arrays.)
  const rows = worker === undefined
    ? await sql<
      Array<{ pid: number }>
    >`SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, ${Tables.workerApplicationPrefix})`
    : await sql<Array<{ pid: number }>>`SELECT pid FROM pg_stat_activity WHERE application_name = ${
      Tables.workerApplicationPrefix + worker
    }`
  if (rows.length === 0) return 0
  const [done] = await sql<Array<{ n: number }>>`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n
    FROM unnest(string_to_array(${rows.map((r) => r.pid).join(",")}, ',')::int[]) AS pid`
  return done?.n ?? 0
}

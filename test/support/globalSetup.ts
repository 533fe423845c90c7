/**
 * Vitest global setup: one PostgreSQL server for the whole run (embedded, or `TIDINGS_PG_URL`),
 * stopped at the end even when tests fail. Test files isolate themselves with a schema each.
 */
import type { TestProject } from "vitest/node"
import { startPostgres } from "./embeddedPostgres.ts"

declare module "vitest" {
  export interface ProvidedContext {
    pgUrl: string
  }
}

export default async function setup(project: TestProject) {
  const pg = await startPostgres()
  project.provide("pgUrl", pg.url)
  // Child processes spawned by tests (multi-process relays) read the URL from the environment.
  process.env["TIDINGS_TEST_PG_URL"] = pg.url
  return async () => {
    await pg.stop()
  }
}

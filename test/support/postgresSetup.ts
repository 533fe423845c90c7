/**
 * Vitest global setup of the projects whose files need PostgreSQL: one server (embedded, or
 * `TIDINGS_PG_URL`) for the whole run, shared by those projects (see servers.ts). Test files isolate
 * themselves with a schema each.
 */
import type { TestProject } from "vitest/node"
import { useServer } from "./servers.ts"

export default (project: TestProject): Promise<() => Promise<void>> => useServer("postgres", project)

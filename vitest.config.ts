import * as path from "node:path"
import { defineConfig } from "vitest/config"
import { projectFiles } from "./test/support/projects.ts"

declare const Deno: unknown

/**
 * Tests that drive every runtime themselves (they start Node, Deno and Bun as child processes, or
 * check the repository as a whole): they run once per `npm test`, in its Node pass, not again in
 * its Deno pass.
 */
export const onceOnly = [
  "packages/core/test/Main.test.ts",
  "test/pack.test.ts",
  "test/jsr.test.ts",
  "test/docs.test.ts",
  "test/postgresMinimum.test.ts",
  "test/format.test.ts",
  "test/structure.test.ts"
]

const root = import.meta.dirname
const setup = (file: string) => path.join(root, "test/support", file)

/**
 * One project per package (and `tidings` for the repository-wide tests in test/), split by the
 * servers its files need (test/support/projects.ts): `core` starts no server, `postgres+pg` starts
 * PostgreSQL, `hono+pg+amqp` PostgreSQL and RabbitMQ. A server is started once, by the first project
 * that needs it, and only when a file that needs it runs (`vitest run packages/core/test/Saga.test.ts`
 * starts none).
 */
export default defineConfig({
  test: {
    exclude: ["**/node_modules/**", ...(typeof Deno !== "undefined" ? onceOnly : [])],
    setupFiles: [setup("setup.ts"), setup("leaks.ts")],
    // A backstop for a test that hangs, not a measure of speed: tests wait for states, and give up
    // when the thing they wait for stops making progress (test/support/progress.ts), so a loaded
    // machine makes them slower, never failing.
    testTimeout: 600_000,
    hookTimeout: 600_000,
    // Files run in parallel on a 2-core machine; each file uses its own Postgres schema.
    maxWorkers: 2,
    fileParallelism: true,
    projects: projectFiles(root).map((project) => ({
      extends: true,
      test: {
        name: project.name,
        include: [...project.files],
        globalSetup: project.servers.map((server) => setup(`${server}Setup.ts`))
      }
    }))
  }
})

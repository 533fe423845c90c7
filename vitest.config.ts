import * as path from "node:path"
import { defineConfig } from "vitest/config"

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
  "test/postgresMinimum.test.ts"
]

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "test/**/*.test.ts"],
    exclude: ["**/node_modules/**", ...(typeof Deno !== "undefined" ? onceOnly : [])],
    setupFiles: [path.join(import.meta.dirname, "test/support/setup.ts")],
    globalSetup: [path.join(import.meta.dirname, "test/support/globalSetup.ts")],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Files run in parallel on a 2-core machine; each file uses its own Postgres schema.
    maxWorkers: 2,
    fileParallelism: true
  }
})

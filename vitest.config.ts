import * as path from "node:path"
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "test/**/*.test.ts"],
    setupFiles: [path.join(import.meta.dirname, "test/support/setup.ts")],
    globalSetup: [path.join(import.meta.dirname, "test/support/globalSetup.ts")],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Files run in parallel on a 2-core machine; each file uses its own Postgres schema.
    maxWorkers: 2,
    fileParallelism: true
  }
})

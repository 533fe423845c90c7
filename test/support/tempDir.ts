/**
 * Temporary folders for tests, removed with their contents when the test's scope closes (also when
 * the test fails), so that test runs leave nothing behind in the system's temporary directory.
 */
import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** A new folder `<tmp>/<prefix>-XXXXXX` for the scope. */
export const tempDir = (prefix: string): Effect.Effect<string, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

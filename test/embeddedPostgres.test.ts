/**
 * The test server's launcher (test/support/embeddedPostgres.ts), which the README's commands and the
 * examples use: it starts PostgreSQL from binaries inside a folder of mode 700 (a clone under /root,
 * a private CI work folder). As root the server runs as the `postgres` OS user, who cannot enter such
 * a folder, so the launcher runs a readable copy; as another user the folder is theirs.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import postgres from "postgres"
import { embeddedBinDir, startPostgres } from "./support/embeddedPostgres.ts"

/** A copy of the installation inside `dir` (hard links where possible: cheap, and just as unreachable). */
const copyInstallation = (from: string, to: string) => {
  try {
    execFileSync("cp", ["-al", from, to], { stdio: "ignore" })
  } catch {
    fs.cpSync(from, to, { recursive: true, verbatimSymlinks: true })
  }
}

describe("embedded PostgreSQL", () => {
  it("starts from binaries inside a private folder (mode 700), as root and as any other user", async () => {
    const isRoot = typeof process.getuid === "function" && process.getuid() === 0
    const privateDir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-private-"))
    fs.chmodSync(privateDir, 0o700)
    try {
      const install = path.join(privateDir, "clone", "postgres")
      fs.mkdirSync(path.dirname(install))
      copyInstallation(path.resolve(embeddedBinDir(), ".."), install)
      if (isRoot) {
        // The precondition of the bug: the postgres user cannot run the binaries where they are.
        const direct = execFileSync("su", [
          "postgres",
          "-s",
          "/bin/sh",
          "-c",
          `test -x ${install}/bin/initdb && echo reachable || echo unreachable`
        ], { encoding: "utf8" })
        assert.strictEqual(direct.trim(), "unreachable")
      }
      const pg = await startPostgres({ binDir: path.join(install, "bin"), ignoreEnv: true })
      try {
        assert.strictEqual(pg.external, false)
        assert.strictEqual(pg.version, 18)
        const sql = postgres(pg.url, { max: 1, onnotice: () => {} })
        const [row] = await sql<Array<{ answer: number; user: string }>>`SELECT 42 AS answer, current_user AS user`
        await sql.end()
        assert.deepStrictEqual({ ...row }, { answer: 42, user: "postgres" })
      } finally {
        await pg.stop()
      }
    } finally {
      fs.rmSync(privateDir, { recursive: true, force: true })
    }
  })
})

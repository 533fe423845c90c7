/**
 * The release script's file changes, on a copy: every package's package.json and jsr.json get the
 * new version, private packages are left alone, the CHANGELOG gets an entry on top. (Packing and
 * verifying the tarballs is what test/pack.test.ts does.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { bumpVersions, changelogEntry, prependChangelog } from "../scripts/release.ts"

describe("npm run release", () => {
  it("bumps every package (package.json and jsr.json) and writes the changelog entry on top", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-release-test-"))
    try {
      const write = (file: string, json: unknown) => {
        fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true })
        fs.writeFileSync(path.join(dir, file), JSON.stringify(json))
      }
      write("packages/core/package.json", { name: "@tidings/core", version: "0.1.0" })
      write("packages/core/jsr.json", { name: "@tidings/core", version: "0.1.0" })
      write("packages/postgres/package.json", {
        name: "@tidings/postgres",
        version: "0.1.0",
        dependencies: { "@tidings/core": "workspace:^" }
      })
      write("packages/internal/package.json", { name: "internal", private: true, version: "0.0.0" })
      const changed = bumpVersions(dir, "0.2.0")
      assert.deepStrictEqual(changed.sort(), [
        "packages/core/jsr.json",
        "packages/core/package.json",
        "packages/postgres/package.json"
      ])
      const read = (file: string) => JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"))
      assert.strictEqual(read("packages/core/jsr.json").version, "0.2.0")
      assert.strictEqual(read("packages/postgres/package.json").dependencies["@tidings/core"], "workspace:^")
      assert.strictEqual(read("packages/internal/package.json").version, "0.0.0")
      assert.throws(() => bumpVersions(dir, "two"), /not a version/)

      prependChangelog(dir, changelogEntry("0.2.0", "2026-12-01", ["Relay: faster", "Docs"]))
      prependChangelog(dir, changelogEntry("0.3.0", "2026-12-02", []))
      const log = fs.readFileSync(path.join(dir, "CHANGELOG.md"), "utf8")
      assert.match(log, /^# Changelog\n/)
      assert.isBelow(log.indexOf("## 0.3.0 (2026-12-02)"), log.indexOf("## 0.2.0 (2026-12-01)"))
      assert.include(log, "## 0.2.0 (2026-12-01)\n\n- Relay: faster\n- Docs\n")
      assert.include(log, "## 0.3.0 (2026-12-02)\n\n- No changes recorded.\n")
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})

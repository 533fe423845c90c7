/**
 * Formatting and lint (scripts/format.ts): every TypeScript file dprint.json includes is formatted
 * in the Effect style, except those scripts/unformatted.txt still lists (they predate the formatter
 * and wait for one `npm run format` over the whole tree), and oxlint finds nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { files, format, included, lint, pending, unformatted } from "../scripts/format.ts"

describe("format and lint", () => {
  it("the formatter applies dprint.json (the Effect style) and sees the repository's files", () => {
    assert.strictEqual(
      format("x.ts", "const f = function* () { yield 'a'; };\n"),
      "const f = function*() {\n  yield \"a\"\n}\n"
    )
    assert.isTrue(included("packages/core/src/Outbox.ts"))
    assert.isFalse(included("node_modules/effect/dist/index.d.ts"))
    assert.isFalse(included("packages/hono/src/internal/consoleAssets.ts"), "generated files are left alone")
    assert.include(files(), "scripts/format.ts")
  })

  it("every file is formatted (npm run format), apart from the ones waiting for the first run", () => {
    const waiting = pending()
    const all = new Set(files())
    assert.deepStrictEqual(
      [...waiting].filter((f) => !all.has(f)),
      [],
      "scripts/unformatted.txt lists files that do not exist"
    )
    assert.deepStrictEqual(unformatted(), [], "run: npm run format -- <these files>")
  })

  it("lint (oxlint, .oxlintrc.json) finds nothing", () => {
    const result = lint()
    assert.isTrue(result.ok, result.output)
  })
})

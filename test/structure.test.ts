/**
 * The shape of the packages' sources: no import circles (type imports included), the layering
 * (core depends on effect only, each driver on core and its own client library), no source file
 * over 450 lines (split past ~400: a file holds one thing), and JSDoc with `@since` and `@category`
 * on every export of a public module (as in Effect's packages).
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { circles, sourceGraph } from "./support/importGraph.ts"
import { root } from "./support/runtimes.ts"

const graph = sourceGraph(root)

describe("structure of packages/*/src", () => {
  it("reads every package's sources", () => {
    for (const pkg of ["core", "postgres", "rabbitmq", "hono", "webhooks", "cli"]) {
      assert.isAbove(graph.filter((f) => f.pkg === pkg).length, 2, pkg)
    }
    // The reader sees type imports and workspace imports (else the checks below would prove little).
    const relay = graph.find((f) => f.file === "packages/core/src/Relay.ts")!
    assert.include(relay.imports, "packages/core/src/Publisher.ts")
    assert.isTrue(graph.some((f) => f.imports.includes("packages/core/src/Errors.ts") && f.pkg !== "core"))
  })

  it("finds a circle when there is one", () => {
    const found = circles([
      { file: "a.ts", pkg: "x", imports: ["b.ts"], external: [] },
      { file: "b.ts", pkg: "x", imports: ["c.ts"], external: [] },
      { file: "c.ts", pkg: "x", imports: ["a.ts", "d.ts"], external: [] },
      { file: "d.ts", pkg: "x", imports: [], external: [] }
    ])
    assert.deepStrictEqual(found, [["a.ts", "b.ts", "c.ts", "a.ts"]])
  })

  it("has no import circles, type imports included", () => {
    assert.deepStrictEqual(circles(graph).map((cycle) => cycle.join(" → ")), [])
  })

  it("every import resolves to a file", () => {
    const missing = graph.flatMap((f) =>
      f.imports.filter((i) => !fs.existsSync(path.join(root, i))).map((i) => `${f.file} → ${i}`)
    )
    assert.deepStrictEqual(missing, [])
  })

  it("layering: each package imports only its declared dependencies (core: effect; drivers: core and their client)", () => {
    const wrong: Array<string> = []
    for (const f of graph) {
      const manifest = JSON.parse(fs.readFileSync(path.join(root, "packages", f.pkg, "package.json"), "utf8"))
      const allowed = new Set([
        ...Object.keys(manifest.dependencies ?? {}),
        ...Object.keys(manifest.peerDependencies ?? {})
      ])
      for (const spec of f.external) {
        const name = spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0]!
        if (!spec.startsWith("node:") && !allowed.has(name)) wrong.push(`${f.file} imports ${spec}`)
      }
      for (const target of f.imports) {
        const pkg = target.split("/")[1]!
        if (pkg !== f.pkg && !allowed.has(`@tidings/${pkg}`)) wrong.push(`${f.file} imports ${target}`)
        // Another package is reached through its public modules only.
        if (pkg !== f.pkg && target.includes("/internal/")) wrong.push(`${f.file} imports ${target}`)
      }
    }
    assert.deepStrictEqual(wrong, [])
    // core's main entry needs nothing but effect: the test-only peers are for core/testing.
    const mainReach = graph.filter((f) => f.pkg === "core" && !f.file.includes("/testing")).flatMap((f) => f.external)
    assert.deepStrictEqual(
      [...new Set(mainReach.map((s) => s.split("/")[0]!))].filter((s) => s !== "effect" && !s.startsWith("node:")),
      []
    )
  })

  it("no source file is over 450 lines", () => {
    const long = graph
      .map((f) => ({ file: f.file, lines: fs.readFileSync(path.join(root, f.file), "utf8").split("\n").length }))
      .filter((f) => f.lines > 450)
      .map((f) => `${f.file}: ${f.lines} lines`)
    assert.deepStrictEqual(long, [])
  })

  it("every export of a public module has JSDoc with @since and @category", () => {
    const missing = graph
      .filter((f) => !f.file.includes("/internal/") && !/\/(index|bin)\.ts$/.test(f.file))
      .flatMap((f) =>
        undocumented(fs.readFileSync(path.join(root, f.file), "utf8")).map((name) => `${f.file}: ${name}`)
      )
    assert.deepStrictEqual(missing, [])
    assert.deepStrictEqual(
      undocumented(
        "/** A. */\nexport const a = 1\n/**\n * B.\n * @since 0.1.0\n * @category models\n */\nexport interface B {}\nexport type C = 1\n" +
          "/**\n * D.\n * @since 0.1.0\n * @category models\n */\nexport function d(a: string): string\nexport function d(a: number): number\n" +
          "export function d(a: unknown) {\n  return a\n}\nexport function e(): void"
      ),
      ["a", "C", "e"]
    )
  })
})

/** The names of the top-level exports of `text` whose JSDoc lacks `@since` or `@category` (or that have none). */
const undocumented = (text: string): ReadonlyArray<string> => {
  const lines = text.split("\n")
  const out: Array<string> = []
  let overloads: string | undefined
  lines.forEach((line, i) => {
    const m = /^export (?:declare )?(?:abstract )?(const|function|class|interface|type|enum) (\w+)/.exec(line)
    if (m === null) return
    // The overloads of a function share the first one's JSDoc (as Effect's docs generator reads them).
    const again = m[1] === "function" && m[2] === overloads
    overloads = m[1] === "function" ? m[2] : undefined
    if (again) return
    let end = i - 1
    while (end >= 0 && lines[end]!.trim() === "") end--
    let start = end
    if (end >= 0 && lines[end]!.trim().endsWith("*/")) { while (start >= 0 && !lines[start]!.includes("/**")) start-- }
    const doc = end >= 0 && start >= 0 && lines[end]!.trim().endsWith("*/")
      ? lines.slice(start, end + 1).join("\n")
      : ""
    if (!doc.includes("@since") || !doc.includes("@category")) out.push(m[2]!)
  })
  return out
}

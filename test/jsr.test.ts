/**
 * JSR: each package has a jsr.json that matches its package.json (name, version, one export per
 * public module, mapped to its TypeScript source), and `deno publish --dry-run` (the command the
 * release prints) accepts it. Slow types (exports whose types JSR cannot read without inference)
 * are counted per package: the packages in {@link withoutSlowTypes} must have none and are checked
 * without `--allow-slow-types`; the others may not have more than their count in {@link slowTypes}.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { packages } from "../scripts/pack.ts"
import { denoBinary, root } from "./support/runtimes.ts"

/** Packages whose `deno publish --dry-run` passes without --allow-slow-types: all of them. */
const withoutSlowTypes: ReadonlyArray<string> = ["core", "postgres", "rabbitmq", "hono", "webhooks", "cli"]

/**
 * Slow-type errors a package not in {@link withoutSlowTypes} may have (a new package that is not
 * there yet), which may only go down. History: 2026-11-26, core 50, postgres 3, rabbitmq 8, hono 9;
 * grown to core 81, postgres 5, rabbitmq 11, hono 13, webhooks 4, cli 33 by the restructure and the
 * new packages; then none, with explicit types (CONTRIBUTING.md says how).
 */
const slowTypes: Readonly<Record<string, number>> = {}

/**
 * `deno publish --dry-run` for one package. With `allowSlowTypes`, type checking is skipped too
 * (`tsc -b` checks the sources): what is left is the module graph, the exports and the files.
 */
const publish = (dir: string, allowSlowTypes: boolean) => {
  const args = [
    "publish",
    "--dry-run",
    "--allow-dirty",
    "--config",
    `packages/${dir}/jsr.json`,
    ...(allowSlowTypes ? ["--allow-slow-types", "--no-check"] : [])
  ]
  const res = spawnSync(denoBinary(), args, { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8" })
  return { status: res.status, output: res.stdout + res.stderr }
}

describe("JSR", () => {
  for (const pkg of packages()) {
    it(`${pkg.name}: jsr.json matches package.json and exports every public module`, () => {
      const jsr = JSON.parse(fs.readFileSync(path.join(root, "packages", pkg.dir, "jsr.json"), "utf8"))
      assert.strictEqual(jsr.name, pkg.name)
      assert.strictEqual(jsr.version, pkg.version)
      assert.strictEqual(jsr.license, "MIT")
      const modules = fs.readdirSync(path.join(root, "packages", pkg.dir, "src")).filter((f) =>
        f.endsWith(".ts") && f !== "index.ts"
      ).sort()
      assert.deepStrictEqual(
        jsr.exports,
        Object.fromEntries([[".", "./src/index.ts"], ...modules.map((f) => [`./${f.slice(0, -3)}`, `./src/${f}`])])
      )
    })

    it(`${pkg.name}: deno publish --dry-run`, () => {
      const strict = publish(pkg.dir, false)
      const count = Number(/Found (\d+) problems?/.exec(strict.output)?.[1] ?? 0)
      if (withoutSlowTypes.includes(pkg.dir)) {
        assert.strictEqual(strict.status, 0, strict.output.slice(-4000))
        return
      }
      const baseline = slowTypes[pkg.dir]
      assert.isDefined(baseline, `${pkg.dir}: add it to withoutSlowTypes (or, for now, its count to slowTypes)`)
      assert.isAtMost(
        count,
        baseline!,
        `${pkg.dir}: ${count} slow-type errors, more than the ${baseline} recorded:\n${strict.output.slice(-4000)}`
      )
      if (count === 0) {
        assert.notStrictEqual(strict.status, 0, `${pkg.dir} has no slow types any more: move it to withoutSlowTypes`)
        assert.fail(`${pkg.dir}: deno publish failed without counting slow types:\n${strict.output.slice(-4000)}`)
      }
      // Apart from slow types, the package publishes: its imports resolve, its exports exist.
      assert.deepStrictEqual(
        [...new Set(strict.output.match(/^error\[[a-z-]+\]/gm))].filter((k) => !/explicit|super-class/.test(k)),
        [],
        strict.output.slice(-4000)
      )
      const lenient = publish(pkg.dir, true)
      assert.strictEqual(lenient.status, 0, lenient.output.slice(-4000))
      assert.include(lenient.output, `Simulating publish of ${pkg.name}@${pkg.version}`)
    })
  }
})

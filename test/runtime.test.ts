import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { inject } from "vitest"

// The test command runs the whole suite twice, under Node and under Deno. This file proves which
// runtime a run is on, so a Deno run that silently fell back to Node fails here.
declare const Deno: { readonly version: { readonly deno: string } } | undefined

describe("runtime", () => {
  it("runs on the runtime the test command asked for, at a supported version", () => {
    const actual = typeof Deno !== "undefined" ? "deno" : "node"
    const expected = process.env["TIDINGS_EXPECT_RUNTIME"]
    if (expected !== undefined) expect(actual).toBe(expected)
    if (actual === "deno") {
      expect(Number(Deno!.version.deno.split(".")[0])).toBe(2)
    } else {
      expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(22)
    }
  })
})

// Bun (the npm package `bun`) runs the TypeScript sources as they are, with no build step.
const root = path.resolve(import.meta.dirname, "..")
const bun = path.join(root, "node_modules/.bin/bun")
const onBun = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  spawnSync(bun, [...args], { cwd: root, env: { ...process.env, ...env }, encoding: "utf8", timeout: 120_000 })

describe("Bun", () => {
  it("is Bun 1.x", () => {
    const run = onBun(["--version"], {})
    expect(run.status, run.stderr).toBe(0)
    expect(Number(run.stdout.trim().split(".")[0])).toBe(1)
  })

  it("runs the README's quick start", () => {
    const run = onBun(["examples/quickstart/quickstart.ts"], { DATABASE_URL: inject("pgUrl") })
    expect(run.status, run.stderr).toBe(0)
    expect(run.stdout.match(/delivered order\.placed/g)?.length).toBe(2)
  })

  it("runs the smoke: the Hono app served by Bun.serve, the relay, a consumer through the inbox, webhooks", () => {
    const run = onBun(["test/support/runtimeSmoke.ts"], { TIDINGS_TEST_PG_URL: inject("pgUrl") })
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0)
    expect(run.stdout).toContain("serving on http://127.0.0.1:")
    expect(run.stdout).toContain("with bun's server")
    expect(run.stdout).toContain("relay: 3 events published; consumer: 3 handled once through the inbox")
    expect(run.stdout).toContain("webhooks: 3 signed deliveries of one event, 1 effect")
    expect(run.stdout.trim().split("\n").at(-1)).toBe("smoke ok on bun")
  })
})

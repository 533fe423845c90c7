/**
 * Formatting and lint of the repository's TypeScript, in the Effect monorepo's style: dprint's
 * TypeScript plugin with the settings in dprint.json (run here through `@dprint/formatter`, so no
 * plugin is downloaded: the Wasm module comes from the `@dprint/typescript` npm package), and
 * oxlint with .oxlintrc.json.
 *
 *   npm run format              formats every file dprint.json includes, in place, and empties
 *                               scripts/unformatted.txt
 *   npm run format -- --check   lists the files that are not formatted and the lint findings;
 *                               exits 1 if there are any (test/format.test.ts runs the same check)
 *   npm run format -- a.ts b/   formats only these files / folders
 *
 * scripts/unformatted.txt lists files that predate the formatter and wait for one `npm run format`
 * over the whole tree: the check skips them, every other file (a new one included) must be formatted.
 * @module
 */
import { createContext } from "@dprint/formatter"
import * as typescript from "@dprint/typescript"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "..")
const pendingFile = path.join(root, "scripts/unformatted.txt")

interface DprintConfig {
  readonly lineWidth: number
  readonly indentWidth: number
  readonly typescript: Record<string, unknown>
  readonly includes: ReadonlyArray<string>
  readonly excludes: ReadonlyArray<string>
}

const config: DprintConfig = JSON.parse(fs.readFileSync(path.join(root, "dprint.json"), "utf8"))

/** A glob of dprint.json (`**`, `*`, a folder name matching everything under it) as a RegExp on a relative path. */
const globPattern = (glob: string): RegExp => {
  const body = glob.split(/(\*\*\/|\*\*|\*)/).map((part) =>
    part === "**/"
      ? "(?:.*/)?"
      : part === "**"
      ? ".*"
      : part === "*"
      ? "[^/]*"
      : part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")
  ).join("")
  return new RegExp(`^${body}(?:/.*)?$`)
}

const includes = config.includes.map(globPattern)
const excludes = config.excludes.map(globPattern)

/** Whether dprint.json includes the file (a path relative to the repository root, with `/`). */
export const included = (file: string): boolean =>
  includes.some((p) => p.test(file)) && !excludes.some((p) => p.test(file))

const walk = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = dir === "" ? e.name : `${dir}/${e.name}`
    if (e.name === ".git" || e.name === "node_modules" || excludes.some((p) => p.test(rel))) return []
    return e.isDirectory() ? walk(rel) : included(rel) ? [rel] : []
  })

/** The files dprint.json includes under `paths` (files or folders relative to the root; default: all). */
export const files = (paths: ReadonlyArray<string> = [""]): ReadonlyArray<string> =>
  paths.flatMap((p) => {
    const rel = path.relative(root, path.resolve(root, p)).split(path.sep).join("/")
    return fs.statSync(path.join(root, rel)).isDirectory() ? walk(rel) : included(rel) ? [rel] : []
  }).sort()

/** Files waiting for the first formatting of the whole tree (scripts/unformatted.txt). */
export const pending = (): ReadonlySet<string> =>
  new Set(
    fs.existsSync(pendingFile)
      ? fs.readFileSync(pendingFile, "utf8").split("\n").map((l) => l.trim()).filter((l) =>
        l !== "" && !l.startsWith("#")
      )
      : []
  )

const context = createContext({ lineWidth: config.lineWidth, indentWidth: config.indentWidth })
context.addPlugin(fs.readFileSync(typescript.getPath()), config.typescript)

/** The formatted text of `file`. */
export const format = (file: string, text: string = fs.readFileSync(path.join(root, file), "utf8")): string =>
  context.formatText({ filePath: file, fileText: text })

/** The files among `candidates` that are not formatted, leaving out the pending ones. */
export const unformatted = (candidates: ReadonlyArray<string> = files()): ReadonlyArray<string> => {
  const waiting = pending()
  return candidates.filter((file) => {
    if (waiting.has(file)) return false
    const text = fs.readFileSync(path.join(root, file), "utf8")
    return format(file, text) !== text
  })
}

/** oxlint over the repository (.oxlintrc.json); warnings count as errors. */
export const lint = (): { readonly ok: boolean; readonly output: string } => {
  const bin = path.join(root, "node_modules/oxlint/bin/oxlint")
  const res = spawnSync(process.execPath, [bin, "--deny-warnings", "-c", ".oxlintrc.json", "."], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" }
  })
  return { ok: res.status === 0, output: `${res.stdout}${res.stderr}` }
}

const main = (args: ReadonlyArray<string>): number => {
  const check = args.includes("--check")
  const paths = args.filter((a) => !a.startsWith("--"))
  if (check) {
    const bad = unformatted(paths.length > 0 ? files(paths) : files())
    for (const file of bad) console.log(`not formatted: ${file}`)
    const linted = lint()
    if (!linted.ok) console.log(linted.output)
    if (bad.length > 0) console.log(`${bad.length} file(s) not formatted: npm run format -- ${bad.join(" ")}`)
    return bad.length === 0 && linted.ok ? 0 : 1
  }
  let changed = 0
  for (const file of paths.length > 0 ? files(paths) : files()) {
    const text = fs.readFileSync(path.join(root, file), "utf8")
    const formatted = format(file, text)
    if (formatted !== text) {
      fs.writeFileSync(path.join(root, file), formatted)
      changed++
    }
  }
  if (paths.length === 0 && fs.existsSync(pendingFile)) fs.rmSync(pendingFile)
  console.log(`formatted ${changed} file(s)`)
  return 0
}

if (import.meta.main) process.exitCode = main(process.argv.slice(2))

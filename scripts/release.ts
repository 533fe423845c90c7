/**
 * `npm run release -- <version> [--dry-run] [--allow-dirty]`: prepares a release of every package.
 *
 *   1. sets `version` in each packages/*\/package.json and jsr.json (the packages move together;
 *      their dependencies on each other are `workspace:^`, which packing turns into `^<version>`);
 *   2. adds a `## <version>` entry to CHANGELOG.md with the commit subjects since the last `v*` tag
 *      (edit it before committing);
 *   3. packs the tarballs into .tarballs/ and verifies them: publint (strict), arethetypeswrong on
 *      every public module, and an install into a fresh project where each package is imported;
 *   4. prints the commands that commit, tag and publish (to npm and JSR). It publishes nothing itself.
 *
 * `--dry-run` does 3 on the current versions and writes nothing else.
 * @module
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { packages, packAll, root } from "./pack.ts"

const SEMVER = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/

/** Sets `version` in every package's package.json and jsr.json under `dir` (the repository root). */
export const bumpVersions = (dir: string, version: string): Array<string> => {
  if (!SEMVER.test(version)) throw new Error(`not a version: ${version}`)
  const changed: Array<string> = []
  for (const name of fs.readdirSync(path.join(dir, "packages"))) {
    for (const manifest of ["package.json", "jsr.json"]) {
      const file = path.join(dir, "packages", name, manifest)
      if (!fs.existsSync(file)) continue
      const json = JSON.parse(fs.readFileSync(file, "utf8"))
      if (manifest === "package.json" && json.private === true) continue
      json.version = version
      fs.writeFileSync(file, `${JSON.stringify(json, null, 2)}\n`)
      changed.push(path.relative(dir, file))
    }
  }
  return changed
}

/** The CHANGELOG entry for `version`: one line per commit subject. */
export const changelogEntry = (version: string, date: string, subjects: ReadonlyArray<string>): string =>
  `## ${version} (${date})\n\n${
    subjects.length === 0 ? "- No changes recorded.\n" : subjects.map((s) => `- ${s}\n`).join("")
  }`

/** Puts `entry` at the top of CHANGELOG.md under `dir` (created with a title when missing). */
export const prependChangelog = (dir: string, entry: string): void => {
  const file = path.join(dir, "CHANGELOG.md")
  const title =
    "# Changelog\n\nAll packages share one version. Entries are written by `npm run release` and edited by hand.\n\n"
  const existing = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : title
  const body = existing.startsWith("# Changelog")
    ? existing.slice(existing.indexOf("\n## ") === -1 ? existing.length : existing.indexOf("\n## ") + 1)
    : existing
  const head = existing.startsWith("# Changelog") ? existing.slice(0, existing.length - body.length) : title
  fs.writeFileSync(file, `${head}${entry}\n${body}`)
}

const git = (args: ReadonlyArray<string>): string => execFileSync("git", args, { cwd: root, encoding: "utf8" }).trim()

const commitSubjects = (): Array<string> => {
  const lastTag = spawnSync("git", ["describe", "--tags", "--abbrev=0", "--match", "v*"], {
    cwd: root,
    encoding: "utf8"
  })
  const range = lastTag.status === 0 ? [`${lastTag.stdout.trim()}..HEAD`] : []
  return git(["log", "--format=%s", "--no-merges", ...range]).split("\n").filter((s) => s !== "")
}

const bin = (name: string) => path.join(root, "node_modules/.bin", name)
const check = (what: string, cmd: string, args: ReadonlyArray<string>, cwd = root) => {
  const res = spawnSync(cmd, args, { cwd, encoding: "utf8" })
  if (res.status !== 0) throw new Error(`${what} failed:\n${res.stdout}${res.stderr}`)
  console.error(`[release] ok: ${what}`)
}

/** Packs and verifies every package; returns the tarballs. */
export const packAndVerify = (out: string): Record<string, string> => {
  const tarballs = packAll(out)
  for (const [dir, file] of Object.entries(tarballs)) {
    check(`publint ${path.basename(file)}`, bin("publint"), ["run", file, "--strict", "--level", "suggestion"])
    const entrypoints = [
      ".",
      "./package.json",
      ...fs.readdirSync(path.join(root, "packages", dir, "src")).filter((f) => f.endsWith(".ts") && f !== "index.ts")
        .map((f) => `./${f.slice(0, -3)}`)
    ]
    check(`attw ${path.basename(file)}`, bin("attw"), [
      file,
      "--profile",
      "esm-only",
      "--format",
      "ascii",
      "--entrypoints",
      ...entrypoints
    ])
  }
  const app = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-release-"))
  try {
    check("npm init", "npm", ["init", "-y"], app)
    check("npm pkg set type=module", "npm", ["pkg", "set", "type=module"], app)
    check("npm install of the tarballs", "npm", [
      "install",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      ...Object.values(tarballs),
      "effect@^4.1.0",
      "hono@^4.6.0",
      "@hono/node-server@^2.0.0"
    ], app)
    const imports = packages().map((p) => `await import(${JSON.stringify(p.name)})`).join("; ")
    check("every package imports", process.execPath, ["--input-type=module", "-e", imports], app)
  } finally {
    fs.rmSync(app, { recursive: true, force: true })
  }
  return tarballs
}

const main = () => {
  const args = process.argv.slice(2).filter((a) => a !== "--")
  const dryRun = args.includes("--dry-run")
  const allowDirty = args.includes("--allow-dirty")
  const version = args.find((a) => !a.startsWith("--"))
  if (version === undefined && !dryRun) {
    console.error("usage: npm run release -- <version> [--dry-run] [--allow-dirty]")
    process.exit(2)
  }
  if (!dryRun && !allowDirty && git(["status", "--porcelain"]) !== "") {
    console.error("[release] the working tree has changes: commit them first (or --allow-dirty)")
    process.exit(1)
  }
  if (version !== undefined && !dryRun) {
    for (const file of bumpVersions(root, version)) console.error(`[release] ${file}: ${version}`)
    prependChangelog(root, changelogEntry(version, new Date().toISOString().slice(0, 10), commitSubjects()))
    console.error("[release] CHANGELOG.md: entry added (edit it now)")
  }
  const tarballs = packAndVerify(path.join(root, ".tarballs"))
  const v = packages()[0]!.version
  console.log(`
Verified ${Object.keys(tarballs).length} tarballs in .tarballs/. To publish ${v}:

  git commit -am "Release ${v}" && git tag v${v}
${Object.values(tarballs).map((f) => `  npm publish ${path.relative(root, f)} --access public`).join("\n")}
${packages().map((p) => `  npm run deno -- publish --config packages/${p.dir}/jsr.json`).join("\n")}
  git push && git push --tags
`)
}

if (import.meta.main === true || process.argv[1] === import.meta.filename) main()

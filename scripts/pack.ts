/**
 * `npm run pack [-- --out DIR]`: builds every publishable package (packages/*) and writes its npm
 * tarball to `.tarballs/` (or DIR): `tidings-core-0.1.0.tgz`, ... The tarballs are what `npm publish`
 * would upload (exports point at the built `dist/`, `workspace:` versions resolved), so until the
 * packages are on a registry, a project installs them by path:
 * `npm install ../tidings/.tarballs/tidings-core-0.1.0.tgz ...`.
 * @module
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

export const root = path.resolve(import.meta.dirname, "..")

/** A publishable package of the workspace. */
export interface Package {
  /** The folder name under packages/, e.g. `core`. */
  readonly dir: string
  /** The npm name, e.g. `@tidings/core`. */
  readonly name: string
  readonly version: string
}

/**
 * Every publishable (not private) package under packages/, each after the packages it depends on
 * (a build reads its dependencies' `dist`), alphabetical otherwise.
 */
export const packages = (): ReadonlyArray<Package> => {
  const all = fs.readdirSync(path.join(root, "packages"))
    .filter((dir) => fs.existsSync(path.join(root, "packages", dir, "package.json")))
    .map((dir) => ({
      dir,
      manifest: JSON.parse(fs.readFileSync(path.join(root, "packages", dir, "package.json"), "utf8"))
    }))
    .filter(({ manifest }) => manifest.private !== true)
    .sort((a, b) => a.dir.localeCompare(b.dir))
  const ordered: Array<Package> = []
  const visit = (entry: (typeof all)[number]): void => {
    if (ordered.some((p) => p.dir === entry.dir)) return
    const deps = Object.keys({ ...entry.manifest.dependencies, ...entry.manifest.peerDependencies })
    for (const dep of all.filter((other) => deps.includes(other.manifest.name))) visit(dep)
    ordered.push({ dir: entry.dir, name: entry.manifest.name as string, version: entry.manifest.version as string })
  }
  all.forEach(visit)
  return ordered
}

/** The tarball's file name npm gives a package: `@tidings/core@0.1.0` → `tidings-core-0.1.0.tgz`. */
export const tarballName = (pkg: Package): string =>
  `${pkg.name.replace(/^@/, "").replace("/", "-")}-${pkg.version}.tgz`

const pnpm = (): string => {
  const local = path.join(root, ".tools/node_modules/.bin/pnpm")
  return fs.existsSync(local) ? local : "pnpm"
}

/**
 * Runs `f` holding the workspace's pack lock: packing builds each package's `dist/` in place, and
 * two builds at once (the docs test's `npm run pack` and the install test) must not interleave.
 * A lock left by a process that no longer runs is taken over.
 */
const withPackLock = <A>(f: () => A): A => {
  const lock = path.join(root, "node_modules", ".tidings-pack.lock")
  for (;;) {
    try {
      fs.mkdirSync(lock)
      fs.writeFileSync(path.join(lock, "pid"), String(process.pid))
      break
    } catch {
      const holder = Number(fs.readFileSync(path.join(lock, "pid"), { encoding: "utf8", flag: "a+" }) || Number.NaN)
      let alive = false
      try {
        alive = Number.isInteger(holder) && (process.kill(holder, 0), true)
      } catch {
        alive = false
      }
      if (!alive && Number.isInteger(holder)) fs.rmSync(lock, { recursive: true, force: true })
      else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200)
    }
  }
  try {
    return f()
  } finally {
    fs.rmSync(lock, { recursive: true, force: true })
  }
}

/** Builds and packs every package into `out`; returns the tarballs' paths by folder name. */
export const packAll = (out: string, options: { readonly quiet?: boolean } = {}): Record<string, string> =>
  withPackLock(() => {
    fs.mkdirSync(out, { recursive: true })
    const result: Record<string, string> = {}
    for (const pkg of packages()) {
      const target = path.join(out, tarballName(pkg))
      fs.rmSync(target, { force: true })
      // pnpm pack runs the package's prepack (tsc -p tsconfig.build.json) and rewrites workspace: versions.
      execFileSync(pnpm(), ["pack", "--pack-destination", out], {
        cwd: path.join(root, "packages", pkg.dir),
        stdio: options.quiet === true ? "pipe" : ["ignore", "ignore", "inherit"]
      })
      if (!fs.existsSync(target)) throw new Error(`pnpm pack did not write ${target}`)
      result[pkg.dir] = target
    }
    return result
  })

if (import.meta.main === true || process.argv[1] === import.meta.filename) {
  const outFlag = process.argv.indexOf("--out")
  const out = path.resolve(outFlag === -1 ? path.join(root, ".tarballs") : process.argv[outFlag + 1] ?? ".tarballs")
  const tarballs = packAll(out)
  for (const file of Object.values(tarballs)) console.log(path.relative(process.cwd(), file) || file)
}

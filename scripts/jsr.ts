/**
 * Writes each package's jsr.json from its package.json and its public modules (one export per
 * top-level module of src/, mapped to its TypeScript source). Run after adding or removing a module:
 * `node scripts/jsr.ts` (test/jsr.test.ts checks the files are current).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { packages } from "./pack.ts"

const root = path.resolve(import.meta.dirname, "..")

for (const pkg of packages()) {
  const dir = path.join(root, "packages", pkg.dir)
  const file = path.join(dir, "jsr.json")
  const current = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : {}
  const modules = fs.readdirSync(path.join(dir, "src")).filter((f) => f.endsWith(".ts") && f !== "index.ts").sort()
  const jsr = {
    name: pkg.name,
    version: pkg.version,
    license: "MIT",
    exports: Object.fromEntries([
      [".", "./src/index.ts"],
      ...modules.map((f) => [`./${f.slice(0, -3)}`, `./src/${f}`])
    ]),
    publish: current.publish ?? { include: ["src/**/*.ts", "README.md", "LICENSE"], exclude: ["src/**/*.test.ts"] }
  }
  fs.writeFileSync(file, JSON.stringify(jsr, null, 2) + "\n")
  console.log(`wrote packages/${pkg.dir}/jsr.json (${modules.length + 1} exports)`)
}

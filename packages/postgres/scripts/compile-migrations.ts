// Compiles migrations/*.sql (the source of truth) into src/internal/migrations.ts, so the published
// package carries its migrations without reading the repository at run time.
// Run: node packages/postgres/scripts/compile-migrations.ts [--check]
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "../../..")
const target = path.join(root, "packages/postgres/src/internal/migrations.ts")

/**
 * Splits a SQL script into statements, so that each runs as one prepared statement on any driver
 * (the extended protocol refuses several commands in one). Respects quotes, dollar quotes and comments.
 */
export const splitStatements = (script: string): Array<string> => {
  const out: Array<string> = []
  let current = ""
  let i = 0
  while (i < script.length) {
    const c = script[i]!
    const rest = script.slice(i)
    if (rest.startsWith("--")) {
      const end = script.indexOf("\n", i)
      i = end === -1 ? script.length : end + 1
      current += "\n"
      continue
    }
    if (rest.startsWith("/*")) {
      const end = script.indexOf("*/", i + 2)
      i = end === -1 ? script.length : end + 2
      current += " "
      continue
    }
    if (c === "'" || c === "\"") {
      let j = i + 1
      while (j < script.length) {
        if (script[j] === c && script[j + 1] === c) j += 2
        else if (script[j] === c) break
        else j++
      }
      current += script.slice(i, j + 1)
      i = j + 1
      continue
    }
    const dollar = /^\$[A-Za-z_]*\$/.exec(rest)
    if (dollar !== null) {
      const tag = dollar[0]
      const end = script.indexOf(tag, i + tag.length)
      const stop = end === -1 ? script.length : end + tag.length
      current += script.slice(i, stop)
      i = stop
      continue
    }
    if (c === ";") {
      if (current.trim() !== "") out.push(current.trim())
      current = ""
      i++
      continue
    }
    current += c
    i++
  }
  if (current.trim() !== "") out.push(current.trim())
  return out
}

/**
 * A line `-- tidings:commit` splits a migration into transactions that commit one after the other
 * (e.g. `ADD CONSTRAINT ... NOT VALID`, then `VALIDATE CONSTRAINT` without the first one's lock).
 * Every part before the last may run again (when a later one did not commit): it must tolerate that.
 */
export const splitTransactions = (script: string): Array<Array<string>> =>
  script.split(/^--\s*tidings:commit\s*$/m).map(splitStatements).filter((statements) => statements.length > 0)

export const compile = (): string => {
  const dir = path.join(root, "migrations")
  const files = fs.readdirSync(dir).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort()
  const entries = files.map((file) => {
    const version = Number(file.slice(0, 4))
    const name = file.slice(5, -4)
    const sql = fs.readFileSync(path.join(dir, file), "utf8")
    const transactions = splitTransactions(sql).map((statements) =>
      `      [\n${statements.map((st) => `        ${JSON.stringify(st)}`).join(",\n")}\n      ]`
    ).join(",\n")
    return `  {\n    version: ${version},\n    name: ${
      JSON.stringify(name)
    },\n    transactions: [\n${transactions}\n    ]\n  }`
  })
  return `// Generated from migrations/*.sql by packages/postgres/scripts/compile-migrations.ts. Do not edit.\n` +
    `export interface Migration {\n  readonly version: number\n  readonly name: string\n` +
    `  /** The statements, in transactions that commit one after the other (usually one). */\n` +
    `  readonly transactions: ReadonlyArray<ReadonlyArray<string>>\n}\n\n` +
    `export const migrations: ReadonlyArray<Migration> = [\n${entries.join(",\n")}\n]\n`
}

if (process.argv[1] === import.meta.filename) {
  const out = compile()
  if (process.argv.includes("--check")) {
    const current = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : ""
    if (current !== out) {
      console.error(
        "src/internal/migrations.ts is out of date: run node packages/postgres/scripts/compile-migrations.ts"
      )
      process.exit(1)
    }
  } else {
    fs.writeFileSync(target, out)
    console.log(`wrote ${path.relative(root, target)}`)
  }
}

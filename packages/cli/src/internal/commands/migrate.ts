/** `tidings migrate [--dry-run] [--print-sql] [--grant-to ROLE]`. */
import * as Migrator from "@tidings/postgres/Migrator"
import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { SqlClient } from "effect/sql"
import * as Out from "../output.ts"
import { schemaName, settings, SettingError, withDatabase } from "../root.ts"

const role = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

const quote = (name: string) => `"${name.replace(/"/g, "\"\"")}"`

/** The versions applied to `schema` (none when it has no migrations table yet). */
export const appliedVersions = (schema: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [table] = yield* sql<{ exists: boolean }>`SELECT to_regclass(${`${quote(schema)}.tidings_migrations`}) IS NOT NULL AS exists`
    if (table?.exists !== true) return new Set<number>()
    const rows = yield* sql<{ version: number }>`SELECT version FROM ${sql(`${schema}.tidings_migrations`)}`
    return new Set(rows.map((r) => Number(r.version)))
  })

/** The migrations not applied to `schema` yet. */
export const pending = (schema: string) =>
  Effect.map(appliedVersions(schema), (done) => Migrator.all.filter((m) => !done.has(m.version)))

// TODO(Migrator): use Migrator.render({ schema, grantTo }) and Migrator.run({ schema, grantTo }) once they exist.
const grants = (schema: string, grantee: string) => [
  `GRANT USAGE ON SCHEMA ${quote(schema)} TO ${quote(grantee)}`,
  `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${quote(schema)} TO ${quote(grantee)}`,
  `GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${quote(schema)} TO ${quote(grantee)}`
]

const renderSql = (schema: string, migrations: typeof Migrator.all, grantee: string | undefined) =>
  [
    `CREATE SCHEMA IF NOT EXISTS ${quote(schema)};`,
    `SET search_path TO ${quote(schema)};`,
    ...migrations.flatMap((m) => [`-- ${String(m.version).padStart(4, "0")} ${m.name}`, ...m.statements.map((st) => `${st};`)]),
    ...(grantee === undefined ? [] : ["-- grants", ...grants(schema, grantee).map((g) => `${g};`)])
  ].join("\n")

/** `tidings migrate` */
export const command = Command.make("migrate", {
  dryRun: Flag.Boolean("dry-run").pipe(Flag.withDefault(false), Flag.withDescription("Show what would be applied, change nothing")),
  printSql: Flag.Boolean("print-sql").pipe(Flag.withDefault(false), Flag.withDescription("Print the SQL of the pending migrations")),
  grantTo: Flag.String("grant-to").pipe(Flag.optional, Flag.withDescription("A role that gets the rights the app needs on the schema's tables"))
}, (f) =>
  withDatabase(Effect.gen(function*() {
    const s = yield* settings
    const schema = yield* schemaName
    const grantee = Option.getOrUndefined(f.grantTo)
    if (grantee !== undefined && !role.test(grantee)) return yield* new SettingError({ message: `--grant-to must be a role name ([A-Za-z_][A-Za-z0-9_]*), got ${JSON.stringify(grantee)}` })
    const todo = yield* pending(schema)
    const names = todo.map((m) => ({ version: m.version, name: m.name }))
    if (f.printSql) yield* Out.line(renderSql(schema, todo, grantee))
    if (f.dryRun) {
      if (s.json) return yield* Out.json({ schema, pending: names, applied: [] })
      if (!f.printSql) yield* Out.table(["version", "migration"], names.map((m) => [m.version, m.name]), { empty: `schema ${schema} is up to date` })
      return yield* Out.line(todo.length === 0 ? "" : `dry run: ${todo.length} pending migration${todo.length === 1 ? "" : "s"} not applied`)
    }
    const applied = yield* Migrator.run({ schema })
    if (grantee !== undefined) {
      const sql = yield* SqlClient.SqlClient
      for (const g of grants(schema, grantee)) yield* sql.unsafe(g)
    }
    if (s.json) return yield* Out.json({ schema, applied, grantedTo: grantee ?? null })
    yield* Out.line(applied.length === 0 ? `schema ${schema} is up to date` : `applied to ${schema}: ${applied.map((m) => `${m.version} ${m.name}`).join(", ")}`)
    if (grantee !== undefined) yield* Out.line(`granted ${grantee} the use of the schema's tables and sequences`)
  }))).pipe(Command.withDescription("Applies Tidings' pending migrations to the schema (under an advisory lock; safe from every instance)"))

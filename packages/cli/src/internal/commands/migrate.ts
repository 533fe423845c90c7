/** `tidings migrate [--dry-run] [--print-sql] [--grant-to ROLE]`. */
import * as Migrator from "@tidings/postgres/Migrator"
import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { schemaName, SettingError, settings, type Subcommand, withDatabase } from "../root.ts"

const role = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

/**
 * The SQL `migrate` would run now: the whole script (schema, migrations table, every migration,
 * grants) on a schema without migrations, else the pending migrations and the grants.
 */
const pendingSql = (schema: string, todo: ReadonlyArray<Migrator.Pending>, grantee: string | undefined) =>
  Effect.gen(function*() {
    const full = yield* Migrator.render({ schema, grantTo: grantee })
    if (todo.length === Migrator.all.length) return full
    const grants = grantee === undefined ? "" : full.slice(full.indexOf("-- grants"))
    return [...todo.map((m) => `-- ${String(m.version).padStart(4, "0")} ${m.name}\n${m.sql}`), grants].filter((part) =>
      part !== ""
    ).join("\n\n")
  })

/** `tidings migrate` */
export const command: Subcommand<"migrate", {
  readonly dryRun: boolean
  readonly printSql: boolean
  readonly grantTo: Option.Option<string>
}> = Command.make("migrate", {
  dryRun: Flag.Boolean("dry-run").pipe(
    Flag.withDefault(false),
    Flag.withDescription("Show what would be applied, change nothing")
  ),
  printSql: Flag.Boolean("print-sql").pipe(
    Flag.withDefault(false),
    Flag.withDescription("Print the SQL of the pending migrations")
  ),
  grantTo: Flag.String("grant-to").pipe(
    Flag.optional,
    Flag.withDescription("A role that gets the rights the app needs on the schema's tables")
  )
}, (f) =>
  withDatabase(Effect.gen(function*() {
    const s = yield* settings
    const schema = yield* schemaName
    const grantee = Option.getOrUndefined(f.grantTo)
    if (grantee !== undefined && !role.test(grantee)) {
      return yield* new SettingError({
        message: `--grant-to must be a role name ([A-Za-z_][A-Za-z0-9_]*), got ${JSON.stringify(grantee)}`
      })
    }
    const todo = yield* Migrator.pending({ schema })
    const names = todo.map((m) => ({ version: m.version, name: m.name }))
    if (f.printSql) yield* Out.line(yield* pendingSql(schema, todo, grantee))
    if (f.dryRun) {
      if (s.json) return yield* Out.json({ schema, pending: names, applied: [] })
      if (!f.printSql) {
        yield* Out.table(["version", "migration"], names.map((m) => [m.version, m.name]), {
          empty: `schema ${schema} is up to date`
        })
      }
      return yield* Out.line(
        todo.length === 0 ? "" : `dry run: ${todo.length} pending migration${todo.length === 1 ? "" : "s"} not applied`
      )
    }
    const applied = yield* Migrator.run({ schema, grantTo: grantee })
    if (s.json) return yield* Out.json({ schema, applied, grantedTo: grantee ?? null })
    yield* Out.line(
      applied.length === 0
        ? `schema ${schema} is up to date`
        : `applied to ${schema}: ${applied.map((m) => `${m.version} ${m.name}`).join(", ")}`
    )
    if (grantee !== undefined) yield* Out.line(`granted ${grantee} the use of the schema's tables and sequences`)
  }))).pipe(
    Command.withDescription(
      "Applies Tidings' pending migrations to the schema (under an advisory lock; safe from every instance)"
    )
  )

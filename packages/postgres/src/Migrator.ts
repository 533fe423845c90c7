/**
 * Applies the numbered SQL migrations of `migrations/` (compiled into this package) to a schema, in
 * a way an operator can run against a live database, from every instance at start or from a deploy
 * step:
 * - each migration commits in a transaction of its own (some in two, see 0005), under a per-schema
 *   advisory lock that concurrent migrators queue on; the version is checked again under the lock,
 *   so a migration runs once;
 * - the schema and the migrations table are created only when missing, so the schema's owner needs
 *   no CREATE on the database;
 * - least privilege: migrate as the owner and `grantTo` the app's role exactly what the stores use
 *   (USAGE on the schema, SELECT / INSERT / UPDATE / DELETE on its tables, SELECT on
 *   `tidings_migrations`); that role cannot create, alter or drop anything. The app then needs no
 *   migration step of its own (running `run` without pending migrations changes nothing).
 * `render` and `pending` give the SQL without running it (for review, `--print-sql`, `--dry-run`).
 * @module
 */
import { InvalidConfig, type StoreError } from "@tidings/core/Errors"
import { Effect } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import { resolveSchema } from "./internal/identifier.ts"
import { migrations } from "./internal/migrations.ts"
import { bootstrap, grantStatements, migrationTransactions, script } from "./internal/migrationSql.ts"
import { mapSqlError } from "./internal/storeError.ts"

/** SqlErrors become StoreErrors; InvalidConfig stays as it is. */
const storeErrors = <A, R>(effect: Effect.Effect<A, InvalidConfig | SqlError.SqlError, R>) =>
  Effect.catchIf(effect, SqlError.isSqlError, (error) => mapSqlError("migrate")(Effect.fail(error)))

/**
 * A migration this package carries.
 * @since 0.1.0
 * @category models
 */
export interface Migration {
  readonly version: number
  readonly name: string
  /** Its statements, in the transactions that commit one after the other (usually one). */
  readonly transactions: ReadonlyArray<ReadonlyArray<string>>
  /** All its statements, in order. */
  readonly statements: ReadonlyArray<string>
}

/**
 * The migrations this package carries, in order.
 * @since 0.1.0
 * @category constants
 */
export const all: ReadonlyArray<Migration> = migrations.map((m) => ({ ...m, statements: m.transactions.flat() }))

/**
 * Options of {@link run}, {@link render} and {@link pending}.
 * @since 0.1.0
 * @category options
 */
export interface Options {
  /**
   * Schema to migrate (created when missing); default `tidings`. At most 48 characters of a-z, 0-9
   * and _, so that the names derived from it (the NOTIFY channel `tidings_outbox_<schema>`) fit in
   * PostgreSQL's 63 bytes.
   */
  readonly schema?: string
  /** Roles (e.g. the app's) to grant what the stores need on the schema, after migrating. */
  readonly grantTo?: string | ReadonlyArray<string> | undefined
}

/**
 * A migration that was applied now.
 * @since 0.1.0
 * @category models
 */
export interface Applied {
  readonly version: number
  readonly name: string
}

/**
 * A migration not applied yet, with the SQL that applies it (transactions in BEGIN ... COMMIT).
 * @since 0.1.0
 * @category models
 */
export interface Pending {
  readonly version: number
  readonly name: string
  readonly sql: string
}

const roles = (grantTo: Options["grantTo"]): Effect.Effect<ReadonlyArray<string>, InvalidConfig> => {
  const list = grantTo === undefined ? [] : typeof grantTo === "string" ? [grantTo] : grantTo
  for (const role of list) {
    if (typeof role !== "string" || role === "" || role.includes("\0") || new TextEncoder().encode(role).length > 63) {
      return Effect.fail(
        new InvalidConfig({
          path: "grantTo",
          message: `invalid role name ${JSON.stringify(role).slice(0, 80)}: 1-63 bytes, no NUL`
        })
      )
    }
  }
  return Effect.succeed(list)
}

/** Runs statements in one transaction. */
const transaction = (statements: ReadonlyArray<string>) =>
  SqlClient.SqlClient.use((sql) =>
    sql.withTransaction(Effect.forEach(statements, (st) => sql.unsafe(st), { discard: true }))
  )

/** The versions recorded in the schema (none when it or its table does not exist). */
const appliedVersions = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    Effect.gen(function*() {
      const [table] = yield* sql<
        { exists: boolean }
      >`SELECT to_regclass(${`"${schema}".tidings_migrations`}) IS NOT NULL AS exists`
      if (table?.exists !== true) return new Set<number>()
      const rows = yield* sql<{ version: number }>`SELECT version FROM ${sql(`${schema}.tidings_migrations`)}`
      return new Set(rows.map((r) => Number(r.version)))
    })
  )

/**
 * Applies pending migrations, then grants `grantTo` what the app needs (every time: a new table is
 * covered too). Returns those applied by this call (empty when up to date).
 * @since 0.1.0
 * @category combinators
 */
export const run = (
  options: Options = {}
): Effect.Effect<ReadonlyArray<Applied>, InvalidConfig | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const grantees = yield* roles(options.grantTo)
    const sql = yield* SqlClient.SqlClient
    const table = sql(`${schema}.tidings_migrations`)
    const done = yield* appliedVersions(schema)
    // Nothing to do, nothing written: a role without DDL rights may call this at start.
    if (all.every((m) => done.has(m.version)) && grantees.length === 0) return []
    yield* transaction(bootstrap(schema))
    const applied: Array<Applied> = []
    for (const migration of all) {
      if (done.has(migration.version)) continue
      let ran = false
      for (const statements of migrationTransactions(schema, migration)) {
        ran = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(statements[0]!)
          // Another migrator may have applied it while we waited for the lock.
          const [row] = yield* sql<
            { n: number }
          >`SELECT count(*)::int AS n FROM ${table} WHERE version = ${migration.version}`
          if (row!.n > 0) return false
          for (const statement of statements.slice(1)) yield* sql.unsafe(statement)
          return true
        }))
        if (!ran) break
      }
      if (ran) applied.push({ version: migration.version, name: migration.name })
    }
    if (grantees.length > 0) yield* transaction(grantStatements(schema, grantees))
    return applied
  }).pipe(storeErrors, Effect.withSpan("tidings.postgres.migrate"))

/**
 * The migrations not applied to the schema yet, with their SQL.
 * @since 0.1.0
 * @category combinators
 */
export const pending = (
  options: Pick<Options, "schema"> = {}
): Effect.Effect<ReadonlyArray<Pending>, InvalidConfig | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const done = yield* appliedVersions(schema)
    return all.filter((m) => !done.has(m.version)).map((m) => ({
      version: m.version,
      name: m.name,
      sql: script(migrationTransactions(schema, m))
    }))
  }).pipe(storeErrors)

/**
 * The whole script {@link run} executes on an empty database: schema and migrations table, every
 * migration, the grants. (Against a database that has some migrations already, see {@link pending}.)
 * @since 0.1.0
 * @category combinators
 */
export const render = (options: Options = {}): Effect.Effect<string, InvalidConfig> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const grantees = yield* roles(options.grantTo)
    const parts = [
      `-- tidings migrations for schema ${schema}`,
      script([bootstrap(schema)]),
      ...all.map((m) =>
        `-- ${String(m.version).padStart(4, "0")} ${m.name}\n${script(migrationTransactions(schema, m))}`
      ),
      ...(grantees.length > 0 ? [`-- grants\n${script([grantStatements(schema, grantees)])}`] : [])
    ]
    return `${parts.join("\n\n")}\n`
  })

/**
 * The SQL the Migrator runs, as statements per transaction: the same text is executed by
 * `Migrator.run` and printed by `Migrator.render` / `Migrator.pending`.
 * @internal
 */
import type { Migration } from "./migrations.ts"

/** Tables the app works on (SELECT, INSERT, UPDATE, DELETE); it only reads `tidings_migrations`. */
export const appTables: ReadonlyArray<string> = [
  "outbox",
  "saga",
  "saga_step",
  "inbox",
  "projection_position",
  "log",
  "log_stream",
  "log_cursor",
  "log_member"
]

const ident = (name: string) => `"${name.replace(/"/g, "\"\"")}"`
const literal = (text: string) => `'${text.replace(/'/g, "''")}'`

/** The advisory lock every migrator of `schema` takes, per transaction. */
export const lockStatement = (schema: string) =>
  `SELECT pg_advisory_xact_lock(hashtext(${literal(`tidings.migrations.${schema}`)}))`

/**
 * Creates the schema and the migrations table when they are missing. A plain `CREATE SCHEMA IF NOT
 * EXISTS` needs CREATE on the database even when the schema exists, which its owner may not have;
 * `CREATE TABLE IF NOT EXISTS` likewise needs CREATE on the schema.
 */
export const bootstrap = (schema: string): ReadonlyArray<string> => [
  lockStatement(schema),
  `DO $tidings$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ${literal(schema)}) THEN
    CREATE SCHEMA ${ident(schema)};
  END IF;
  IF to_regclass(${literal(`${ident(schema)}.tidings_migrations`)}) IS NULL THEN
    CREATE TABLE ${ident(schema)}.tidings_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    );
  END IF;
END $tidings$`
]

/** The transactions of one migration: each under the lock, in the schema; the last records the version. */
export const migrationTransactions = (schema: string, migration: Migration): ReadonlyArray<ReadonlyArray<string>> =>
  migration.transactions.map((statements, index) => [
    lockStatement(schema),
    `SET LOCAL search_path TO ${ident(schema)}`,
    ...statements,
    ...(index === migration.transactions.length - 1
      ? [
        `INSERT INTO ${ident(schema)}.tidings_migrations (version, name) VALUES (${migration.version}, ${
          literal(migration.name)
        })`
      ]
      : [])
  ])

/** What the app's role needs, and nothing more: no DDL, no TRUNCATE, no ownership. */
export const grantStatements = (schema: string, roles: ReadonlyArray<string>): ReadonlyArray<string> => {
  if (roles.length === 0) return []
  const to = roles.map(ident).join(", ")
  return [
    lockStatement(schema),
    `GRANT USAGE ON SCHEMA ${ident(schema)} TO ${to}`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE ${
      appTables.map((t) => `${ident(schema)}.${t}`).join(", ")
    } TO ${to}`,
    `GRANT SELECT ON TABLE ${ident(schema)}.tidings_migrations TO ${to}`,
    `GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${ident(schema)} TO ${to}`
  ]
}

/** Transactions as a script, each in BEGIN ... COMMIT. */
export const script = (transactions: ReadonlyArray<ReadonlyArray<string>>): string =>
  transactions.map((statements) => ["BEGIN;", ...statements.map((st) => `${st};`), "COMMIT;"].join("\n")).join("\n\n")

/**
 * Applies the numbered SQL migrations of `migrations/` (compiled into this package) to a schema:
 * under an advisory lock, in one transaction, recording each version, so that it is idempotent and
 * safe to run from every instance at start.
 * @module
 */
import type { InvalidConfig, StoreError } from "@tidings/core/Errors"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { resolveSchema } from "./internal/identifier.ts"
import { type Migration, migrations } from "./internal/migrations.ts"
import { mapSqlError } from "./internal/storeError.ts"

/** The migrations this package carries, in order. */
export const all: ReadonlyArray<Migration> = migrations

/** Options of {@link run}. */
export interface Options {
  /** Schema to migrate (created when missing); default `tidings`. */
  readonly schema?: string
}

/** A migration that was applied now. */
export interface Applied {
  readonly version: number
  readonly name: string
}

/** Applies pending migrations; returns those applied by this call (empty when up to date). */
export const run = (options: Options = {}): Effect.Effect<ReadonlyArray<Applied>, InvalidConfig | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const sql = yield* SqlClient.SqlClient
    const table = sql(`${schema}.tidings_migrations`)
    return yield* sql.withTransaction(Effect.gen(function*() {
      // Concurrent starters queue here; the loser then sees the versions the winner applied.
      yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`tidings.migrations.${schema}`}))`
      yield* sql`CREATE SCHEMA IF NOT EXISTS ${sql(schema)}`
      yield* sql`CREATE TABLE IF NOT EXISTS ${table} (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`
      const rows = yield* sql<{ version: number }>`SELECT version FROM ${table}`
      const done = new Set(rows.map((r) => Number(r.version)))
      const applied: Array<Applied> = []
      for (const m of migrations) {
        if (done.has(m.version)) continue
        yield* sql`SET LOCAL search_path TO ${sql(schema)}`
        for (const statement of m.statements) yield* sql.unsafe(statement)
        yield* sql`INSERT INTO ${table} (version, name) VALUES (${m.version}, ${m.name})`
        applied.push({ version: m.version, name: m.name })
      }
      return applied
    })).pipe(mapSqlError("migrate"))
  }).pipe(Effect.withSpan("tidings.postgres.migrate"))

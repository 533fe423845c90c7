/**
 * The deploy step: Tidings' migrations and the orders table, run once from a machine that can reach
 * the database (`DATABASE_URL=postgres://... node examples/edge/migrate.ts`), not by the Worker: DDL
 * does not belong in request handling.
 */
import { Migrator, PgClient } from "@tidings/postgres"
import { Effect, Redacted } from "effect"
import * as Domain from "./domain.ts"

/** Applies the migrations to `schema` and creates the orders table. */
export const migrate = (url: string, schema: string) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const applied = yield* Migrator.run({ schema })
      yield* Domain.createTables(schema)
      return applied.length
    }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))
  )

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = process.env["DATABASE_URL"]
  if (url === undefined) {
    console.error("set DATABASE_URL=postgres://...")
    process.exit(2)
  }
  const schema = process.env["TIDINGS_SCHEMA"] ?? "edge"
  const applied = await migrate(url, schema)
  console.log(`schema ${schema}: ${applied} migrations applied, orders table ready`)
}

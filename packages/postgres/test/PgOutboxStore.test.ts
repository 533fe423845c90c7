import { Effect, Layer } from "effect"
import { outboxStoreContract } from "../../core/test/OutboxStoreContract.ts"
import { freshSchema, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

// The Postgres store passes the same contract as the memory store, here through @effect/sql-pg's
// SqlClient (the stores depend only on effect/sql).
outboxStoreContract(
  "postgres via @effect/sql-pg",
  Effect.gen(function*() {
    const context = yield* Layer.build(sqlPgLayer())
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema()
      return yield* PgOutboxStore.make({ schema })
    }).pipe(Effect.provideContext(context))
  })
)

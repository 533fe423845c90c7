import { sagaStoreContract } from "@tidings/core/testing"
import { Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import { freshSchema, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"

/** A fresh saga store on a fresh schema, over the given SqlClient layer, living as long as the scope. */
const makeStore = (client: Layer.Layer<SqlClient.SqlClient, unknown>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(client)
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema("saga")
      return yield* PgSagaStore.make({ schema })
    }).pipe(Effect.provideContext(context))
  })

// The Postgres store passes the same contract as the memory store, on our postgres.js client and on
// @effect/sql-pg's (the store depends only on effect/sql's SqlClient).
sagaStoreContract("postgres via PgClient (postgres.js)", makeStore(pgClientLayer()))
sagaStoreContract("postgres via @effect/sql-pg", makeStore(sqlPgLayer()))

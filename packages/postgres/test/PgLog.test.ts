import { assert, describe, it } from "@effect/vitest"
import { logConsumerContract, logRelayContract } from "@tidings/core/testing"
import { Effect, Exit, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import { freshSchema, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgLogStore from "../src/PgLogStore.ts"

/** A fresh schema and log store over a pool of its own (our postgres.js driver or @effect/sql-pg). */
const pgStores = (client: Layer.Layer<SqlClient.SqlClient, unknown> = pgClientLayer()) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(client)
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema("log")
      return yield* PgLogStore.make({ schema, partitions: 4 })
    }).pipe(Effect.provideContext(context))
  })

logRelayContract("postgres", pgStores())
logConsumerContract("postgres", pgStores())
logConsumerContract("postgres (@effect/sql-pg)", pgStores(sqlPgLayer()))

describe("PgLogStore", () => {
  it.live("the partition count is fixed at first use: another count is a configuration error", () =>
    Effect.scoped(Effect.gen(function*() {
      const schema = yield* freshSchema("logcfg")
      const first = yield* PgLogStore.make({ schema, partitions: 8 })
      assert.strictEqual(first.log.partitions, 8)
      assert.strictEqual((yield* PgLogStore.make({ schema })).log.partitions, 8, "read back when not given")
      const other = yield* Effect.exit(PgLogStore.make({ schema, partitions: 16 }))
      assert.isTrue(Exit.isFailure(other))
      if (Exit.isFailure(other)) assert.match(String(other.cause), /InvalidConfig[\s\S]*8 partitions/)
      const bad = yield* Effect.exit(PgLogStore.make({ schema, partitions: 0 }))
      assert.isTrue(Exit.isFailure(bad))
    })).pipe(Effect.provide(pgClientLayer())))
})

import { Effect, Layer } from "effect"
import { relayContract } from "../../core/test/RelayContract.ts"
import { freshSchema, sqlPgLayer } from "../../../test/support/pg.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"

relayContract(
  "postgres",
  Effect.gen(function*() {
    const context = yield* Layer.build(sqlPgLayer())
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema()
      return yield* PgOutboxStore.make({ schema })
    }).pipe(Effect.provideContext(context))
  })
)

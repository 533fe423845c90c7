/**
 * Running `tidings` in the tests: in-process (`Cli.run` with its output captured) against a fresh
 * schema of the test PostgreSQL, and as a child process on the runtime the suite runs on.
 */
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgSagaStore from "@tidings/postgres/PgSagaStore"
import { Duration, Effect, Layer, ManagedRuntime, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as path from "node:path"
import { pgClientLayer, pgUrl } from "../../../test/support/pg.ts"
import * as Cli from "../src/Cli.ts"

/** The executable's source (Node strips its types; Deno runs it as is). */
export const bin = path.join(import.meta.dirname, "../src/bin.ts")

/** What one run printed, and its exit code. */
export interface Ran {
  readonly code: number
  readonly out: string
  readonly err: string
  readonly json: any
}

/** Runs `tidings` in-process with `args`. */
export const tidings = async (...args: ReadonlyArray<string>): Promise<Ran> => {
  let out = ""
  let err = ""
  const code = await Effect.runPromise(
    Cli.run(args).pipe(
      Effect.provideService(Cli.Output, {
        write: (t) => void (out += t),
        error: (t) => void (err += t),
        interactive: false,
        columns: 160
      })
    )
  )
  let json: unknown
  try {
    json = JSON.parse(out)
  } catch {
    json = undefined
  }
  return { code, out, err, json }
}

/** The flags naming the test database and a schema. */
export const target = (schema: string) => ["--database-url", pgUrl(), "--schema", schema] as const

export const Shipped = Event.define("parcel.shipped", {
  aggregateType: "parcel",
  schema: Schema.Struct({ n: Schema.Int })
})
export const Billed = Event.define("invoice.billed", {
  aggregateType: "invoice",
  schema: Schema.Struct({ n: Schema.Int })
})

/** The stores of `schema` (migrated) on the test database, for arranging state. */
export const stores = (schema: string) => {
  const client = pgClientLayer(pgUrl(), 4)
  const layer = Layer.mergeAll(
    PgOutboxStore.layer({ schema }),
    PgInboxStore.layer({ schema }),
    PgSagaStore.layer({ schema })
  ).pipe(
    Layer.provideMerge(Layer.effectDiscard(Migrator.run({ schema }))),
    Layer.provideMerge(client)
  )
  return ManagedRuntime.make(layer)
}

/** Appends events and, when `fail`, claims and fails them as a relay would after a refusal. */
export const appendEvents = (
  events: ReadonlyArray<ReturnType<typeof Shipped.make> | ReturnType<typeof Billed.make>>,
  fail: boolean
) =>
  Effect.gen(function*() {
    const store = yield* OutboxStore
    const messages = yield* store.withTransaction(Outbox.appendAll(events))
    if (!fail) return messages
    const claimed = yield* store.claim({ relayId: "test-relay", batchSize: 1000, lease: Duration.seconds(30) })
    yield* store.settle("test-relay", {
      published: [],
      retry: [],
      failed: claimed.map((c) => ({ id: c.message.id, error: "refused by the test" }))
    })
    return messages
  })

/** Drops a schema. */
export const dropSchema = (schema: string) =>
  Effect.runPromise(
    SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
      Effect.provide(pgClientLayer(pgUrl(), 1)),
      Effect.ignore
    )
  )

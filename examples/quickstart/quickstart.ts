import { Event, Main, MemoryBroker, Outbox, Relay } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore } from "@tidings/postgres"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"

// 1. Declare an event type: a name, a version and a payload schema.
const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
})

// 2. Write the business change and its events in one transaction.
const placeOrder = (orderId: string, totalCents: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO orders (id, total_cents) VALUES (${orderId}, ${totalCents})`
      yield* Outbox.append(OrderPlaced, { aggregateId: orderId, payload: { orderId, totalCents } })
    }))
  })

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* Migrator.run({ schema: "tidings" })
  yield* sql`CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total_cents int NOT NULL)`
  const broker = yield* MemoryBroker.MemoryBroker
  // 3. Run a relay: it claims committed events, publishes them, and marks them published.
  yield* Effect.scoped(Effect.gen(function*() {
    yield* Layer.build(Relay.layer({ concurrency: 2 }))
    const id = crypto.randomUUID().slice(0, 8)
    yield* placeOrder(`order-${id}-1`, 1250)
    yield* placeOrder(`order-${id}-2`, 990)
    while ((yield* broker.delivered).length < 2) yield* Effect.sleep("10 millis")
  }))
  for (const { message } of yield* broker.delivered) {
    console.log(`delivered ${message.type} ${JSON.stringify(message.payload)}`)
  }
})

// 4. Wire the layers: Postgres client → outbox store; the in-memory broker as the publisher.
const Database = PgClient.layer({
  url: process.env["DATABASE_URL"] ?? "postgres://postgres:postgres@127.0.0.1:5432/postgres"
})
const AppLayer = Layer.mergeAll(PgOutboxStore.layer({ schema: "tidings" }), MemoryBroker.layer()).pipe(
  Layer.provideMerge(Database)
)

// 5. Run it: Ctrl-C (SIGINT) or SIGTERM interrupts it and closes everything; a failure exits with 1.
Main.runMain(program.pipe(Effect.provide(AppLayer)))

/**
 * A consumer process: `AmqpConsumer` on the run's quorum queue, its handler wrapped in `Inbox.wrap`
 * on `PgInboxStore`. The handler's effect is one `chaos.effects` row, written in the inbox
 * transaction, so it commits exactly when the message is marked processed. Unknown event types are
 * dead-lettered (nothing else publishes to this queue, so an unknown type is a malformed message).
 * @module
 */
import { Inbox } from "@tidings/core"
import { PgInboxStore, PgOutboxStore } from "@tidings/postgres"
import { AmqpConsumer, EventRegistry } from "@tidings/rabbitmq"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { OrderPlaced } from "../event.ts"
import * as Tables from "../tables.ts"
import * as Topology from "../topology.ts"
import { type Control, run } from "./lifecycle.ts"
import * as Settings from "./settings.ts"

const concurrency = 8
const registry = EventRegistry.make([OrderPlaced])

const effect = (delivery: AmqpConsumer.Delivery<EventRegistry.DecodedOf<typeof OrderPlaced>>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`INSERT INTO ${sql(Tables.effects)} (message_id, order_id, consumer, pid, attempt)
      VALUES (${
      delivery.messageId ?? ""
    }, ${delivery.event.payload.orderId}, ${Settings.name}, ${process.pid}, ${delivery.attempt})`
  })

const program = (control: Control) =>
  Effect.gen(function*() {
    yield* AmqpConsumer.make({
      name: Settings.name,
      queue: Topology.consumerQueue,
      registry,
      handler: Inbox.wrap(Tables.inboxConsumer, effect),
      concurrency,
      unknownType: "dead-letter"
    })
    // Names this process in the inbox's `started_by`, so the report can say who handled what.
    yield* Effect.sync(() => void process.stdout.write(`instance ${Inbox.instanceId}\n`))
    yield* control.ready
    return yield* Effect.never
  }).pipe(
    // Scoped inside the broker and database layers, so that the consumer stops (settling its
    // deliveries) before the connection and the client it uses close: see lifecycle.ts.
    Effect.scoped,
    Effect.provide(Settings.broker),
    Effect.provide(
      Layer.mergeAll(
        PgInboxStore.layer({ schema: Tables.tidingsSchema }),
        PgOutboxStore.layer({ schema: Tables.tidingsSchema })
      ).pipe(Layer.provideMerge(Settings.database(concurrency + 2)))
    )
  )

run(Settings.name, program)
